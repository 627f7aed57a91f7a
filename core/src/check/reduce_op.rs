//! The check of a reduction: the library has it, it applies to the element type, and a
//! premul-sum factor is one of that type.

use super::check_ctx::CheckCtx;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::feature::Feature;
use crate::reduce::{ReduceOp, Scalar};

/// The reduction exists in the loaded library and applies to `dtype`; a premul-sum factor has
/// the buffer's type (host) or a non-null address (device).
pub fn reduce_op(ctx: &CheckCtx<'_>, dtype: DataType, op: &ReduceOp) -> Result<()> {
    match op {
        ReduceOp::Avg => ctx.features.require(Feature::Avg)?,
        ReduceOp::PreMulSum(_) => ctx.features.require(Feature::PreMulSum)?,
        _ => {}
    }
    if !dtype.supports(op) {
        return Err(Error::invalid(
            "op",
            format_args!("an operator that applies to {dtype}: {op} does not (premul-sum takes float16, bfloat16, float32, float64)"),
        ));
    }
    if matches!(op, ReduceOp::Avg) && dtype.is_fp8() && ctx.size == 1 {
        // NCCL's single-rank path has no fp8 average and answers ncclInvalidArgument (NCCL
        // 2.28, one rank): refused here, named, before the library is called.
        return Err(Error::invalid(
            "op",
            format_args!("sum, prod, min or max on {dtype} in a 1-rank communicator (NCCL has no single-rank fp8 avg)"),
        ));
    }
    match op {
        ReduceOp::PreMulSum(Scalar::Host(s)) if s.dtype() != dtype => Err(Error::invalid(
            "scalar",
            format_args!(
                "a premul-sum factor of the buffer's type {dtype}, got {}",
                s.dtype()
            ),
        )),
        ReduceOp::PreMulSum(Scalar::Device { addr }) => device_factor(*addr, dtype),
        _ => Ok(()),
    }
}

/// A device premul-sum factor: one element of `dtype` at a non-null, aligned address whose
/// element does not wrap the address space (NCCL reads it when the collective runs).
fn device_factor(addr: usize, dtype: DataType) -> Result<()> {
    let fits = addr.checked_add(dtype.size()).is_some();
    if addr == 0 || !addr.is_multiple_of(dtype.size()) || !fits {
        return Err(Error::invalid(
            "scalar",
            format_args!(
                "a non-null device address of one {dtype} aligned to {} bytes for the premul-sum factor, got {addr:#x}",
                dtype.size()
            ),
        ));
    }
    Ok(())
}

//! Element types: whether the loaded library can carry an operation's type, and the type the
//! operation is handed to the library as (its wire type).
//!
//! An operation that only moves elements (every kind but the four reductions, see
//! [`OpKind::reduces`]) delivers the bytes it was given whatever type it reads them as. So fp8
//! (e4m3, e5m2) travels as `uint8` (one byte each, the same count) on a library without its own
//! fp8 types ([`Feature::Float8`], NCCL 2.24.3+), as PyTorch's process group does on any NCCL;
//! only reducing fp8 needs the library's fp8 arithmetic. [`dtype`] and [`wire_dtype`] state the
//! one rule from both sides: whatever [`dtype`] accepts, [`wire_dtype`] maps to a type the
//! library has.

use super::check_ctx::CheckCtx;
use crate::dtype::DataType;
use crate::error::Result;
use crate::feature::{Feature, FeatureSet};
use crate::op::CommOp;
#[cfg(doc)]
use crate::op::OpKind;

/// `reduces` of [`dtype`] for the four reductions.
pub(super) const REDUCED: bool = true;
/// `reduces` of [`dtype`] for every operation that only moves elements.
pub(super) const MOVED: bool = false;

/// The feature the library needs to know `dtype` as a type of its own (`None`: every release).
const fn feature_of(dtype: DataType) -> Option<Feature> {
    match dtype {
        DataType::Bfloat16 => Some(Feature::Bfloat16),
        DataType::Float8E4M3 | DataType::Float8E5M2 => Some(Feature::Float8),
        _ => None,
    }
}

/// The byte-sized type `dtype` may travel as when the library lacks it and the operation only
/// moves data: `uint8` for fp8; `None` for every other type (bfloat16 has no stand-in: every
/// release oxccl loads has it, and one hiding it refuses it).
const fn stand_in(dtype: DataType) -> Option<DataType> {
    if dtype.is_fp8() {
        Some(DataType::Uint8)
    } else {
        None
    }
}

/// The element type can be used by an operation on the loaded library: `reduces` says whether
/// the operation reduces it ([`OpKind::reduces`]). bfloat16 needs [`Feature::Bfloat16`]; fp8
/// needs [`Feature::Float8`] to be reduced, and nothing to be moved (it travels as `uint8`, see
/// [`wire_dtype`]). A refusal is [`crate::Error::Unsupported`] naming the feature, the version
/// that brought it and the loaded one.
pub fn dtype(ctx: &CheckCtx<'_>, dtype: DataType, reduces: bool) -> Result<()> {
    match feature_of(dtype) {
        Some(f) => match ctx.features.require(f) {
            Err(_) if !reduces && stand_in(dtype).is_some() => Ok(()),
            r => r,
        },
        None => Ok(()),
    }
}

/// The element type an operation on `dtype` is handed to the library as: `uint8` for fp8 when
/// the library lacks [`Feature::Float8`] and the operation does not reduce (the same count: fp8
/// is one byte), otherwise `dtype` itself. Total: for a combination [`dtype`] refuses it
/// answers `dtype` (the check has refused the call before any library sees it).
pub fn wire_dtype(dtype: DataType, reduces: bool, features: &FeatureSet) -> DataType {
    match (feature_of(dtype), stand_in(dtype)) {
        (Some(f), Some(s)) if !reduces && !features.has(f) => s,
        _ => dtype,
    }
}

/// `op` as the library is to be called with it: the same buffers and counts, its element type
/// replaced by [`wire_dtype`] for its kind. A backend applies it once, after [`super::op`]
/// accepted `op`, and issues the result.
pub fn wire_op<'a>(op: &CommOp<'a>, features: &FeatureSet) -> CommOp<'a> {
    match op.dtype() {
        Some(dt) => {
            let wire = wire_dtype(dt, op.kind().reduces(), features);
            debug_assert!(wire.size() == dt.size());
            op.with_dtype(wire)
        }
        None => *op,
    }
}

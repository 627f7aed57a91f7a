//! Rust element types NCCL can move.

use oxccl_core::{DataType, Error, ReduceOp, Result};

/// The floating-point formats the NaN check knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatFormat {
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single.
    F32,
    /// IEEE double.
    F64,
}

/// A Rust type with an NCCL data type. `bool` travels as `uint8`, with sum as max (logical or)
/// and product as min (logical and); average of bools is refused, as in PyTorch.
///
/// Implemented for every type NCCL has; a program rarely needs its own implementation (a
/// newtype over one of them, say).
///
/// # Safety
///
/// The backends size every transfer, and the NaN check its kernel's reads, from these items,
/// not from the Rust type: an implementation must have `size_of::<Self>() ==
/// Self::DTYPE.size()` and an alignment NCCL's type allows, `FLOAT` (when `Some`) must be
/// the layout of `Self`, and `map_op` must return only operators `Self::DTYPE` supports, never
/// a premul-sum with a device factor (an address safe code could not vouch for). Otherwise an
/// operation reads or writes past the buffer. All-zero bytes must be a valid value (buffers
/// start zeroed).
pub unsafe trait Element: DeviceValue + Copy + Send + Sync + 'static {
    /// The NCCL type of the elements.
    const DTYPE: DataType;

    /// The float format the NaN check tests, `None` for types it skips (integers, fp8, bool).
    const FLOAT: Option<FloatFormat> = None;

    /// The operator NCCL should apply for `op` on this type.
    fn map_op(op: ReduceOp) -> Result<ReduceOp> {
        Ok(op)
    }

    /// Whether the value is a NaN (false for types without one).
    fn is_nan(self) -> bool {
        false
    }
}

/// What device memory needs of an element: cudarc's `DeviceRepr` and `ValidAsZeroBits` with
/// the `nccl` feature (device slices of it are made and zeroed), nothing without it.
#[cfg(feature = "nccl")]
pub trait DeviceValue: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits {}
#[cfg(feature = "nccl")]
impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> DeviceValue for T {}

/// What device memory needs of an element: nothing in a build without the `nccl` feature.
#[cfg(not(feature = "nccl"))]
pub trait DeviceValue {}
#[cfg(not(feature = "nccl"))]
impl<T> DeviceValue for T {}

macro_rules! nccl_type {
    ($($t:ty => $d:ident),* $(,)?) => {
        // SAFETY: each type is the size and layout of its NCCL type (pinned by the test
        // `every_type_is_the_size_of_its_nccl_type`); the default `map_op` returns the
        // operator it was given, which the core's check applies to the type.
        $(unsafe impl Element for $t { const DTYPE: DataType = DataType::$d; })*
    };
}

nccl_type! {
    i8 => Int8, u8 => Uint8, i32 => Int32, u32 => Uint32, i64 => Int64, u64 => Uint64,
    float8::F8E4M3 => Float8E4M3, float8::F8E5M2 => Float8E5M2,
}

macro_rules! float_type {
    ($($t:ty => $d:ident, $f:ident),* $(,)?) => {
        // SAFETY: as in `nccl_type!`; `FLOAT` is the type's own IEEE (or bfloat16) format.
        $(unsafe impl Element for $t {
            const DTYPE: DataType = DataType::$d;
            const FLOAT: Option<FloatFormat> = Some(FloatFormat::$f);
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        })*
    };
}

float_type! {
    half::f16 => Float16, F16, f32 => Float32, F32, f64 => Float64, F64,
    half::bf16 => Bfloat16, Bf16,
}

// SAFETY: a bool is one byte holding 0 or 1, as uint8; max and min of such bytes (the only
// operators `map_op` returns) are 0 or 1 again, so what comes back is a valid bool.
unsafe impl Element for bool {
    const DTYPE: DataType = DataType::Uint8;

    fn map_op(op: ReduceOp) -> Result<ReduceOp> {
        match op {
            ReduceOp::Sum | ReduceOp::Max => Ok(ReduceOp::Max),
            ReduceOp::Prod | ReduceOp::Min => Ok(ReduceOp::Min),
            other => Err(Error::invalid(
                "op",
                format_args!("sum, prod, min or max on bool, got {other}"),
            )),
        }
    }
}

/// The operator NCCL applies for `op` on `T`, refusing a premul-sum factor given as a raw
/// device address: safe code cannot vouch for one (it goes through a device buffer or the raw
/// `issue`).
pub fn host_op<T: Element>(op: ReduceOp) -> Result<ReduceOp> {
    if let ReduceOp::PreMulSum(oxccl_core::Scalar::Device { .. }) = op {
        return Err(Error::invalid(
            "op",
            format_args!("a host premul-sum factor here; a device factor goes through Comm::all_reduce_premul_device or the raw Comm::issue"),
        ));
    }
    T::map_op(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bool_maps_sum_to_max_and_refuses_avg() {
        assert_eq!(bool::map_op(ReduceOp::Sum).unwrap(), ReduceOp::Max);
        assert_eq!(bool::map_op(ReduceOp::Prod).unwrap(), ReduceOp::Min);
        assert!(matches!(
            bool::map_op(ReduceOp::Avg),
            Err(Error::InvalidArgument { arg: "op", .. })
        ));
        assert_eq!(f32::map_op(ReduceOp::Avg).unwrap(), ReduceOp::Avg);
        assert_eq!(<half::bf16 as Element>::DTYPE, DataType::Bfloat16);
    }

    fn size_matches<T: Element>() {
        assert_eq!(
            std::mem::size_of::<T>(),
            T::DTYPE.size(),
            "{}",
            std::any::type_name::<T>()
        );
    }

    #[test]
    fn every_type_is_the_size_of_its_nccl_type() {
        size_matches::<i8>();
        size_matches::<u8>();
        size_matches::<i32>();
        size_matches::<u32>();
        size_matches::<i64>();
        size_matches::<u64>();
        size_matches::<float8::F8E4M3>();
        size_matches::<float8::F8E5M2>();
        size_matches::<half::f16>();
        size_matches::<half::bf16>();
        size_matches::<f32>();
        size_matches::<f64>();
        size_matches::<bool>();
    }
}

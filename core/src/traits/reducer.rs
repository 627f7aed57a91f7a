use crate::dtype::DataType;
use crate::error::Result;
use crate::reduce::ReduceOp;

/// Turns a [`ReduceOp`] into the backend's operator handle. Built-in ops map to constants;
/// premul-sum ops are created on the communicator and destroyed when the handle drops, so
/// they are never leaked (NCCL allows the destroy as soon as the last call using it returned).
pub trait Reducer {
    /// The backend's operator handle; dropping it releases what it holds.
    type RedOp;

    /// The handle for `op` on buffers of `dtype`.
    fn create_op(&self, op: &ReduceOp, dtype: DataType) -> Result<Self::RedOp>;
}

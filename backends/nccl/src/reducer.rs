//! NCCL reduction operators: built-in codes, and premul-sum ops created on the communicator and
//! destroyed when dropped (crate-private: only `issue` makes them).

use crate::comm_inner::CommInner;
use crate::ffi::ScalarAt;
use oxccl_core::{text, DataType, Error, ReduceOp, Result, Scalar};
use std::sync::Arc;

/// An `ncclRedOp_t` ready for a call. Premul-sum ops hold their communicator and destroy
/// themselves on drop (unless the communicator was released first, which frees them). An
/// internal detail of `issue`: made and dropped inside one issue call, under the
/// communicator's call lock.
pub(crate) struct NcclRedOp {
    code: i32,
    owner: Option<Arc<CommInner>>,
}

impl std::fmt::Debug for NcclRedOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclRedOp")
            .field("code", &self.code)
            .field("created", &self.owner.is_some())
            .finish()
    }
}

impl NcclRedOp {
    /// The `ncclRedOp_t` value.
    pub(crate) fn code(&self) -> i32 {
        self.code
    }

    pub(crate) fn create(
        comm: &Arc<CommInner>,
        op: &ReduceOp,
        dtype: DataType,
    ) -> Result<NcclRedOp> {
        if let Some(code) = crate::codes::builtin_red_op(op) {
            return Ok(NcclRedOp { code, owner: None });
        }
        let ReduceOp::PreMulSum(scalar) = op else {
            return Err(Error::invalid("op", format_args!("a reduction operator")));
        };
        let lib = &comm.lib;
        let dt = crate::codes::data_type(dtype);
        let (status, code) = match scalar {
            Scalar::Host(h) => {
                let (mut bytes, _) = h.to_ne_bytes();
                let at = ScalarAt::Host(bytes.as_mut_ptr().cast());
                // SAFETY: live communicator; `bytes` holds one element of `dtype` (checked by
                // core::check) and NCCL reads it during this call.
                unsafe { crate::ffi::red_op_create_pre_mul_sum(lib.api(), comm.raw, at, dt)? }
            }
            Scalar::Device { addr } => {
                let at = ScalarAt::Device(*addr);
                // SAFETY: live communicator; the device address holds one element of `dtype`
                // and stays valid until the collective runs (the caller's contract).
                unsafe { crate::ffi::red_op_create_pre_mul_sum(lib.api(), comm.raw, at, dt)? }
            }
        };
        lib.check(status, comm.raw).map_err(|e| match e {
            Error::Backend {
                code,
                text: t,
                last,
            } => Error::Backend {
                code,
                text: text!("creating premul-sum: {t}"),
                last,
            },
            other => other,
        })?;
        Ok(NcclRedOp {
            code,
            owner: Some(comm.clone()),
        })
    }
}

impl Drop for NcclRedOp {
    fn drop(&mut self) {
        let Some(comm) = self.owner.take() else {
            return;
        };
        // An abort from another thread may release the communicator meanwhile: `use_raw`
        // keeps it live for the destroy, or shows it released.
        let _live = comm.use_raw();
        if comm.is_released() {
            return;
        }
        // SAFETY: the op was created on this live communicator; NCCL allows destroying it as
        // soon as the last call using it has returned.
        if let Some(code) =
            // SAFETY: as said above.
            unsafe { crate::ffi::red_op_destroy(comm.lib.api(), comm.raw, self.code) }
        {
            if code != 0 {
                log::warn!("ncclRedOpDestroy({}) returned {code}", self.code);
            }
        }
    }
}

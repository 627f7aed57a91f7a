//! CUDA driver failures as oxccl errors.

use oxccl_core::{text, Error, ResultCode};

/// An [`Error::Backend`] for a CUDA driver failure met while doing `what`.
pub fn cuda_error(what: &str, e: cudarc::driver::DriverError) -> Error {
    Error::Backend {
        code: ResultCode::UNHANDLED_CUDA_ERROR,
        text: text!("CUDA driver error while {what}"),
        last: text!("{e:?}"),
    }
}

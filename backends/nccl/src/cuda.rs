//! CUDA driver failures as oxccl errors, and the driver's presence checked before cudarc is
//! asked for it (cudarc panics when `libcuda.so` cannot be loaded).

use oxccl_core::{text, Error, ResultCode};
use std::sync::OnceLock;

/// An [`Error::Backend`] for a CUDA driver failure met while doing `what`.
pub fn cuda_error(what: &str, e: cudarc::driver::DriverError) -> Error {
    Error::Backend {
        code: ResultCode::UNHANDLED_CUDA_ERROR,
        text: text!("CUDA driver error while {what}"),
        last: text!("{e:?}"),
    }
}

/// `Ok` when the CUDA driver library can be loaded; otherwise the error a machine without a GPU
/// gets (the NCCL backend needs NVIDIA GPUs; the mock world does not).
pub fn require_driver() -> Result<(), Error> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    let present = *PRESENT.get_or_init(crate::cuda_ffi::driver_present);
    if present {
        return Ok(());
    }
    Err(Error::Backend {
        code: ResultCode::UNHANDLED_CUDA_ERROR,
        text: text!("no CUDA driver: the NCCL backend needs NVIDIA GPUs, none found"),
        last: text!("libcuda.so could not be loaded"),
    })
}

/// The GPUs CUDA sees in this process (`CUDA_VISIBLE_DEVICES` applies); an error without a
/// CUDA driver.
pub fn device_count() -> Result<u32, Error> {
    require_driver()?;
    let n = cudarc::driver::CudaContext::device_count()
        .map_err(|e| cuda_error("counting the devices", e))?;
    Ok(u32::try_from(n).unwrap_or(0))
}

/// The CUDA context of `device`, bound to the calling thread (NCCL's init uses the current
/// device).
pub(crate) fn context(
    device: oxccl_core::Device,
) -> Result<std::sync::Arc<cudarc::driver::CudaContext>, Error> {
    require_driver()?;
    let ctx = cudarc::driver::CudaContext::new(device.0 as usize)
        .map_err(|e| cuda_error("opening the device", e))?;
    ctx.bind_to_thread()
        .map_err(|e| cuda_error("binding the device to the thread", e))?;
    Ok(ctx)
}

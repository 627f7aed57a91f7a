//! The device buffer a barrier all-reduces.

use crate::comm_inner::CommInner;
use crate::cuda::cuda_error;
use crate::stream::NcclStream;
use oxccl_core::Result;

/// The one-element device buffer a barrier all-reduces, made on first use.
pub(super) fn barrier_scratch(comm: &CommInner, stream: &NcclStream) -> Result<usize> {
    if let Some(s) = comm.scratch.get() {
        return Ok(slice_addr(s, stream));
    }
    let s = stream
        .cuda()
        .alloc_zeros::<f32>(1)
        .map_err(|e| cuda_error("allocating barrier scratch", e))?;
    let _ = comm.scratch.set(s);
    comm.scratch
        .get()
        .map(|s| slice_addr(s, stream))
        .ok_or_else(|| crate::absent::base_symbol("scratch"))
}

/// The device address of `s`.
fn slice_addr(s: &cudarc::driver::CudaSlice<f32>, stream: &NcclStream) -> usize {
    use cudarc::driver::DevicePtr;
    let (ptr, _sync) = s.device_ptr(stream.cuda());
    ptr as usize
}

//! A few bytes from every rank of a communicator, gathered on the host: an all-gather through
//! the checked issue path, waited for (the peer-memory set-up exchanges its records so).

use crate::comm_inner::CommInner;
use crate::cuda::cuda_error;
use crate::stream::NcclStream;
use cudarc::driver::{DevicePtr, DevicePtrMut};
use oxccl_core::{CommOp, DataType, RawBuf, RawBufMut, Result};
use std::sync::Arc;

/// `mine` (the same length on every rank) from every rank, in rank order. The caller holds the
/// communicator's call lock.
pub(crate) fn gather_bytes(
    comm: &Arc<CommInner>,
    stream: &NcclStream,
    mine: &[u8],
) -> Result<Vec<u8>> {
    let st = stream.cuda();
    let send = st
        .clone_htod(mine)
        .map_err(|e| cuda_error("copying bytes to gather", e))?;
    let mut recv = st
        .alloc_zeros::<u8>(mine.len() * comm.size as usize)
        .map_err(|e| cuda_error("allocating the gathered bytes", e))?;
    {
        let (s, _s) = send.device_ptr(st);
        let (r, _r) = recv.device_ptr_mut(st);
        let op = CommOp::all_gather(
            RawBuf::new(s as usize, mine.len()),
            RawBufMut::new(r as usize, mine.len() * comm.size as usize),
            DataType::Uint8,
        );
        // SAFETY: both buffers are live device memory of the lengths given, on this stream,
        // and stay alive until the copy below waited for the gather.
        unsafe { crate::issue::issue_op::issue(comm, &op, stream)? };
    }
    st.clone_dtoh(&recv)
        .map_err(|e| cuda_error("reading the gathered bytes", e))
}

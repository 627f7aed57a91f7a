//! Issuing one checked operation: the native NCCL call where the library has it
//! ([`native`]), grouped send/recv where it does not ([`grouped`]: all-to-all, gather and
//! scatter before 2.28; the uneven variants always; all_gather_v / reduce_scatter_v as grouped
//! broadcasts / reduces, as PyTorch does).

mod grouped;
mod native;

use crate::codes::data_type;
use crate::comm_inner::CommInner;
use crate::cuda::cuda_error;
use crate::reducer::NcclRedOp;
use crate::stream::NcclStream;
use oxccl_core::{check, CommOp, DataType, Result, ResultCode};
use oxccl_loader::{Api, RawComm, RawStream};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

type P = *const c_void;
type M = *mut c_void;

fn p(addr: usize) -> P {
    addr as P
}

fn m(addr: usize) -> M {
    addr as M
}

/// Byte offset of element `i` of `dt` (lengths were checked, so this cannot overflow).
fn at(addr: usize, i: usize, dt: DataType) -> usize {
    addr + i * dt.size()
}

/// `first` when it failed, else the code of `next` (NCCL calls chained until one fails).
fn then(first: i32, next: impl FnOnce() -> i32) -> i32 {
    if first != 0 {
        first
    } else {
        next()
    }
}

/// Calls `f` for each rank in order, stopping at the first failing code.
fn each_rank(size: usize, f: impl FnMut(usize) -> i32) -> i32 {
    (0..size).map(f).find(|&r| r != 0).unwrap_or(0)
}

/// What every NCCL call of one issue shares: the table, the communicator and its place in it,
/// the stream, the features it may use, and the reduction handle (0 when none).
struct Ctx<'a> {
    api: &'a Api,
    comm: RawComm,
    stream: RawStream,
    rank: u32,
    size: usize,
    feats: &'a oxccl_core::FeatureSet,
    red: i32,
}

/// `ncclSend` or `ncclRecv`: the same arguments but for the buffer's mutability.
type P2pFn<B> = unsafe extern "C" fn(B, usize, c_int, c_int, RawComm, RawStream) -> c_int;

impl Ctx<'_> {
    /// `ncclSend` of `count` elements at `addr` to `peer`.
    ///
    /// # Safety
    /// `addr` holds `count` elements of `dt` on the communicator's device.
    unsafe fn send(&self, addr: usize, count: usize, dt: DataType, peer: u32) -> i32 {
        // SAFETY: the caller's contract.
        unsafe { self.p2p(self.api.send, p(addr), count, dt, peer) }
    }

    /// `ncclRecv` of `count` elements into `addr` from `peer`.
    ///
    /// # Safety
    /// `addr` has room for `count` elements of `dt` on the communicator's device.
    unsafe fn recv(&self, addr: usize, count: usize, dt: DataType, peer: u32) -> i32 {
        // SAFETY: the caller's contract.
        unsafe { self.p2p(self.api.recv, m(addr), count, dt, peer) }
    }

    /// One point-to-point call on this communicator and stream; `InvalidUsage` when the
    /// library lacks it.
    ///
    /// # Safety
    /// `buf` is valid for `count` elements of `dt` on the communicator's device.
    unsafe fn p2p<B>(&self, f: Option<P2pFn<B>>, buf: B, n: usize, dt: DataType, peer: u32) -> i32 {
        match f {
            // SAFETY: the caller's contract; the communicator is live and the stream its own.
            Some(f) => unsafe { f(buf, n, data_type(dt), peer as i32, self.comm, self.stream) },
            None => ResultCode::INVALID_USAGE.0,
        }
    }
}

/// Marks the memory of a captured operation's buffers: NCCL registers them by itself
/// (`NCCL_GRAPH_REGISTER`), so [`crate::NcclMem`] must not hand that memory out again (see
/// [`crate::mem::NcclMem::note_captured`]).
fn captured_buffers(op: &CommOp<'_>) {
    for (addr, bytes) in op.byte_spans() {
        if bytes > 0 {
            crate::mem::NcclMem::note_captured(addr, bytes);
        }
    }
}

/// Issues `op` on `stream` after `check::op`, waiting out a nonblocking init first. See
/// [`oxccl_core::Communicator::issue`] for the contract; the caller holds the communicator's
/// call lock.
pub(crate) unsafe fn issue(
    comm: &Arc<CommInner>,
    op: &CommOp<'_>,
    stream: &NcclStream,
) -> Result<()> {
    check::op(op, &comm.check_ctx())?;
    comm.registry.one_kind(op, comm.rank)?;
    let op = &wire(op, &comm.settings.features);
    // Inside a capture begun on `stream`, the graph it makes will hold this communicator
    // (NCCL's release then waits for that graph): noted before the state check, so an abort
    // from another thread either sees it or makes the check below refuse.
    if stream.captured.note(comm) {
        captured_buffers(op);
    }
    comm.ready_for(op.kind().name())?;
    // Premul-sum ops live until the call returns, then are destroyed (allowed by NCCL).
    let red = match op.reduce_op() {
        Some(r) => Some(NcclRedOp::create(
            comm,
            r,
            op.dtype().unwrap_or(DataType::Float32),
        )?),
        None => None,
    };
    let c = Ctx {
        api: comm.lib.api(),
        comm: comm.raw,
        stream: stream.raw(),
        rank: comm.rank,
        size: comm.size as usize,
        feats: &comm.settings.features,
        red: red.as_ref().map_or(0, NcclRedOp::code),
    };
    let scratch = match op {
        // Its scratch is allocated on first use and reached through cudarc's event tracking,
        // neither of which a capture allows.
        CommOp::Barrier if oxccl_core::Capture::is_capturing(stream) => {
            return Err(oxccl_core::CaptureError::Unsupported.error_str(
                "a barrier cannot be captured into a graph: issue it outside the capture",
            ))
        }
        CommOp::Barrier => barrier_scratch(comm, stream)?,
        _ => 0,
    };
    // SAFETY: buffers were validated by `check::op` against the lengths the caller promised in
    // `issue`'s contract; `c.comm` is live (ready above); the barrier's scratch is one element
    // of this device.
    let code = match unsafe { native::call(&c, op, scratch)? } {
        Some(code) => code,
        // SAFETY: as above.
        None => unsafe { grouped::call(&c, op)? },
    };
    drop(red);
    let r = comm.finish(code, op.kind().name());
    match r {
        Err(e) if code != 0 && oxccl_core::Capture::is_capturing(stream) => {
            Err(failed_in_capture(op.kind().name(), &e))
        }
        r => r,
    }
}

/// An operation NCCL failed inside a capture, with the likely cause: NCCL connects a
/// communicator to its peers at its first operation that needs each connection
/// (`NCCL_RUNTIME_CONNECT`, on by default), and a capture forbids what connecting does
/// (NCCL 2.28: "failed to peer with device 0: operation not permitted when stream is
/// capturing", then `ncclInternalError`). NCCL's own error is kept in the text.
fn failed_in_capture(what: &str, e: &oxccl_core::Error) -> oxccl_core::Error {
    // The advice first: errors hold 192 bytes inline, and NCCL's own text is long (so it is
    // logged whole too).
    log::warn!("{what} failed inside a graph capture: {e}");
    oxccl_core::CaptureError::Unsupported.error(format_args!(
        "{what} failed in a capture: run it once outside the capture first (NCCL connects \
         peers at first use) or set NCCL_RUNTIME_CONNECT=0; communicator failed. NCCL: {e}"
    ))
}

/// `op` with the element type the library is called with: fp8 that is only moved goes as
/// `ncclUint8` (same count) to a library without fp8 ([`crate::codes::wire`]). Every native and
/// grouped call below takes its `ncclDataType_t` from the result.
fn wire<'a>(op: &CommOp<'a>, features: &oxccl_core::FeatureSet) -> CommOp<'a> {
    crate::codes::wire(op, features)
}

/// The one-element device buffer a barrier all-reduces, made on first use.
fn barrier_scratch(comm: &CommInner, stream: &NcclStream) -> Result<usize> {
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

fn slice_addr(s: &cudarc::driver::CudaSlice<f32>, stream: &NcclStream) -> usize {
    use cudarc::driver::DevicePtr;
    let (ptr, _sync) = s.device_ptr(stream.cuda());
    ptr as usize
}

#[cfg(test)]
mod tests;

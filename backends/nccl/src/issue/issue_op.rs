//! Issuing one checked operation: the native call where the library has one, grouped calls
//! where it does not (see the `issue` folder).

use super::barrier_scratch::barrier_scratch;
use super::call_ctx::Ctx;
use super::{grouped, native};
use crate::comm_inner::CommInner;
use crate::reducer::NcclRedOp;
use crate::stream::{NcclEvent, NcclStream};
use oxccl_core::{check, CommOp, DataType, Result};
use std::sync::Arc;

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

/// What every issue of `op` on `stream` does before its call (the plain one here, the
/// configured one in `configured`): `check::op`, the window rule, the element type the library
/// takes, the capture's note, and the ready check (waiting out a nonblocking init). Returns
/// the op as the library is called with it, and whether a capture begun on `stream` is open.
pub(super) fn admit<'a>(
    comm: &Arc<CommInner>,
    op: &CommOp<'a>,
    stream: &NcclStream,
) -> Result<(CommOp<'a>, bool)> {
    check::op(op, &comm.check_ctx())?;
    comm.registry.one_kind(op, comm.rank)?;
    let op = wire(op, &comm.settings.features);
    // Inside a capture begun on `stream`, the graph it makes will hold this communicator
    // (NCCL's release then waits for that graph): noted before the state check, so an abort
    // from another thread either sees it or makes the check below refuse.
    let captured = stream.captured.note(comm);
    if captured {
        captured_buffers(&op);
    }
    comm.ready_for(op.kind().name())?;
    Ok((op, captured))
}

/// The reduction handle of `op`, if it reduces: premul-sum ops live until the handle is
/// dropped after the call, then are destroyed (allowed by NCCL).
pub(super) fn reduction(comm: &Arc<CommInner>, op: &CommOp<'_>) -> Result<Option<NcclRedOp>> {
    op.reduce_op()
        .map(|r| NcclRedOp::create(comm, r, op.dtype().unwrap_or(DataType::Float32)))
        .transpose()
}

/// Issues `op` on `stream` after `check::op`, waiting out a nonblocking init first. See
/// [`oxccl_core::Communicator::issue`] for the contract; the caller holds the communicator's
/// call lock.
pub(crate) unsafe fn issue(
    comm: &Arc<CommInner>,
    op: &CommOp<'_>,
    stream: &NcclStream,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { issue_ended(comm, op, stream, false) }.map(|_| ())
}

/// [`issue`], and with `want_end` the operation's end where its launch marks one (see
/// [`oxccl_core::Communicator::issue_ended`]): the end mark a small call of oxccl's kernels
/// writes as it ends (see `end_mark`). Never inside a capture begun on `stream`.
pub(crate) unsafe fn issue_ended(
    comm: &Arc<CommInner>,
    op: &CommOp<'_>,
    stream: &NcclStream,
    want_end: bool,
) -> Result<Option<NcclEvent>> {
    let (op, captured) = admit(comm, op, stream)?;
    let op = &op;
    // oxccl's own kernels, where the group has peer memory and the policy picks one; never
    // inside an NCCL group (NCCL launches the group's calls at its end, and a kernel launched
    // now would run before the calls queued ahead of it).
    // The group is looked up only for a call a kernel would take.
    if let Some(peer) = comm.peer.read().as_ref() {
        let outside_group = || !crate::group_call::is_open(&comm.lib);
        // Asked (and made on first use) only for a call that would mark its end.
        let marks = || match want_end && !captured {
            true => stream.marks(),
            false => Ok(None),
        };
        // SAFETY: `op` passed `check::op` above; the caller keeps its buffers valid until it
        // completes on `stream` (this function's contract); `marks` are `stream`'s.
        if let Some(done) = unsafe { peer.issue(op, stream.cuda(), captured, outside_group, marks) }
        {
            return done.map(|end| end.map(|(m, mark)| NcclEvent::marked(m.clone(), mark)));
        }
    }
    let red = reduction(comm, op)?;
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
        r => r.map(|()| None),
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
pub(super) fn wire<'a>(op: &CommOp<'a>, features: &oxccl_core::FeatureSet) -> CommOp<'a> {
    crate::codes::wire(op, features)
}

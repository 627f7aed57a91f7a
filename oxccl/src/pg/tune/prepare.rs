//! Applying the tune table to one operation: the mode its buffers take, and the
//! registrations it needs made before it is issued (what `Issuer::prepare` does).

use super::super::op_facts::OpFacts;
use super::reg_cache::RegCache;
use crate::buffer::CommMem;
use oxccl_core::{Communicator, OpKind, Result, Windows};
use oxccl_rules::tune::{RegMode, TuneTable};
use std::time::Duration;

/// The buffers of `op` a mode applies to: both of a collective; of a send or receive, only
/// the one it moves (the other is absent, not plain).
fn moved<'m>(op: &OpFacts, mems: &'m [Option<CommMem>]) -> &'m [Option<CommMem>] {
    match (op.kind, mems) {
        (OpKind::Send, [send, _]) => std::slice::from_ref(send),
        (OpKind::Recv, [_, recv]) => std::slice::from_ref(recv),
        _ => mems,
    }
}

/// Chooses the mode of an operation on `mems` (one per buffer it uses, `None` for a plain
/// buffer) and makes the registrations it needs on `comm` before it is issued; inside a
/// capture (`capturing`) only checks that they were made before (see the module's
/// documentation).
pub(crate) fn prepare_on<C: Communicator + Windows>(
    comm: &C,
    regs: &RegCache,
    table: Option<&TuneTable>,
    op: &OpFacts,
    mems: &[Option<CommMem>],
    capturing: bool,
    timeout: Duration,
) -> Result<RegMode> {
    let mut st = regs.lock();
    // The sweep walks every cached buffer: at every operation while they are few, every
    // 64th once they are many, so a group with hundreds of buffers pays O(1) per op. Never
    // inside a capture: releasing is a host call too.
    let issued: u64 = st.ops.iter().sum();
    if !capturing && (st.bufs.len() <= 16 || issued.is_multiple_of(64)) {
        st.sweep(comm);
    }
    let mems = moved(op, mems);
    let bytes = op.numel.0.max(op.numel.1) as u64 * op.dtype.size() as u64;
    let registrable = !mems.is_empty() && mems.iter().all(Option::is_some);
    let chosen = table.map_or(RegMode::Plain, |t| {
        t.choose(op.kind, op.dtype, bytes, registrable)
    });
    let mode = st.one_kind(mems, chosen);
    for m in mems.iter().flatten() {
        if capturing {
            st.check_ready(m, mode, op, bytes)?;
        } else {
            st.ensure(comm, m, mode, timeout)?;
        }
    }
    st.ops[usize::from(mode.level())] += 1;
    Ok(mode)
}

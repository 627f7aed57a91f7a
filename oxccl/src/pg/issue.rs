//! The one path every operation of a group is issued through: the refusals, the events of
//! its work, its sequence number, its flight-recorder entry and its place in the watchdog.

use super::backend::PgBackend;
use super::capture_state::Captor;
use super::comm_slot::Entry;
use super::inner::PgInner;
use super::op_facts::OpFacts;
use super::tune::prepare::prepare_on;
use super::work::tracked::TrackedWork;
use super::work::{EventOf, Work, WorkOf};
use crate::buffer::{CommMem, StreamOf};
use crate::recorder::slot::{PendingTrace, TraceSlot};
use crate::recorder::{now_ns, ns_since};
use crate::watchdog::Watchdog;
use oxccl_core::state::work::WorkInfo;
use oxccl_core::{text, CommOp, CommState, Communicator, Device, Error, OpKind, Result, Stream};
use oxccl_rules::recorder::{TensorMeta, TraceRecord};
use oxccl_rules::tune::{RegMode, TuneTable};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What [`PgInner::issue`] hands an operation's body: the stream and device to take buffers
/// on, and the call that issues on the communicator.
pub(crate) struct Issuer<'a, B: PgBackend> {
    pub entry: &'a Entry<B>,
    pub device: Device,
    /// Inside a graph capture: where buffers are reached instead (see `capture`).
    pub cap: Option<Captor<'a, B>>,
    /// The group's timeout in ms (bounds what preparing buffers may wait for; read only then).
    pub timeout_ms: &'a std::sync::atomic::AtomicU64,
    /// Whether the work's events are timed.
    pub timing: bool,
    /// The end event [`Issuer::issue_ending`] recorded: the work's, shared with its buffers.
    pub end: std::cell::Cell<Option<EventOf<B>>>,
}

impl<'a, B: PgBackend> Issuer<'a, B> {
    /// The stream buffers are taken on: the group's stream, or the copy stream inside a
    /// capture (the capturing stream may not wait on the buffers' earlier events).
    pub fn stream(&self) -> &'a StreamOf<B> {
        match &self.cap {
            Some(c) => c.copy,
            None => &self.entry.stream,
        }
    }

    /// Issues `op` and ends the accesses of its buffers, `held`, after it: outside a capture
    /// with the work's end event, the one its issue made or else one recorded here, shared
    /// with them (see [`Issuer::end_with_work`]).
    ///
    /// # Safety
    /// As [`Issuer::issue`]; `held` are the guards of the buffers of `op`.
    pub unsafe fn issue_ending<'x>(
        &self,
        op: &CommOp<'_>,
        held: impl IntoIterator<Item = B::Access<'x>>,
    ) -> Result<()> {
        if self.cap.is_some() {
            // SAFETY: forwarded contract.
            unsafe { self.issue(op)? };
            // Captured: nothing ran; the accesses record on the copy stream (see `capture`).
            return Ok(());
        }
        // Timed works need events with timing, which an issue does not make.
        let ended = match self.timing {
            // SAFETY: forwarded contract.
            true => unsafe { self.issue(op) }.map(|()| None),
            // SAFETY: forwarded contract; no capture is open (above).
            false => unsafe { self.entry.comm.issue_ended(op, &self.entry.stream) },
        }?;
        self.end_with_work(ended, held)
    }

    /// Ends the accesses `held` with the work's end event (one event per operation, shared
    /// with its buffers; see [`Memory::end_access`](crate::buffer::Memory::end_access)), kept for [`PgInner::issue`] to take: the
    /// end the operation's issue made, `ended` ([`Communicator::issue_ended`]), else one
    /// recorded here.
    fn end_with_work<'x>(
        &self,
        ended: Option<EventOf<B>>,
        held: impl IntoIterator<Item = B::Access<'x>>,
    ) -> Result<()> {
        let end = match ended {
            Some(end) => end,
            None => self.entry.stream.record(self.timing)?,
        };
        for access in held {
            B::end_access(access, &end);
        }
        self.end.set(Some(end));
        Ok(())
    }

    /// Runs `call` (a one-sided operation) on the group's communicator and stream, then ends
    /// the accesses `held` with the work's end event, as [`Issuer::issue_ending`] does.
    /// Refused inside a capture (one-sided operations are not captured).
    pub fn call_ending<'x>(
        &self,
        call: impl FnOnce(&oxccl_core::traits::CommOf<B>, &StreamOf<B>) -> Result<()>,
        held: impl IntoIterator<Item = B::Access<'x>>,
    ) -> Result<()> {
        if self.cap.is_some() {
            return Err(oxccl_core::CaptureError::Unsupported.error_str(
                "one-sided operations cannot be captured into a graph: issue them outside the capture",
            ));
        }
        call(&self.entry.comm, &self.entry.stream)?;
        self.end_with_work(None, held)
    }

    /// Issues `op` on the group's communicator and stream (inside a backend group, where
    /// nothing is enqueued before the group ends: the caller ends the accesses then).
    ///
    /// # Safety
    /// As [`Communicator::issue`]: the buffers of `op` come from [`Memory::read`](crate::buffer::Memory::read) /
    /// [`Memory::write`](crate::buffer::Memory::write) on [`Issuer::stream`], whose access guards are still alive.
    pub unsafe fn issue(&self, op: &CommOp<'_>) -> Result<()> {
        if let Some(c) = &self.cap {
            c.state.note(op);
        }
        // SAFETY: forwarded contract; the group's slot lock is held by the caller, so no other
        // thread issues on this communicator meanwhile.
        unsafe { self.entry.comm.issue(op, &self.entry.stream) }
    }
}

/// Which sequence an operation counts in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeqKind {
    Collective,
    P2p,
}

impl<B: PgBackend> PgInner<B> {
    /// The one path of every operation: refuses calls on a non-member or destroyed group and
    /// while a coalescing block is open (its guard issues instead), makes the communicator on
    /// first use, records the events of the work, numbers it, records it in the flight
    /// recorder and queues it to the watchdog. In an elastic group a refusal that shows a
    /// loss (the communicator stopped by the survivors' decision, a peer gone) is answered as
    /// a failed wait is ([`oxccl_core::Error::MembersLost`] once decided).
    pub fn issue(
        &self,
        op: OpFacts,
        body: impl FnOnce(&Issuer<'_, B>) -> Result<()>,
    ) -> Result<WorkOf<B>> {
        let name = op.kind.name();
        self.refuse_while_coalescing(name, ": issue through its guard")?;
        let timing = self.hot.facts.timing;
        self.with_entry(name, |e| {
            let cap = self.captor()?;
            let captured = cap.is_some();
            let start = if timing && !captured {
                Some(e.stream.record(true)?)
            } else {
                None
            };
            let is = Issuer {
                entry: e,
                device: self.hot.facts.device,
                cap,
                timeout_ms: &self.hot.timeout_ms,
                timing,
                end: std::cell::Cell::new(None),
            };
            body(&is)?;
            let end = match (captured, is.end.take()) {
                (true, _) => None,
                (false, Some(end)) => Some(end),
                // A body that issued without ending its accesses (none today).
                (false, None) => Some(e.stream.record(timing)?),
            };
            let p2p = matches!(op.kind, OpKind::Send | OpKind::Recv);
            let seq = self.next_seq(if p2p {
                SeqKind::P2p
            } else {
                SeqKind::Collective
            });
            let info = WorkInfo {
                seq,
                kind: op.kind,
                coalesced: false,
                numel_in: op.numel.0,
                numel_out: op.numel.1,
                timeout_ms: self.hot.timeout_ms.load(Ordering::Relaxed),
                timing,
            };
            if captured {
                return Ok(Work::captured(info));
            }
            let trace = self.trace(op);
            Ok(self.work(info, start, end, e, trace))
        })
        .map_err(|e| super::elastic::settle_refusal(self, e))
    }

    /// The flight-recorder entry of an operation, to be recorded off the hot path (no
    /// allocation here); op ids count every operation, recorded or not. Called under the
    /// group's issue lock, as [`PgInner::trace_built`].
    pub fn trace(&self, op: OpFacts) -> TraceSlot {
        let op_id = bump(&self.hot.op_id);
        if !self.hot.facts.recording {
            return TraceSlot::Off;
        }
        // Uneven variants carry the even one's name, as PyTorch's analyzer knows only those.
        let kind = match op.kind {
            OpKind::AllGatherV => OpKind::AllGather,
            OpKind::ReduceScatterV => OpKind::ReduceScatter,
            OpKind::AllToAllV => OpKind::AllToAll,
            k => k,
        };
        TraceSlot::Pending(PendingTrace {
            kind,
            dtype: op.dtype,
            // Peers are named by global rank, as in c10d's "nccl:send 1->0".
            peer: op.peer.and_then(|p| self.ranks.get(p as usize).copied()),
            op_id,
        })
    }

    /// The entry of a coalesced block, built by the caller (its sizes are a list; under the
    /// group's issue lock).
    pub fn trace_built(
        &self,
        profiling_name: String,
        seq: u64,
        inputs: Vec<TensorMeta>,
        outputs: Vec<TensorMeta>,
    ) -> TraceSlot {
        let op_id = bump(&self.hot.op_id);
        if !self.hot.facts.recording {
            return TraceSlot::Off;
        }
        TraceSlot::Built(Box::new(TraceRecord {
            pg_id: self.uid,
            collective_seq: seq,
            p2p_seq: 0,
            op_id,
            profiling_name,
            inputs,
            outputs,
            time_created_ns: now_ns(),
            timeout_ms: self.hot.timeout_ms.load(Ordering::Relaxed),
            is_p2p: false,
            timing: self.opts.timing,
        }))
    }

    /// A work of this group on `e`: a slot of its communicator's ring when the watchdog
    /// watches the group and the work is not timed (the common case: see `work::ring`), else
    /// a work of its own, queued to the watchdog when the group uses it.
    pub fn work(
        &self,
        info: WorkInfo,
        start: Option<EventOf<B>>,
        end: Option<EventOf<B>>,
        e: &Entry<B>,
        mut trace: TraceSlot,
    ) -> WorkOf<B> {
        // One clock read per operation: a built recorder entry's, else one here.
        let created_ns = trace
            .created_ns()
            .unwrap_or_else(|| ns_since(self.hot.clock_zero));
        let watched = self.hot.facts.watchdog && end.is_some();
        let (start, end) = match (watched, start, end) {
            // Untimed (no start event): a slot of the ring.
            (true, None, Some(end)) => {
                // The handle's count first: a locked add after the slot's stores would wait
                // for them to land.
                let ring = e.ring.clone();
                let place = e.ring.push(info, created_ns, end, trace);
                return Work::in_ring(ring, place, info, created_ns);
            }
            (_, start, end) => (start, end),
        };
        if !watched {
            // No watchdog to record it later: record now.
            trace.settle(
                &self.watch.recorder,
                &self.watch.trace_context(info, created_ns),
            );
        }
        let place = if watched { e.ring.next_place() } else { 0 };
        let work = Work::tracked(TrackedWork::new(
            info,
            (created_ns, place, true),
            (start, end),
            e.ring.home.clone(),
            trace,
        ));
        if let Some(w) = work.watched().filter(|_| watched) {
            Watchdog::global().watch(&self.watch, w);
            // Drop here the works the watchdog is done with (see GroupWatch::bury).
            self.watch.reap();
        }
        work
    }

    /// Refuses `attempted` while a coalescing block is open on this group (the block's guard
    /// issues; anything else would run before the block's operations, queued earlier).
    /// `advice` ends the reason.
    pub fn refuse_while_coalescing(&self, attempted: &'static str, advice: &str) -> Result<()> {
        if self.hot.coalescing.load(Ordering::Acquire) {
            return Err(Error::InvalidState {
                state: CommState::Ready,
                attempted,
                reason: text!("a coalescing block is open on group {}{advice}", self.uid),
            });
        }
        Ok(())
    }

    /// The next sequence number of `kind` (called under the group's issue lock).
    pub fn next_seq(&self, kind: SeqKind) -> u64 {
        let counter = match kind {
            SeqKind::Collective => &self.hot.seq,
            SeqKind::P2p => &self.hot.p2p_seq,
        };
        bump(counter)
    }
}

/// Adds one to a counter the group's issue lock guards (every caller holds it, so a load and
/// a store, not a locked add; other threads only read it) and returns the new value.
#[inline]
fn bump(counter: &std::sync::atomic::AtomicU64) -> u64 {
    let next = counter.load(Ordering::Relaxed) + 1;
    counter.store(next, Ordering::Relaxed);
    next
}

impl<B: PgBackend> Issuer<'_, B> {
    /// Chooses the mode of an operation on `mems` (one per buffer it uses, `None` for a plain
    /// or absent buffer) and makes the registrations it needs, before the operation is
    /// issued (inside a capture: checks they were made; see the module's documentation).
    pub fn prepare(
        &self,
        table: Option<&TuneTable>,
        op: &OpFacts,
        mems: &[Option<CommMem>],
    ) -> Result<RegMode> {
        let e = self.entry;
        let timeout = Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed));
        prepare_on(
            &e.comm,
            &e.regs,
            table,
            op,
            mems,
            self.cap.is_some(),
            timeout,
        )
    }

    /// [`Issuer::prepare`] when the operation must go through it ([`Issuer::tunes`]); the
    /// buffers' identities (`mems`) are taken only then.
    pub fn tune<const N: usize>(
        &self,
        table: Option<&TuneTable>,
        op: &OpFacts,
        mems: impl FnOnce() -> [Option<CommMem>; N],
    ) -> Result<()> {
        if self.tunes(table) {
            self.prepare(table, op, &mems())?;
        }
        Ok(())
    }

    /// Whether an operation must go through [`Issuer::prepare`]: under a table, or on a
    /// communicator with windows (whose buffers must be all in windows or none).
    pub fn tunes(&self, table: Option<&TuneTable>) -> bool {
        table.is_some() || self.entry.regs.has_windows()
    }
}

//! One-sided operations of a process group (NCCL 2.29.2+; the mock in one process): a put
//! into a peer's window buffer that raises a signal there, a signal alone, and a wait for
//! signals that orders the window's later local uses after the data the puts brought.
//!
//! The window is a buffer of the library's allocator this group put in a symmetric window
//! (`pg.register_buffer(&buf, RegMode::Window)`, collective: every member registers one of
//! the same length); a put's source is one too (NCCL reads it through its window). A put
//! reads its source like any operation (the source cannot be freed
//! or reused before the put ran). A wait takes the window buffer it names as written, so a
//! download or an operation on it afterwards runs after the signals came, with the peers'
//! data in it.

use super::backend::PgBackend;
use super::inner::ProcessGroup;
use super::op_facts::OpFacts;
use super::work::WorkOf;
use crate::buffer::Operand;
use crate::element::Element;
use oxccl_core::one_sided::{PutSignal, SignalFrom};
use oxccl_core::OneSided;
use oxccl_core::{Error, OpKind, Result};

impl<B: PgBackend> ProcessGroup<B> {
    /// Writes `src` into global rank `peer`'s buffer of the window `window` (this rank's
    /// buffer of it) from element `offset`, then raises `signal` there: one-sided, the peer
    /// takes no part until it waits for the signal ([`ProcessGroup::wait_signal`]). `src` is
    /// a window buffer of this group too. Refused before the library: `src` or `window` not
    /// in a window of this group, a put past the window's end (`offset`), a peer not of the
    /// group, a library without signals.
    pub fn put_signal<T: Element>(
        &self,
        src: &impl Operand<B, Elem = T>,
        peer: u32,
        window: &impl Operand<B, Elem = T>,
        offset: usize,
        signal: u32,
    ) -> Result<WorkOf<B>> {
        let inner = self.inner();
        let to = inner.to_group_rank("peer", peer)?;
        let Some(mem) = window.comm_mem() else {
            return Err(not_a_window("window"));
        };
        // NCCL reads a put's data through a window too.
        let Some(src_mem) = src.comm_mem() else {
            return Err(not_a_window("src"));
        };
        let facts = OpFacts {
            kind: OpKind::Send,
            dtype: T::DTYPE,
            numel: (src.numel(), 0),
            peer: Some(to),
        };
        inner.issue(facts, |is| {
            let regs = is.entry.regs.lock();
            let handle = regs
                .window_of(mem.id)
                .ok_or_else(|| not_a_window("window"))?;
            regs.window_of(src_mem.id)
                .ok_or_else(|| not_a_window("src"))?;
            drop(regs);
            let (send, g) = Operand::<B>::read(src, "src", is.device, is.stream())?;
            let put = PutSignal {
                send,
                dtype: T::DTYPE,
                peer: to,
                window: handle,
                offset: offset.saturating_mul(std::mem::size_of::<T>()),
                signal,
                ctx: 0,
            };
            is.call_ending(
                // SAFETY: `send` came from `Memory::read` on the issuer's stream and its guard
                // lives until the accesses end after the put (on the work's end event).
                |comm, stream| unsafe { comm.put_signal(&put, stream) },
                [g],
            )
        })
    }

    /// Raises `signal` on global rank `peer`, without data.
    pub fn signal(&self, peer: u32, signal: u32) -> Result<WorkOf<B>> {
        let inner = self.inner();
        let to = inner.to_group_rank("peer", peer)?;
        let facts = OpFacts {
            kind: OpKind::Send,
            dtype: u8::DTYPE,
            numel: (0, 0),
            peer: Some(to),
        };
        inner.issue(facts, |is| {
            is.call_ending(|comm, stream| comm.signal(to, signal, 0, stream), [])
        })
    }

    /// Holds the group's stream until every signal of `from` came (each consumed), and takes
    /// `window`, the window buffer the signals' puts wrote, as written by this wait: what
    /// reads it next sees their data.
    pub fn wait_signal<T: Element>(
        &self,
        from: &[SignalFrom],
        window: &mut impl Operand<B, Elem = T>,
    ) -> Result<WorkOf<B>> {
        let inner = self.inner();
        let waits = from
            .iter()
            .map(|f| Ok(f.wait_on(inner.to_group_rank("peer", f.peer)?)))
            .collect::<Result<Vec<_>>>()?;
        let facts = OpFacts {
            kind: OpKind::Recv,
            dtype: T::DTYPE,
            numel: (0, window.numel()),
            peer: waits.first().map(|w| w.peer),
        };
        inner.issue(facts, |is| {
            let (_, g) = Operand::<B>::write(window, "window", is.device, is.stream())?;
            is.call_ending(|comm, stream| comm.wait_signal(&waits, stream), [g])
        })
    }
}

fn not_a_window(arg: &'static str) -> Error {
    Error::invalid(
        arg,
        format_args!(
            "a buffer of the library's allocator this group put in a symmetric window (register_buffer with RegMode::Window)"
        ),
    )
}

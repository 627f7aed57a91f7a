//! What a process group offers of its buffer modes: its tune table, what its communicator did
//! with buffers, buffers in the library's allocator, and the modes the program asks for
//! itself: [`ProcessGroup::register_buffer`] (before a graph capture, which may not register)
//! and [`ProcessGroup::release_windows`] (the explicit, collective release of the windows of
//! dropped buffers).
//!
//! Which windows a release lets go: those of buffers the program dropped (only the group's
//! cache still holds them) and no graph pins. Buffers still held keep theirs: they are likely
//! to be used again, and making a window again is collective and costly; to release one,
//! drop the buffer first. Every rank must release the same windows, in the same order, since
//! each release is collective: windows are numbered in the order they were made (the same on
//! every rank, as they are made collectively), the ranks compare the numbers they would
//! release through the store, and on any difference every rank refuses and releases nothing
//! (a hang made into an error). The work already issued on buffers in windows is waited for
//! first (bounded by the group's timeout), so no rank skips a dropped buffer that is merely
//! busy, and none frees memory a kernel still uses.

use super::backend::PgBackend;
use super::inner::PgInner;
use super::inner::ProcessGroup;
use super::tune::agree::agree_on;
use super::tune::reg_cache::{wait_idle, TunedStats};
use crate::buffer::Operand;
use oxccl_core::traits::CommOf;
use oxccl_core::Windows;
use oxccl_core::{text, CommState, Communicator, Error, Result};
use oxccl_rules::tune::release::write_release_list;
use oxccl_rules::tune::RegMode;
use oxccl_rules::tune::TuneTable;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Refuses `attempted` while a coalescing block is open on the group (its backend group is
/// open, and a window registration or release is collective).
fn refuse_in_block<B: PgBackend>(inner: &PgInner<B>, attempted: &'static str) -> Result<()> {
    if inner.hot.coalescing.load(Ordering::Acquire) {
        return Err(Error::InvalidState {
            state: CommState::Ready,
            attempted,
            reason: text!(
                "a coalescing block is open on group {}: end it first",
                inner.uid
            ),
        });
    }
    Ok(())
}

impl<B: PgBackend> ProcessGroup<B> {
    /// Puts `buf` (a [`Memory::CommBuf`](crate::buffer::Memory::CommBuf)) in `mode` on the group's communicator now, as the
    /// tune table would at its first operation: registered locally, or in a symmetric window
    /// (collective: every rank calls this for its buffer at the same point). Nothing when the
    /// buffer already has it ([`RegMode::Plain`]: nothing at all). Meant for buffers a graph
    /// capture will use: inside a capture nothing is registered (see
    /// [`ProcessGroup::capture`]). Makes the group's communicator first if it is not made yet
    /// (collective, as at a first operation).
    ///
    /// Refused: a plain buffer in another mode ([`Error::InvalidArgument`] naming `buf`),
    /// memory of another device, inside a capture ([`oxccl_core::CaptureError::Unsupported`])
    /// or a coalescing block ([`Error::InvalidState`]), and a library without the feature
    /// ([`Error::Unsupported`]).
    pub fn register_buffer<X: Operand<B> + ?Sized>(&self, buf: &X, mode: RegMode) -> Result<()> {
        let inner = &**self.inner();
        inner.refuse_in_capture(
            "registering a buffer",
            "registration is a host call (collective for a window)",
        )?;
        refuse_in_block(inner, "register_buffer")?;
        let Some(m) = buf.comm_mem() else {
            if mode == RegMode::Plain {
                return Ok(());
            }
            return Err(Error::invalid(
                "buf",
                format_args!(
                    "a buffer of the library's allocator (ProcessGroup::alloc_comm or \
                     upload_comm) to put in {} mode, got a plain buffer",
                    mode.name()
                ),
            ));
        };
        // Refuses memory of another device before any library call (the access is dropped
        // at once: it only orders the copy stream after the buffer's last use).
        drop(buf.read("buf", inner.opts.device(), inner.copy_stream()?)?);
        let timeout = inner.timeout();
        inner.with_entry("register a buffer", |e| {
            e.regs.lock().ensure(&e.comm, &m, mode, timeout)
        })
    }

    /// Releases the symmetric windows of the buffers the program dropped (and their local
    /// registrations), and returns how many windows it released. Collective: every rank
    /// calls it at the same point, after dropping the same buffers; the ranks compare what
    /// they would release first, and on a difference every rank refuses with
    /// [`Error::InvalidState`] and releases nothing. Windows of buffers still held, or used
    /// by a graph that is still alive ([`PgGraph`](super::capture::PgGraph)), are kept (see the module's
    /// documentation). Waits first for the work already issued on buffers in windows
    /// (bounded by the group's timeout: [`Error::Timeout`]).
    ///
    /// Refused inside a capture ([`oxccl_core::CaptureError::Unsupported`]) and inside a
    /// coalescing block ([`Error::InvalidState`]). Makes the group's communicator first if it
    /// is not made yet (collective; nothing to release then).
    pub fn release_windows(&self) -> Result<usize> {
        let inner = &**self.inner();
        inner.refuse_in_capture(
            "releasing windows",
            "releasing a window is a collective host call",
        )?;
        refuse_in_block(inner, "release_windows")?;
        let timeout = inner.timeout();
        inner.with_entry("release windows", |e| {
            let mut st = e.regs.lock();
            let call = st.releases;
            st.releases += 1;
            // The work on buffers in windows must have run first: a dropped buffer's memory
            // may go only then, and a buffer's last uses may still hold it (the mock's
            // streams do), so whether the program dropped it is known only once it is idle.
            let began = Instant::now();
            for c in st.bufs.values().filter(|c| c.window.is_some()) {
                let left = timeout.saturating_sub(began.elapsed());
                wait_idle(&c.mem, left).map_err(|_| Error::Timeout {
                    what: text!(
                        "the work on buffers in windows of group {}, before releasing the \
                         dropped ones",
                        inner.uid
                    ),
                    after_ms: timeout.as_millis().min(u128::from(u64::MAX)) as u64,
                })?;
            }
            let mut doomed: Vec<(u64, u64)> = st
                .bufs
                .iter()
                .filter(|(_, c)| c.orphan())
                .filter_map(|(id, c)| c.window.map(|(_, n)| (n, *id)))
                .collect();
            doomed.sort_unstable();
            let mut numbers: Vec<u64> = doomed.iter().map(|(n, _)| *n).collect();
            let mut mine = String::new();
            // Writing into a String cannot fail.
            let _ = write_release_list(&mut mine, &mut numbers);
            let topic = format!("release/{call}");
            let hint = "its windows to release (does every rank call release_windows?)";
            if let Some(why) =
                agree_on(&inner.members(), &topic, &mine, "windows to release", hint)?
            {
                return Err(Error::InvalidState {
                    state: CommState::Ready,
                    attempted: "release_windows",
                    reason: text!(
                        "every rank of group {} must release the same windows (drop the same \
                         buffers before the same call): {why}",
                        inner.uid
                    ),
                });
            }
            let mut released = 0;
            let mut first_error = None;
            for (_, id) in doomed {
                let Some(mut c) = st.bufs.remove(&id) else {
                    continue;
                };
                if let Some(h) = c.local.take() {
                    if let Err(err) = e.comm.deregister(h) {
                        log::debug!("releasing the registration of a dropped buffer: {err}");
                    }
                }
                if let Some((h, n)) = c.window.take() {
                    match e.comm.deregister_window(h) {
                        Ok(()) => {
                            released += 1;
                            st.live_windows -= 1;
                        }
                        Err(err) => {
                            // Still registered as far as we know: keep the memory alive.
                            c.window = Some((h, n));
                            st.bufs.insert(id, c);
                            first_error.get_or_insert(err);
                        }
                    }
                }
            }
            st.sweep(&e.comm);
            first_error.map_or(Ok(released), Err)
        })
    }
}

impl<B: PgBackend> ProcessGroup<B> {
    /// What the group's communicator did with buffers: operations per mode, allocations
    /// registered and in windows now (makes the communicator if it is not made yet).
    pub fn tuned_stats(&self) -> Result<TunedStats> {
        Ok(self.inner().entry("read the buffer modes")?.regs.stats())
    }

    /// Runs `f` with the group's communicator (made first if needed), e.g. to inspect the
    /// mock's registrations and windows. `f` runs without the group's lock, so it may call
    /// the group; it must not issue on the communicator behind the group's back.
    pub fn with_comm<R>(&self, f: impl FnOnce(&CommOf<B>) -> R) -> Result<R> {
        let e = self.inner().entry("inspect the communicator")?;
        Ok(f(&e.comm))
    }

    /// The group's tune table, if any.
    pub fn tune_table(&self) -> Option<&TuneTable> {
        self.inner().opts.tune.as_deref()
    }
}

impl<B: PgBackend> ProcessGroup<B> {
    /// The table for an operation of `kind`, when that kind is tuned: the collectives whose
    /// buffers have the same size on every rank (a window must), and sends and receives
    /// (registered at most: see [`TuneTable::choose`]). Rooted operations with an absent
    /// buffer and uneven variants are always plain.
    pub(crate) fn tune_for(&self, kind: oxccl_core::OpKind) -> Option<&TuneTable> {
        use oxccl_core::OpKind as K;
        match kind {
            K::AllReduce
            | K::Broadcast
            | K::Reduce
            | K::AllGather
            | K::ReduceScatter
            | K::AllToAll
            | K::Send
            | K::Recv
                if self.inner().hot.facts.tuned =>
            {
                self.inner().opts.tune.as_deref()
            }
            _ => None,
        }
    }
}

impl<B: PgBackend> ProcessGroup<B> {
    /// A buffer of `len` zeros in the library's allocator ([`Memory::CommBuf`](crate::buffer::Memory::CommBuf): NCCL's
    /// `ncclMemAlloc`, 2.19+), which the tune table may register or put in a window. Made on
    /// the group's copy stream, so allocating never makes the communicator.
    pub fn alloc_comm<T: crate::Element>(&self, len: usize) -> Result<B::CommBuf<T>> {
        let st = self.inner().copy_stream()?;
        self.inner().backend.alloc_comm(st, len)
    }

    /// A [`Memory::CommBuf`](crate::buffer::Memory::CommBuf) holding a copy of `data`.
    pub fn upload_comm<T: crate::Element>(&self, data: &[T]) -> Result<B::CommBuf<T>> {
        let st = self.inner().copy_stream()?;
        self.inner().backend.upload_comm(st, data)
    }

    /// The contents of `buf` (either kind), after every operation that uses it (blocks).
    pub fn download_any<T: crate::Element>(
        &self,
        buf: &impl crate::buffer::Operand<B, Elem = T>,
    ) -> Result<Vec<T>> {
        let st = self.inner().copy_stream()?;
        buf.download(&self.inner().backend, st)
    }
}

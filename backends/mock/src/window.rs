//! Symmetric windows on the mock, and what tests observe of registrations: the mock keeps
//! no special memory, so a window is a record (address, length, handle) per rank, with the
//! same refusals as NCCL's registry (a null or empty buffer, an address twice, an unknown
//! handle), and a count of windows ever made so a test can see that a cache registered once.

use crate::comm::MockComm;
use crate::sync::lock;
use oxccl_core::{CommOp, Communicator, Error, Feature, RegHandle, Result};
use std::sync::atomic::Ordering;

impl MockComm {
    pub(crate) fn window_add(&self, addr: usize, bytes: usize) -> Result<RegHandle> {
        self.shared_features()
            .require(Feature::WindowRegistration)?;
        if addr == 0 || bytes == 0 || addr.checked_add(bytes).is_none() {
            return Err(Error::invalid(
                "addr",
                format_args!(
                    "a non-null buffer of at least one byte, got {addr:#x} ({bytes} bytes)"
                ),
            ));
        }
        let mut wins = lock(&self.rank_state().windows);
        if wins.0.contains_key(&addr) {
            return Err(Error::invalid(
                "addr",
                format_args!("a buffer not yet in a window: {addr:#x} already is"),
            ));
        }
        wins.1 += 1;
        let h = RegHandle {
            // Odd values, so a window handle never equals a local registration's.
            raw: (wins.1 as usize).wrapping_mul(2).wrapping_add(1),
            addr,
            bytes,
        };
        wins.0.insert(addr, h);
        self.rank_state()
            .live_windows
            .store(wins.0.len(), Ordering::Relaxed);
        Ok(h)
    }

    pub(crate) fn window_remove(&self, h: RegHandle) -> Result<()> {
        let mut wins = lock(&self.rank_state().windows);
        if wins.0.get(&h.addr) == Some(&h) {
            wins.0.remove(&h.addr);
            self.rank_state()
                .live_windows
                .store(wins.0.len(), Ordering::Relaxed);
            return Ok(());
        }
        Err(Error::invalid(
            "handle",
            format_args!("a window of this communicator, {:#x} is not", h.addr),
        ))
    }

    /// `Ok` unless `op` mixes a buffer in one of this rank's windows with one in none: the
    /// NCCL backend refuses that before NCCL (NCCL 2.28 goes wrong on it), and so does the
    /// mock, by the same pure rule ([`oxccl_core::check::windows::one_kind`]), so code tested
    /// on the mock meets the same refusal (same variant, same argument). One atomic load
    /// when the rank has no windows, as in the NCCL backend's registry.
    pub(crate) fn one_kind(&self, op: &CommOp<'_>) -> Result<()> {
        // Windows are added and removed by this rank's own calls, which the caller's call
        // lock orders before this issue: a relaxed load sees them.
        if self.rank_state().live_windows.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let wins = lock(&self.rank_state().windows);
        oxccl_core::check::windows::one_kind(op, self.rank(), |addr, bytes| {
            wins.0
                .values()
                .any(|w| addr >= w.addr && addr.saturating_add(bytes) <= w.addr + w.bytes)
        })
    }

    /// This rank's live local registrations ([`oxccl_core::Communicator::register`]), by
    /// address.
    pub fn registrations(&self) -> Vec<RegHandle> {
        let mut v: Vec<RegHandle> = lock(&self.rank_state().regs).0.values().copied().collect();
        v.sort_by_key(|h| h.addr);
        v
    }

    /// This rank's live symmetric windows, by address.
    pub fn windows(&self) -> Vec<RegHandle> {
        let mut v: Vec<RegHandle> = lock(&self.rank_state().windows)
            .0
            .values()
            .copied()
            .collect();
        v.sort_by_key(|h| h.addr);
        v
    }

    /// How many windows this rank ever made (live or released).
    pub fn windows_made(&self) -> u64 {
        lock(&self.rank_state().windows).1
    }

    /// How many local registrations this rank ever made (live or released).
    pub fn registrations_made(&self) -> u64 {
        // The next handle value starts at 1 and grows by one per registration.
        (lock(&self.rank_state().regs).1 as u64).saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use crate::World;
    use oxccl_core::{
        CommOp, Communicator, DataType, Error, RawBuf, RawBufMut, ReduceOp, Result, Windows,
    };

    /// The window's range, and an address past it (no memory is touched: `one_kind` and a
    /// refused `issue` only compare addresses).
    const WIN: usize = 0x10_000;
    const PLAIN: usize = 0x90_000;

    fn a2a(send: usize, recv: usize) -> CommOp<'static> {
        CommOp::AllToAll {
            send: RawBuf::new(send, 16),
            recv: RawBufMut::new(recv, 16),
            dtype: DataType::Float32,
        }
    }

    /// The argument an `InvalidArgument` names (any other outcome fails the test).
    fn refused_arg(r: Result<()>) -> &'static str {
        match r {
            Err(Error::InvalidArgument { arg, expected }) => {
                assert!(expected.contains("symmetric window"), "{expected}");
                arg
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn no_windows_takes_the_fast_path() {
        let comms = World::new(1).unwrap();
        let c = &comms[0];
        assert_eq!(
            c.rank_state().live_windows.load(super::Ordering::Relaxed),
            0
        );
        assert_eq!(c.one_kind(&a2a(WIN, PLAIN)), Ok(()));
    }

    #[test]
    fn the_plain_buffer_is_named_as_the_core_names_it() {
        let comms = World::new(1).unwrap();
        let c = &comms[0];
        let w = c.register_window(WIN, 0x1000).unwrap();
        let in_win = |addr: usize, bytes: usize| addr >= WIN && addr + bytes <= WIN + 0x1000;
        for (op, arg) in [(a2a(WIN, PLAIN), "recv"), (a2a(PLAIN, WIN), "send")] {
            let got = c.one_kind(&op);
            // The very error the NCCL backend gives: the core's, over the same windows.
            assert_eq!(got, oxccl_core::check::windows::one_kind(&op, 0, in_win));
            assert_eq!(refused_arg(got), arg);
        }
        // Reaching past the window's end is outside it.
        assert_eq!(
            refused_arg(c.one_kind(&a2a(WIN, WIN + 0x1000 - 32))),
            "recv"
        );
        // All in windows, or none: passes.
        assert_eq!(c.one_kind(&a2a(WIN, WIN + 0x400)), Ok(()));
        assert_eq!(c.one_kind(&a2a(PLAIN, PLAIN + 0x400)), Ok(()));
        // The window gone, the count is back to zero and nothing is refused.
        c.deregister_window(w).unwrap();
        assert_eq!(
            c.rank_state().live_windows.load(super::Ordering::Relaxed),
            0
        );
        assert_eq!(c.one_kind(&a2a(WIN, PLAIN)), Ok(()));
    }

    #[test]
    fn a_refused_issue_queues_nothing() {
        let comms = World::new(1).unwrap();
        let c = &comms[0];
        let st = c.new_stream().unwrap();
        c.register_window(WIN, 0x1000).unwrap();
        let reduce = CommOp::AllReduce {
            send: RawBuf::new(PLAIN, 16),
            recv: RawBufMut::new(WIN, 16),
            dtype: DataType::Float32,
            op: ReduceOp::Sum,
        };
        // SAFETY: refused before anything is queued: no buffer is touched.
        assert_eq!(refused_arg(unsafe { c.issue(&reduce, &st) }), "send");
        assert_eq!(
            // SAFETY: as above.
            refused_arg(unsafe { c.issue(&a2a(WIN, PLAIN), &st) }),
            "recv"
        );
        assert_eq!(
            c.ops_issued(),
            0,
            "a refused op is never numbered nor queued"
        );
    }

    #[test]
    fn untouched_buffers_do_not_count() {
        // Rank 1 of a broadcast from rank 0 never reads its input: a plain one passes there.
        let comms = World::new(2).unwrap();
        let c = &comms[1];
        c.register_window(WIN, 0x1000).unwrap();
        let bcast = |root| CommOp::Broadcast {
            send: RawBuf::new(PLAIN, 16),
            recv: RawBufMut::new(WIN, 16),
            dtype: DataType::Float32,
            root,
        };
        assert_eq!(c.one_kind(&bcast(0)), Ok(()));
        assert_eq!(refused_arg(c.one_kind(&bcast(1))), "send");
    }
}

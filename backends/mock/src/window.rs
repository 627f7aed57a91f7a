//! Symmetric windows on the mock, and what tests observe of registrations: the mock keeps
//! no special memory, so a window is a record (address, length, handle) per rank, with the
//! same refusals as NCCL's registry (a null or empty buffer, an address twice, an unknown
//! handle), and a count of windows ever made so a test can see that a cache registered once.

use crate::comm::MockComm;
use crate::sync::lock;
use oxccl_core::{CommOp, Communicator, Error, Feature, RegHandle, Result};

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
        Ok(h)
    }

    pub(crate) fn window_remove(&self, h: RegHandle) -> Result<()> {
        let mut wins = lock(&self.rank_state().windows);
        if wins.0.get(&h.addr) == Some(&h) {
            wins.0.remove(&h.addr);
            return Ok(());
        }
        Err(Error::invalid(
            "handle",
            format_args!("a window of this communicator, {:#x} is not", h.addr),
        ))
    }

    /// `Ok` unless `op` mixes a buffer in one of this rank's windows with one in none: the
    /// NCCL backend refuses that before NCCL (NCCL 2.28 goes wrong on it), and so does the
    /// mock, by the same pure rule ([`oxccl_core::check::windows::one_kind`]).
    pub(crate) fn one_kind(&self, op: &CommOp<'_>) -> Result<()> {
        let wins = lock(&self.rank_state().windows);
        if wins.0.is_empty() {
            return Ok(());
        }
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

//! Asking for cache lines ahead of a write. The issuing thread writes each slot of its ring
//! again after the watchdog has read it, so the slot's lines must first be taken back from
//! the watchdog's core; at the write itself that would hold up the next locked instruction
//! (the group's unlock), while asked for one operation ahead, ownership arrives during the
//! launch in between.

/// Whether the CPU takes a line for writing ahead of time (x86's PREFETCHW; every aarch64
/// CPU does). Asked once, when a ring is made.
pub(crate) fn writes_ahead() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID leaf 0x8000_0001, ECX bit 8: PREFETCHW (3DNowPrefetch).
        core::arch::x86_64::__cpuid(0x8000_0001).ecx & (1 << 8) != 0
    }
    #[cfg(target_arch = "aarch64")]
    {
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Asks for the cache lines of `bytes` bytes from `at` for writing. A hint: it never faults,
/// reads or writes nothing, and does nothing unless [`writes_ahead`] said yes (`ahead`).
#[inline]
pub(crate) fn for_write(at: *const u8, bytes: usize, ahead: bool) {
    if !ahead {
        return;
    }
    for i in 0..bytes.div_ceil(64) {
        let line = at.wrapping_add(i * 64);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: PREFETCHW is a hint that never faults, whatever the address; the CPU has it
        // (`ahead`, from CPUID); it touches neither the stack nor the flags.
        unsafe {
            core::arch::asm!("prefetchw [{p}]", p = in(reg) line, options(nostack, preserves_flags, readonly));
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: PRFM is a hint that never faults, whatever the address; it touches neither
        // the stack nor the flags.
        unsafe {
            core::arch::asm!("prfm pstl1keep, [{p}]", p = in(reg) line, options(nostack, preserves_flags, readonly));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_ahead_changes_nothing() {
        let v = vec![7u8; 300];
        for_write(v.as_ptr(), v.len(), writes_ahead());
        // Past the end and unaligned too: a hint never faults.
        for_write(v.as_ptr().wrapping_add(290), 200, writes_ahead());
        assert!(v.iter().all(|b| *b == 7));
    }
}

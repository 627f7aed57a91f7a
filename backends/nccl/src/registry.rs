//! Registered buffers and windows of one communicator, tracked so that a double registration
//! or an unknown deregistration is an error and so that all are released before the
//! communicator is.

use oxccl_core::{text, CommOp, Error, Feature, RegHandle, Result, ResultCode};
use oxccl_loader::{Library, RawComm};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The registrations of one communicator.
#[derive(Default)]
pub(crate) struct Registry {
    buffers: spin::Mutex<Vec<RegHandle>>,
    windows: spin::Mutex<Vec<Window>>,
    /// How many windows `windows` holds, read without its lock by every issue.
    window_count: AtomicUsize,
}

/// A window registered with `ncclCommWindowRegister` (NCCL 2.27+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The raw `ncclWindow_t`.
    pub raw: usize,
    /// The registered address.
    pub addr: usize,
    /// The registered length in bytes.
    pub bytes: usize,
}

impl Registry {
    /// `w` tracked as a window of this communicator.
    fn track(&self, w: Window) {
        let mut wins = self.windows.lock();
        wins.push(w);
        self.window_count.store(wins.len(), Ordering::Relaxed);
    }

    /// Every tracked window, no longer tracked.
    fn untrack_all(&self) -> Vec<Window> {
        let mut wins = self.windows.lock();
        self.window_count.store(0, Ordering::Relaxed);
        wins.drain(..).collect()
    }

    /// Whether `addr..addr + bytes` lies in one of this communicator's live windows.
    pub(crate) fn in_window(&self, addr: usize, bytes: usize) -> bool {
        self.windows
            .lock()
            .iter()
            .any(|w| addr >= w.addr && addr.saturating_add(bytes) <= w.addr + w.bytes)
    }

    /// Whether `h` is one of this communicator's live windows.
    pub(crate) fn has_window(&self, h: RegHandle) -> bool {
        self.windows
            .lock()
            .iter()
            .any(|w| w.raw == h.raw && w.addr == h.addr && w.bytes == h.bytes)
    }

    /// `Ok` unless `op` mixes a buffer in one of this communicator's windows with one in
    /// none (see [`oxccl_core::check::windows`]); one atomic load when there are no windows.
    pub(crate) fn one_kind(&self, op: &CommOp<'_>, rank: u32) -> Result<()> {
        if self.window_count.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let wins = self.windows.lock();
        oxccl_core::check::windows::one_kind(op, rank, |addr, bytes| {
            wins.iter()
                .any(|w| addr >= w.addr && addr.saturating_add(bytes) <= w.addr + w.bytes)
        })
    }

    pub(crate) fn register(
        &self,
        lib: &Library,
        raw: RawComm,
        addr: usize,
        bytes: usize,
    ) -> Result<RegHandle> {
        if addr == 0 || bytes == 0 {
            return Err(Error::invalid(
                "addr",
                format_args!("a non-null buffer of at least one byte"),
            ));
        }
        let mut regs = self.buffers.lock();
        if regs.iter().any(|h| h.addr == addr) {
            return Err(Error::invalid(
                "addr",
                format_args!(
                    "a buffer not yet registered: {addr:#x} already is on this communicator"
                ),
            ));
        }
        // SAFETY: live communicator; `addr..addr+bytes` is device memory the caller owns
        // (the register contract).
        let handle = unsafe { crate::ffi::comm_register(lib, raw, addr, bytes)? };
        let h = RegHandle {
            raw: handle,
            addr,
            bytes,
        };
        regs.push(h);
        Ok(h)
    }

    pub(crate) fn deregister(&self, lib: &Library, raw: RawComm, h: RegHandle) -> Result<()> {
        let mut regs = self.buffers.lock();
        let Some(i) = regs.iter().position(|r| *r == h) else {
            return Err(Error::invalid(
                "handle",
                format_args!(
                    "a handle registered on this communicator, {:#x} is not",
                    h.addr
                ),
            ));
        };
        // SAFETY: live communicator; the handle came from ncclCommRegister on it and is still
        // tracked, so it was never deregistered.
        let code = unsafe { crate::ffi::comm_deregister(lib.api(), raw, h.raw)? };
        lib.check(code, raw)?;
        regs.swap_remove(i);
        Ok(())
    }

    pub(crate) fn window_register(
        &self,
        lib: &Library,
        raw: RawComm,
        addr: usize,
        bytes: usize,
        flags: i32,
        settle: impl FnOnce(i32) -> Result<()>,
    ) -> Result<Window> {
        if addr == 0 || bytes == 0 {
            return Err(Error::invalid(
                "addr",
                format_args!("a non-null buffer of at least one byte"),
            ));
        }
        // Not held across the call (see `windows_unlocked_while_nccl_works`); the caller's
        // call lock keeps another registration from slipping in between.
        if self.windows.lock().iter().any(|w| w.addr == addr) {
            return Err(Error::invalid(
                "addr",
                format_args!("a buffer not yet in a window: {addr:#x} already is"),
            ));
        }
        if lib.api().comm_window_register.is_none() {
            return Err(crate::absent::feature_symbol(
                Feature::WindowRegistration,
                "ncclCommWindowRegister",
            ));
        }
        // Boxed: on a nonblocking communicator NCCL fills it from its own thread when the
        // registration completes, which may be after `settle` gave up waiting. The box is
        // then leaked (one pointer, 8 bytes), so that late write still lands in live memory;
        // only a call NCCL accepted (success or in progress) can write late, so a refused
        // call frees it, and each leak is one registration that outlived the communicator's
        // timeout (NCCL refuses every other call on the communicator while it runs).
        let mut win: Box<*mut std::ffi::c_void> = Box::new(std::ptr::null_mut());
        // SAFETY: live communicator (the caller checked it is ready and holds its call lock);
        // `addr..addr+bytes` is device memory the caller owns (the window contract); the
        // out-pointer is a heap slot that stays valid until the call completed (`settle`
        // returned Ok) or forever (leaked below when NCCL may still write it). Window
        // registration is collective: every rank calls it.
        let code = unsafe {
            crate::ffi::comm_window_register(lib.api(), raw, addr, bytes, &mut *win, flags)?
        };
        if let Err(e) = settle(code) {
            if accepted(code) {
                std::mem::forget(win);
            }
            return Err(e);
        }
        let w = Window {
            raw: *win as usize,
            addr,
            bytes,
        };
        self.track(w);
        Ok(w)
    }

    pub(crate) fn window_deregister(
        &self,
        lib: &Library,
        raw: RawComm,
        w: Window,
        settle: impl FnOnce(i32) -> Result<()>,
    ) -> Result<()> {
        // Taken out before the call, so that `release_all` (an abort from another thread)
        // never releases it too; the lock is not held across the call (see
        // `windows_unlocked_while_nccl_works`).
        {
            let mut wins = self.windows.lock();
            let Some(i) = wins.iter().position(|x| *x == w) else {
                return Err(Error::invalid(
                    "window",
                    format_args!("a window of this communicator, {:#x} is not", w.addr),
                ));
            };
            if lib.api().comm_window_deregister.is_none() {
                return Err(crate::absent::feature_symbol(
                    Feature::WindowRegistration,
                    "ncclCommWindowDeregister",
                ));
            }
            wins.swap_remove(i);
            self.window_count.store(wins.len(), Ordering::Relaxed);
        }
        // SAFETY: live communicator (ready, its call lock held by the caller); the window came
        // from ncclCommWindowRegister on it and was still tracked, so it was never released.
        let code = unsafe { crate::ffi::comm_window_deregister(lib.api(), raw, w.raw)? };
        // Once NCCL accepted the deregistration the window is its to finish releasing, even
        // if `settle` gives up waiting: it stays out, so that neither a second call nor
        // `release_all` deregisters it again (a double release inside NCCL). A refused call
        // leaves it registered: tracked again.
        if !accepted(code) {
            self.track(w);
        }
        settle(code)
    }

    /// Deregisters everything (errors are logged: this runs on the way to abort or destroy).
    /// `windows`: also the symmetric windows, whose deregistration is collective (on a
    /// blocking communicator it waits for every peer's matching call). An abort passes
    /// `false`: it must never wait for peers, and the library's abort releases the
    /// communicator's windows with it. The local registrations always go here.
    pub(crate) fn release_all(&self, lib: &Library, raw: RawComm, windows: bool) {
        let api = lib.api();
        for h in self.buffers.lock().drain(..) {
            // SAFETY: live communicator (release runs before abort/destroy); handle from it,
            // drained from the tracked ones so deregistered once.
            if let Ok(code) = unsafe { crate::ffi::comm_deregister(api, raw, h.raw) } {
                if code != 0 {
                    log::warn!(
                        "deregistering {:#x}: code {code} ({})",
                        h.addr,
                        text!("{}", lib.error_string(code))
                    );
                }
            }
        }
        let windows: Vec<_> = if windows {
            self.untrack_all()
        } else {
            // Left to the abort; counted so the log says what it released.
            let n = self.untrack_all().len();
            if n > 0 {
                log::debug!("{n} window(s) left to the communicator's abort to release");
            }
            Vec::new()
        };
        for w in windows {
            // SAFETY: as above.
            if let Ok(code) = unsafe { crate::ffi::comm_window_deregister(api, raw, w.raw) } {
                if code != 0 {
                    log::warn!("deregistering window {:#x}: code {code}", w.addr);
                }
            }
        }
    }
}

// windows_unlocked_while_nccl_works: a window call waits for NCCL on a nonblocking
// communicator (`settle` polls it, each poll taking the communicator's `raw_use` read lock),
// and an abort from another thread takes `raw_use` for writing, then `windows` in
// `release_all`. Holding `windows` across the wait would deadlock the two (the poll waits for
// the abort, the abort for `windows`), so it is only held to read or change the list.

/// Whether NCCL took a nonblocking-capable call (done, or running on its own thread): only
/// then may it still write the call's out-pointer or act on its handle after we stop waiting.
fn accepted(code: i32) -> bool {
    code == ResultCode::SUCCESS.0 || code == ResultCode::IN_PROGRESS.0
}

#[cfg(test)]
mod tests {
    use super::{accepted, Registry, Window};
    use oxccl_core::{CommOp, DataType, Error, RawBuf, RawBufMut};

    #[test]
    fn an_issue_mixing_a_window_and_plain_memory_is_refused() {
        let reg = Registry::default();
        let a2a = |send, recv| CommOp::AllToAll {
            send: RawBuf::new(send, 256),
            recv: RawBufMut::new(recv, 256),
            dtype: DataType::Float32,
        };
        // No window: nothing is looked at.
        assert!(reg.one_kind(&a2a(0x10000, 0x90000), 0).is_ok());
        reg.track(Window {
            raw: 1,
            addr: 0x10000,
            bytes: 0x10000,
        });
        assert!(reg.one_kind(&a2a(0x10000, 0x14000), 0).is_ok());
        match reg.one_kind(&a2a(0x10000, 0x90000), 0) {
            Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "recv"),
            other => panic!("expected recv refused, got {other:?}"),
        }
        // Released windows no longer count.
        assert_eq!(reg.untrack_all().len(), 1);
        assert!(reg.one_kind(&a2a(0x10000, 0x90000), 0).is_ok());
    }

    #[test]
    fn only_success_and_in_progress_leave_work_to_nccl() {
        assert!(accepted(0));
        assert!(accepted(7));
        for refused in [1, 2, 3, 4, 5, 6, 8, -1, i32::MAX] {
            assert!(!accepted(refused), "code {refused}");
        }
    }
}

//! NCCL result codes to oxccl errors. Only 0 is success; `ncclInProgress` (7) is success only
//! through [`Library::progress`]; every other code, including ones newer than oxccl (Timeout 8
//! from 2.30, anything else), is an error carrying NCCL's own texts.

use crate::library::Library;
use crate::raw::RawComm;
use crate::text::os_text;
use core::ffi::c_char;
use oxccl_core::text::Escaped;
use oxccl_core::{Error, Progress, Result, ResultCode, Text};
use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;

impl Library {
    /// `Ok` for `ncclSuccess`; else the error for `code`, with `ncclGetErrorString(code)` and
    /// `ncclGetLastError(comm)` (pass null when there is no communicator). `ncclRemoteError`
    /// becomes [`Error::Remote`]; `ncclInProgress` is an error here (use
    /// [`Library::progress`] where it is expected).
    pub fn check(&self, code: i32, comm: RawComm) -> Result<()> {
        if code == ResultCode::SUCCESS.0 {
            return Ok(());
        }
        let text = self.error_string(code);
        let last = self.last_error(comm);
        if code == ResultCode::REMOTE_ERROR.0 {
            let detail = if last.is_empty() {
                text
            } else {
                oxccl_core::text!("{text}; last error: {last}")
            };
            return Err(Error::Remote { detail });
        }
        Err(Error::Backend {
            code: ResultCode(code),
            text,
            last,
        })
    }

    /// For calls that may still be running: `Done` for success, `InProgress` for
    /// `ncclInProgress`, else the error [`Library::check`] gives.
    pub fn progress(&self, code: i32, comm: RawComm) -> Result<Progress> {
        if code == ResultCode::IN_PROGRESS.0 {
            return Ok(Progress::InProgress);
        }
        self.check(code, comm).map(|()| Progress::Done)
    }

    /// NCCL's text for the last failure on this thread (`ncclGetLastError`); empty when the
    /// library lacks the function or has nothing to say. `comm` is never dereferenced: every
    /// release ignores it and reads a thread-local buffer, so any value (null included) is safe.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn last_error(&self, comm: RawComm) -> Text {
        match self.api().get_last_error {
            // SAFETY: ncclGetLastError accepts any communicator handle, null included (it
            // reads a thread-local buffer); it returns null or a NUL-terminated string.
            Some(f) => c_text(unsafe { f(comm) }),
            None => Text::new(),
        }
    }

    /// NCCL's text for `code` (`ncclGetErrorString`), which answers unknown codes too.
    pub fn error_string(&self, code: i32) -> Text {
        match self.api().get_error_string {
            // SAFETY: ncclGetErrorString is a pure lookup over its argument (a default branch
            // covers unknown codes); it returns null or a static NUL-terminated string.
            Some(f) => c_text(unsafe { f(code) }),
            None => oxccl_core::text!("NCCL result {code}"),
        }
    }
}

/// A C string as bounded text, escaped (control characters as `\e`, …, bytes that are not
/// UTF-8 as `\xNN` by [`os_text`]: NCCL's texts quote paths and variables); null reads as
/// empty.
fn c_text(p: *const c_char) -> Text {
    if p.is_null() {
        return Text::new();
    }
    // SAFETY: non-null and NUL-terminated per NCCL's contract (see the callers); copied out
    // before any other NCCL call can change it.
    let s = unsafe { CStr::from_ptr(p) };
    oxccl_core::text!("{}", Escaped(&os_text(OsStr::from_bytes(s.to_bytes()))))
}

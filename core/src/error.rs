//! The one error type of oxccl. Each variant says what the caller can do about it.

use crate::comm_state::CommState;
use crate::feature::{Feature, FeatureSet, Missing};
use crate::result::ResultCode;
use crate::text::{Escaped, Text};

mod fix;

pub use fix::{Fix, GET_NCCL};

/// `Result` with oxccl's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything that can go wrong, grouped by what the caller should do.
///
/// `Display` shows every text it holds through [`Escaped`], so no value that reached a message
/// (a path, a variable's value, a peer's or the library's text) writes control characters to
/// a terminal (see [`crate::text`](mod@crate::text)). `Debug` is the same message followed by
/// what to do about it where oxccl knows ([`Error::fix`]), so `main` returning the error
/// prints both.
#[derive(Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The call was wrong: fix the named argument. Refused before any library call.
    #[error("invalid argument `{arg}`: expected {}", Escaped(.expected))]
    InvalidArgument {
        /// The argument at fault (`"recv"`, `"root"`, `"op"`, …).
        arg: &'static str,
        /// What it should have been, with what it was.
        expected: Text,
    },
    /// The loaded library lacks what the call needs: load a newer one or avoid the feature.
    #[error("{feature} is unavailable: {missing}")]
    Unsupported {
        /// The feature the call needs.
        feature: Feature,
        /// Why it is missing.
        missing: Missing,
    },
    /// The object is in a state where the call is not allowed (a dead communicator, a group
    /// closed twice): the reason is the first cause, kept.
    #[error("cannot {attempted} while {state}: {}", Escaped(.reason))]
    InvalidState {
        /// The state the object was in.
        state: CommState,
        /// What was attempted.
        attempted: &'static str,
        /// Why the object is in that state (the first failure, the abort reason, …).
        reason: Text,
    },
    /// The library (or a mock world standing for it) failed: the code, its own text for the code,
    /// and its last-error text for this failure.
    #[error(
        "{code}: {}{}{}",
        Escaped(.text),
        if last.is_empty() { "" } else { "; last error: " },
        Escaped(.last)
    )]
    Backend {
        /// The library's result code.
        code: ResultCode,
        /// The library's string for the code (`ncclGetErrorString`).
        text: Text,
        /// The library's description of the failure (`ncclGetLastError`), possibly empty.
        last: Text,
    },
    /// Something did not finish in time; the communicator may need an abort.
    #[error("timed out after {after_ms} ms: {}", Escaped(.what))]
    Timeout {
        /// What was waited for.
        what: Text,
        /// How long was waited.
        after_ms: u64,
    },
    /// The communicator was aborted; create a new one.
    #[error("communicator aborted: {}", Escaped(.reason))]
    Aborted {
        /// Why it was aborted.
        reason: Text,
    },
    /// Another rank failed (NCCL's remote error, a lost peer); abort and rebuild.
    #[error("remote failure: {}", Escaped(.detail))]
    Remote {
        /// What is known of the remote failure.
        detail: Text,
    },
    /// Ranks issued calls that do not match (counts, types, ops, roots). NCCL would hang or
    /// corrupt data; the mock world and the checks that can see it report it instead.
    #[error("ranks disagree on {what}: {}", Escaped(.detail))]
    Mismatch {
        /// What differs (`"count"`, `"dtype"`, `"op"`, `"root"`, `"operation"`).
        what: &'static str,
        /// The values each side gave.
        detail: Text,
    },
    /// Ranks of the group were lost (dead, or stopped answering) and the survivors went on
    /// without them as `epoch` (an elastic process group): the operation in flight did not
    /// complete (its outputs are undefined); the next one runs on the smaller group.
    #[error(
        "lost rank(s) {lost} of the group; the survivors go on as epoch {epoch} (the operation in flight did not complete): {}",
        Escaped(.cause)
    )]
    MembersLost {
        /// The lost ranks (global ranks, ascending).
        lost: crate::rank_list::RankList,
        /// The epoch the survivors go on as (one more per loss).
        epoch: u64,
        /// The failure that showed the loss.
        cause: Text,
    },
    /// A graph capture was misused, or cannot be done (see [`crate::traits::Capture`]): the
    /// communicator is unaffected.
    #[error("graph capture ({kind}): {}", Escaped(.detail))]
    Capture {
        /// What went wrong.
        kind: CaptureError,
        /// The call and what it needed.
        detail: Text,
    },
}

impl Error {
    /// An [`Error::InvalidArgument`] for `arg` with a formatted expectation.
    pub fn invalid(arg: &'static str, expected: core::fmt::Arguments<'_>) -> Error {
        Error::InvalidArgument {
            arg,
            expected: crate::text::text(expected),
        }
    }

    /// The library's result code, when the error came from the library.
    pub fn code(&self) -> Option<ResultCode> {
        match self {
            Error::Backend { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the communicator that produced this error can no longer be used.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::Backend { .. }
                | Error::Timeout { .. }
                | Error::Aborted { .. }
                | Error::Remote { .. }
                | Error::Mismatch { .. }
        )
    }
}

/// What went wrong with a capture, for [`Error::Capture`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CaptureError {
    /// The backend, the stream or the operation cannot be captured (a library too old, an
    /// operation that allocates, a host callback the mock cannot replay).
    Unsupported,
    /// `begin_capture` on a stream that is already capturing (captures do not nest).
    AlreadyCapturing,
    /// `end_capture` on a stream that is not capturing.
    NotCapturing,
    /// A call not allowed while the stream captures: synchronize, an event query, a wait on
    /// an event recorded outside the capture, launching a graph on the capturing stream.
    Forbidden,
    /// The capture saw a forbidden call (or the library invalidated it): `end_capture`
    /// returns no graph; capture again.
    Invalidated,
    /// A graph launched with what it was not captured with (another stream's device, buffers
    /// that are not the captured ones).
    Mismatch,
}

impl CaptureError {
    /// A short name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            CaptureError::Unsupported => "unsupported",
            CaptureError::AlreadyCapturing => "already capturing",
            CaptureError::NotCapturing => "not capturing",
            CaptureError::Forbidden => "forbidden while capturing",
            CaptureError::Invalidated => "capture invalidated",
            CaptureError::Mismatch => "launched with other arguments than captured",
        }
    }

    /// An [`Error::Capture`] of this kind with a formatted detail.
    pub fn error(self, detail: core::fmt::Arguments<'_>) -> Error {
        Error::Capture {
            kind: self,
            detail: crate::text::text(detail),
        }
    }

    /// An [`Error::Capture`] of this kind with a fixed detail.
    pub fn error_str(self, detail: &str) -> Error {
        Error::Capture {
            kind: self,
            detail: crate::text::text_str(detail),
        }
    }
}

impl core::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl FeatureSet {
    /// `Ok` when `f` is available, else [`Error::Unsupported`] naming why it is missing.
    pub fn require(&self, f: Feature) -> Result<()> {
        self.check(f).map_err(|missing| Error::Unsupported {
            feature: f,
            missing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_argument() {
        let e = Error::invalid("root", format_args!("a rank below {}, got {}", 4, 9));
        let mut s = heapless::String::<256>::new();
        core::fmt::write(&mut s, format_args!("{e}")).unwrap();
        assert_eq!(
            s.as_str(),
            "invalid argument `root`: expected a rank below 4, got 9"
        );
        assert!(!e.is_fatal());
    }

    #[test]
    fn backend_errors_carry_the_code() {
        let e = Error::Backend {
            code: ResultCode(8),
            text: crate::text::text_str("timeout"),
            last: Text::new(),
        };
        assert_eq!(e.code(), Some(ResultCode::TIMEOUT));
        assert!(e.is_fatal());
    }

    #[test]
    fn display_escapes_control_characters_in_every_text() {
        let path = "/x\u{1b}[31mRED\x07";
        let e = Error::invalid("path", format_args!("a readable file, got {path}"));
        let mut s = heapless::String::<256>::new();
        core::fmt::write(&mut s, format_args!("{e}")).unwrap();
        assert_eq!(
            s.as_str(),
            "invalid argument `path`: expected a readable file, got /x\\e[31mRED\\a"
        );
        let e = Error::Backend {
            code: ResultCode(3),
            text: crate::text::text_str("internal\r"),
            last: crate::text::text_str("open /dev/shm/\u{9b}2J: \u{202e}denied\n"),
        };
        s.clear();
        core::fmt::write(&mut s, format_args!("{e}")).unwrap();
        assert_eq!(
            s.as_str(),
            "ncclInternalError (3): internal\\r; last error: open /dev/shm/\\u{9b}2J: \\u{202e}denied\\n"
        );
    }

    #[test]
    fn a_missing_feature_is_unsupported() {
        let s = FeatureSet::resolve(crate::version::Version::new(2, 28, 3), |sym| {
            sym != "ncclGather"
        });
        assert!(matches!(
            s.require(Feature::GatherScatter),
            Err(Error::Unsupported {
                feature: Feature::GatherScatter,
                missing: Missing::SymbolAbsent {
                    symbol: "ncclGather"
                },
            })
        ));
        assert!(s.require(Feature::AllToAll).is_ok());
    }
}

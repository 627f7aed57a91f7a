//! The watchdog's decisions, as pure functions of what it observed and the clock: what to do
//! when a work fails or times out, whether the watchdog itself is stuck, how long to sleep.
//! The thread that acts on them lives in the std crate.

use crate::env::ErrorHandling;
use crate::error::Error;

pub mod desync;

/// What the watchdog does about one failed or timed-out work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailurePlan {
    /// Abort the work's communicator (freeing every rank blocked on it).
    pub abort: bool,
    /// Write the flight recorder's dump first.
    pub dump: bool,
    /// Take the process down afterwards.
    pub end_process: bool,
}

/// Why a work ended badly, as far as the plan is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// It ran past its timeout.
    Timeout,
    /// The library or a peer failed (an asynchronous error, a remote failure, a mismatch).
    Error,
    /// Its communicator was aborted on purpose (by the user, a destroy, a shutdown, or the
    /// watchdog itself for another work): nothing more to do.
    Aborted,
}

impl FailureKind {
    /// The kind of `e`.
    pub fn of(e: &Error) -> FailureKind {
        match e {
            Error::Timeout { .. } => FailureKind::Timeout,
            Error::Aborted { .. } => FailureKind::Aborted,
            Error::InvalidState {
                state: crate::CommState::Aborted | crate::CommState::Destroyed,
                ..
            } => FailureKind::Aborted,
            _ => FailureKind::Error,
        }
    }
}

/// The plan for a work that failed with `kind`, under `mode` (c10d's
/// `TORCH_NCCL_ASYNC_ERROR_HANDLING`): NoHandling leaves it to the user's `wait`; CleanUpOnly
/// aborts the communicator and lets the user's thread see the error; TearDown aborts, then ends
/// the process; SkipCleanUp ends the process without aborting (an abort may itself hang).
/// A dump is written before a process ends, and on a timeout when `dump_on_timeout`. A
/// purposeful abort triggers nothing.
pub fn failure_plan(mode: ErrorHandling, kind: FailureKind, dump_on_timeout: bool) -> FailurePlan {
    if kind == FailureKind::Aborted {
        return FailurePlan {
            abort: false,
            dump: false,
            end_process: false,
        };
    }
    let (abort, end_process) = match mode {
        ErrorHandling::NoHandling => (false, false),
        ErrorHandling::CleanUpOnly => (true, false),
        ErrorHandling::TearDown => (true, true),
        ErrorHandling::SkipCleanUp => (false, true),
    };
    FailurePlan {
        abort,
        dump: end_process || (dump_on_timeout && kind == FailureKind::Timeout),
        end_process,
    }
}

/// Whether a watchdog whose last heartbeat was at `last_ns` is stuck at `now_ns`, given the
/// limit (a clock going backwards is no time passed; overflow saturates).
pub fn heartbeat_stuck(last_ns: u64, now_ns: u64, limit_ms: u64) -> bool {
    now_ns.saturating_sub(last_ns) > limit_ms.saturating_mul(1_000_000)
}

/// How long the watchdog sleeps before its next pass: its poll period, but no longer than
/// the time left until the earliest deadline of the works in flight (at least 1 ms, so a
/// deadline already past does not spin).
pub fn next_sleep_ms(period_ms: u64, now_ns: u64, earliest_deadline_ns: Option<u64>) -> u64 {
    let until = earliest_deadline_ns
        .map(|d| d.saturating_sub(now_ns) / 1_000_000)
        .unwrap_or(period_ms);
    until.clamp(1, period_ms.max(1))
}

/// The store key a rank sets when one of its collectives fails in a way that dumps: every
/// rank's coordination check sees it and dumps its own flight recorder (c10d's dump on every
/// rank). Its value is the global rank that set it, in decimal.
pub const DUMP_SIGNAL_KEY: &str = "oxccl/timeout_dump";

/// The global rank a dump signal's value names, strictly (decimal digits); `None` for anything
/// else (a value this process cannot read is still a signal, from an unknown rank).
pub fn dump_signal_rank(value: &[u8]) -> Option<u32> {
    let s = core::str::from_utf8(value).ok()?;
    let n = crate::env::parse_u64("value", s, 0, u64::from(u32::MAX)).ok()?;
    u32::try_from(n).ok()
}

/// Whether a process should dump on seeing the dump signal set by `signaller`: once (after
/// `already_dumped` nothing more), and not for its own signal (it dumped when it set it).
pub fn should_dump_on_signal(signaller: Option<u32>, me: u32, already_dumped: bool) -> bool {
    !already_dumped && signaller != Some(me)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::text_str;

    #[test]
    fn plans_by_mode() {
        let t = FailureKind::Timeout;
        let p = |mode, kind, dump| failure_plan(mode, kind, dump);
        assert_eq!(
            p(ErrorHandling::NoHandling, t, false),
            FailurePlan {
                abort: false,
                dump: false,
                end_process: false
            }
        );
        assert_eq!(
            p(ErrorHandling::NoHandling, t, true),
            FailurePlan {
                abort: false,
                dump: true,
                end_process: false
            }
        );
        assert_eq!(
            p(ErrorHandling::CleanUpOnly, FailureKind::Error, false),
            FailurePlan {
                abort: true,
                dump: false,
                end_process: false
            }
        );
        assert_eq!(
            p(ErrorHandling::TearDown, FailureKind::Error, false),
            FailurePlan {
                abort: true,
                dump: true,
                end_process: true
            }
        );
        assert_eq!(
            p(ErrorHandling::SkipCleanUp, t, false),
            FailurePlan {
                abort: false,
                dump: true,
                end_process: true
            }
        );
        for mode in [
            ErrorHandling::NoHandling,
            ErrorHandling::TearDown,
            ErrorHandling::CleanUpOnly,
            ErrorHandling::SkipCleanUp,
        ] {
            let none = p(mode, FailureKind::Aborted, true);
            assert!(!none.abort && !none.dump && !none.end_process);
        }
    }

    #[test]
    fn kinds_of_errors() {
        let timeout = Error::Timeout {
            what: text_str("x"),
            after_ms: 1,
        };
        assert_eq!(FailureKind::of(&timeout), FailureKind::Timeout);
        let aborted = Error::Aborted {
            reason: text_str("user"),
        };
        assert_eq!(FailureKind::of(&aborted), FailureKind::Aborted);
        let remote = Error::Remote {
            detail: text_str("peer"),
        };
        assert_eq!(FailureKind::of(&remote), FailureKind::Error);
        let dead = Error::InvalidState {
            state: crate::CommState::Destroyed,
            attempted: "x",
            reason: text_str("destroyed"),
        };
        assert_eq!(FailureKind::of(&dead), FailureKind::Aborted);
    }

    #[test]
    fn dump_signals() {
        assert_eq!(dump_signal_rank(b"3"), Some(3));
        assert_eq!(dump_signal_rank(b"4294967295"), Some(u32::MAX));
        for bad in [&b""[..], b"-1", b"4294967296", b"x", b"\xff"] {
            assert_eq!(dump_signal_rank(bad), None, "{bad:?}");
        }
        assert!(should_dump_on_signal(Some(1), 0, false));
        assert!(should_dump_on_signal(None, 0, false));
        assert!(!should_dump_on_signal(Some(0), 0, false));
        assert!(!should_dump_on_signal(Some(1), 0, true));
    }

    #[test]
    fn heartbeat_and_sleep_survive_odd_clocks() {
        assert!(!heartbeat_stuck(10, 5, 0));
        assert!(heartbeat_stuck(0, u64::MAX, u64::MAX / 2_000_000));
        assert!(!heartbeat_stuck(0, 1_000_000, 1));
        assert!(heartbeat_stuck(0, 1_000_001, 1));
        assert!(!heartbeat_stuck(0, u64::MAX, u64::MAX));
        assert_eq!(next_sleep_ms(100, 0, None), 100);
        assert_eq!(next_sleep_ms(100, 0, Some(5_000_000)), 5);
        assert_eq!(next_sleep_ms(100, 10, Some(5)), 1);
        assert_eq!(next_sleep_ms(0, 0, None), 1);
        assert_eq!(next_sleep_ms(100, 0, Some(u64::MAX)), 100);
    }
}

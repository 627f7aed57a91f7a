//! A blocking call run on a thread of its own, its caller waiting for it at most a limit.
//!
//! For the calls NCCL gives no way to bound (the blocking init of releases before 2.14): the
//! call cannot be interrupted, so past the limit it is abandoned, not stopped. Whatever it
//! returns later goes to a clean-up the caller gave ([`within`]'s `on_late`), on the call's own
//! thread, so nothing it made leaks and nothing is released twice: the hand-over (the caller
//! takes the value, or marks it abandoned) happens under one lock, exactly once.

use oxccl_core::{text, Error, Result, ResultCode};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// What the call's thread left for the caller: its return, or its panic.
type Outcome<T> = std::thread::Result<Result<T>>;

/// Where the call's thread and its caller meet.
struct Slot<T> {
    /// The caller still waits: the thread leaves its outcome here. Once false (past the limit,
    /// or the outcome taken) the thread keeps it and hands a value to `on_late`.
    waiting: bool,
    /// The call's outcome, left while the caller waited.
    outcome: Option<Outcome<T>>,
}

struct Shared<T> {
    slot: Mutex<Slot<T>>,
    done: Condvar,
}

impl<T> Shared<T> {
    /// The slot; a poisoned lock only means a panic elsewhere while it was held (none of the
    /// code holding it can panic), and the slot is always in a valid state.
    fn lock(&self) -> MutexGuard<'_, Slot<T>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs `f` on a new thread named `thread` and waits at most `limit` for it.
///
/// - `f` returns in time: its result, value or error, as it gave it.
/// - `f` panics in time: an [`Error::Backend`] (internal error) naming `what`, with the panic's
///   message: the caller never waits for a call that cannot come back.
/// - `limit` passes first: [`Error::Timeout`] (`"{what} still in progress"`, with the time
///   waited) at once, and `f` is abandoned: it keeps running on its thread, and when it returns
///   a value that thread gives it to `on_late` (its errors and panics are only logged). The
///   caller is never blocked past `limit` by the thread.
/// - the thread cannot be started: an [`Error::Backend`] (system error); `f` never runs.
///
/// `on_late` is dropped unused when the caller takes the result.
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    thread: String,
    what: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
    on_late: impl FnOnce(T) + Send + 'static,
) -> Result<T> {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot {
            waiting: true,
            outcome: None,
        }),
        done: Condvar::new(),
    });
    let theirs = Arc::clone(&shared);
    let late_what = what.to_owned();
    let began = Instant::now();
    let spawned = std::thread::Builder::new().name(thread).spawn(move || {
        let outcome = catch_unwind(AssertUnwindSafe(f));
        let mut slot = theirs.lock();
        if slot.waiting {
            slot.outcome = Some(outcome);
            theirs.done.notify_all();
            return;
        }
        drop(slot);
        match outcome {
            Ok(Ok(value)) => on_late(value),
            Ok(Err(e)) => {
                log::debug!("oxccl: {late_what} failed after its caller stopped waiting: {e}")
            }
            Err(panic) => log::warn!(
                "oxccl: {late_what} panicked after its caller stopped waiting: {}",
                panic_text(panic.as_ref())
            ),
        }
    });
    if let Err(e) = spawned {
        return Err(Error::Backend {
            code: ResultCode::SYSTEM_ERROR,
            text: text!("could not start a thread for {what}"),
            last: text!("{e}"),
        });
    }
    let slot = shared.lock();
    let (mut slot, _) = shared
        .done
        .wait_timeout_while(slot, limit, |s| s.outcome.is_none())
        .unwrap_or_else(PoisonError::into_inner);
    // Taken or given up under the lock: from here on the thread sees nobody waiting, and hands
    // a late outcome to `on_late` instead of leaving it here.
    slot.waiting = false;
    match slot.outcome.take() {
        Some(Ok(result)) => result,
        Some(Err(panic)) => Err(Error::Backend {
            code: ResultCode::INTERNAL_ERROR,
            text: text!("{what} panicked"),
            last: text!("{}", panic_text(panic.as_ref())),
        }),
        None => Err(Error::Timeout {
            what: text!("{what} still in progress"),
            after_ms: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
        }),
    }
}

/// A panic's message, when it has one.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, RecvTimeoutError};

    /// Far beyond any of these tests' real times: a bound that only a hang breaks.
    const GENEROUS: Duration = Duration::from_secs(10);

    fn never_late<T>(_: T) {
        panic!("on_late called although the caller took the result");
    }

    #[test]
    fn a_result_in_time_is_returned_from_the_named_thread() {
        let began = Instant::now();
        let got = within(
            GENEROUS,
            "oxccl-test-in-time".into(),
            "the test call",
            || Ok(std::thread::current().name().map(str::to_owned)),
            never_late,
        );
        assert_eq!(got, Ok(Some("oxccl-test-in-time".to_owned())));
        assert!(began.elapsed() < GENEROUS, "{:?}", began.elapsed());
    }

    #[test]
    fn an_error_in_time_is_passed_through_as_it_is() {
        let e = Error::Remote {
            detail: text!("peer 3 lost"),
        };
        let sent = e.clone();
        let got: Result<u32> = within(
            GENEROUS,
            "oxccl-test-error".into(),
            "the test call",
            move || Err(sent),
            never_late,
        );
        assert_eq!(got, Err(e));
    }

    #[test]
    fn past_the_limit_the_caller_gets_a_timeout_and_on_late_gets_the_value() {
        let limit = Duration::from_millis(200);
        let (open, gate) = channel::<()>();
        let (late_tx, late_rx) = channel::<u64>();
        let began = Instant::now();
        let got = within(
            limit,
            "oxccl-test-late".into(),
            "the slow call",
            move || {
                // Blocks until the test opens the gate (or drops it).
                let _ = gate.recv();
                Ok(41u64)
            },
            move |v| late_tx.send(v + 1).unwrap(),
        );
        let took = began.elapsed();
        match got {
            Err(Error::Timeout { what, after_ms }) => {
                assert_eq!(what.as_str(), "the slow call still in progress");
                assert!(after_ms >= 200, "{after_ms}");
            }
            other => panic!("expected Error::Timeout, got {other:?}"),
        }
        assert!(took >= limit && took < limit + GENEROUS, "{took:?}");
        // Nothing reached on_late while the call was blocked.
        assert_eq!(
            late_rx.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Empty)
        );
        open.send(()).unwrap();
        assert_eq!(late_rx.recv_timeout(GENEROUS), Ok(42));
    }

    #[test]
    fn a_late_error_is_only_logged_and_on_late_is_dropped_unused() {
        let (open, gate) = channel::<()>();
        // on_late holds the only sender: once its thread ends it is dropped, sending nothing.
        let (late_tx, late_rx) = channel::<&'static str>();
        let got: Result<u8> = within(
            Duration::from_millis(50),
            "oxccl-test-late-error".into(),
            "the failing call",
            move || {
                let _ = gate.recv();
                Err(Error::Remote {
                    detail: text!("too late"),
                })
            },
            move |_| late_tx.send("called").unwrap(),
        );
        assert!(matches!(got, Err(Error::Timeout { .. })), "{got:?}");
        open.send(()).unwrap();
        assert_eq!(
            late_rx.recv_timeout(GENEROUS),
            Err(RecvTimeoutError::Disconnected)
        );
    }

    #[test]
    fn a_late_panic_is_only_logged_and_on_late_is_dropped_unused() {
        let (open, gate) = channel::<()>();
        let (late_tx, late_rx) = channel::<&'static str>();
        let got: Result<u8> = within(
            Duration::from_millis(50),
            "oxccl-test-late-panic".into(),
            "the late panicking call",
            move || {
                let _ = gate.recv();
                panic!("late boom")
            },
            move |_| late_tx.send("called").unwrap(),
        );
        assert!(matches!(got, Err(Error::Timeout { .. })), "{got:?}");
        open.send(()).unwrap();
        assert_eq!(
            late_rx.recv_timeout(GENEROUS),
            Err(RecvTimeoutError::Disconnected)
        );
    }

    #[test]
    fn a_panic_in_time_is_an_error_not_a_hang() {
        let limit = Duration::from_secs(60);
        let began = Instant::now();
        let got: Result<u8> = within(
            limit,
            "oxccl-test-panic".into(),
            "the panicking call",
            || panic!("boom {}", 7),
            never_late,
        );
        assert!(began.elapsed() < GENEROUS, "{:?}", began.elapsed());
        match got {
            Err(Error::Backend { code, text, last }) => {
                assert_eq!(code, ResultCode::INTERNAL_ERROR);
                assert_eq!(text.as_str(), "the panicking call panicked");
                assert_eq!(last.as_str(), "boom 7");
            }
            other => panic!("expected Error::Backend, got {other:?}"),
        }
    }

    #[test]
    fn a_zero_limit_never_waits_for_a_blocked_call() {
        let (open, gate) = channel::<()>();
        let (late_tx, late_rx) = channel::<&'static str>();
        let began = Instant::now();
        let got = within(
            Duration::ZERO,
            "oxccl-test-zero".into(),
            "the blocked call",
            move || {
                let _ = gate.recv();
                Ok("value")
            },
            move |v| late_tx.send(v).unwrap(),
        );
        assert!(began.elapsed() < GENEROUS, "{:?}", began.elapsed());
        assert!(
            matches!(got, Err(Error::Timeout { ref what, .. }) if what.as_str() == "the blocked call still in progress"),
            "{got:?}"
        );
        drop(open);
        assert_eq!(late_rx.recv_timeout(GENEROUS), Ok("value"));
    }
}

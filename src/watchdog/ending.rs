//! The ending order after a failure that dumps: the failing rank sets the dump signal, writes
//! its own dump, reports it in the store, and then keeps its process (and the store it may
//! host: under `env://` without an agent, rank 0's process serves it) alive until every rank
//! of the world has reported its dump or `OXCCL_WAIT_TIMEOUT_DUMP_MS` has passed since the
//! failure; only then is the error-handling mode applied. The other ranks see the signal
//! within `OXCCL_COORD_CHECK_MS` (see `coord`), dump and report. Without the wait, the rank
//! that hosts the store would end first and take the signal with it, and the one dump that
//! matters, the stuck rank's, would be the one lost.
//!
//! Every store call runs on a thread of its own, bounded by what is left of the limit: a store
//! that stopped answering blocks a call for its whole timeout, which must not keep a failed
//! process from ending. What the rank learned (store errors, who never reported) is written
//! into its dump's note, so `oxccl trace` can say why a dump is missing.
//!
//! A program whose mode keeps the process may still end it while the wait runs (its thread
//! saw the error and returned from `main`): an exit guard (`atexit`) holds the exit until the
//! wait in progress is over, bounded by its deadline.
//!
//! The decision of each step is the core's `dump_wait_step`. Between two reads of the report
//! counter the failing rank waits on the key the last reporter sets, which the store answers
//! when it is set: a few store calls per failing rank, however long the wait, even when
//! every rank of a large world failed at once.

use super::dumps::{Dumps, Reporter};
use super::lock::lock;
use crate::recorder::now_ns;
use crate::recorder::target::write_within;
use crate::recorder::{DumpCause, DumpNote, DumpWait};
use crate::store::Store;
use oxccl_core::watchdog::{
    dump_wait_step, DumpWaitEnd, DumpWaitStep, DUMP_ALL_REPORTED_KEY, DUMP_REPORT_COUNT_KEY,
    DUMP_REPORT_PREFIX, DUMP_SIGNAL_KEY,
};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The pause after a wait for the last report that failed other than by timing out.
const WAIT_FAILED_PAUSE: Duration = Duration::from_millis(100);

/// Worlds up to this size are asked rank by rank who did not report, when a wait ends short;
/// larger ones are counted only (one store call per rank would outlast the wait).
const NAME_UNREPORTED_UP_TO: u32 = 4096;

/// The key rank `rank` sets when it reported its dump.
fn report_key(rank: u32) -> String {
    format!("{DUMP_REPORT_PREFIX}{rank}")
}

/// Runs `f` on a thread of its own and waits for it until `deadline` (keeping the watchdog's
/// heartbeat while it waits, so a long dump wait is not taken for a stuck watchdog); `None`
/// when the deadline came first (the thread is left to finish alone).
fn within<T: Send + 'static>(
    dumps: &Dumps,
    deadline: Instant,
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = tx.send(f());
        });
    if let Err(e) = spawned {
        log::error!("oxccl: cannot start the {name} thread: {e}");
        return None;
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(Duration::from_secs(1))) {
            Ok(v) => return Some(v),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !left.is_zero() => {
                dumps.heartbeat.store(now_ns(), Ordering::Relaxed);
            }
            Err(_) => return None,
        }
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

/// The dumps whose ending the exit guard waits for (the watchdog's, set with the guard).
static GUARDED: OnceLock<Arc<Dumps>> = OnceLock::new();

/// Installs the exit guard once per process, waiting for `dumps`' ending (when the first group
/// that dumps on timeout is made, long before any exit begins).
pub(super) fn install_exit_guard(dumps: &Arc<Dumps>) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = GUARDED.set(dumps.clone());
        // SAFETY: `exit_guard` is an `extern "C" fn()` that never unwinds (it catches every
        // panic) and lives as long as the program (it is a plain function).
        let failed = unsafe { libc::atexit(exit_guard) } != 0;
        if failed {
            log::warn!("oxccl: cannot install the exit guard of the dump coordination");
        }
    });
}

/// Run by `exit`: waits for a failure's dumps and the wait for every rank's dump, if one is in
/// progress, until its deadline.
extern "C" fn exit_guard() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(dumps) = GUARDED.get() {
            dumps.await_ending();
        }
    });
}

impl Dumps {
    /// Waits while a failure's dump coordination is in progress, until its deadline.
    fn await_ending(&self) {
        while let Some(until) = *lock(&self.ending_until) {
            if Instant::now() >= until {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Writes every dump of this process with `note`, then reports each of its ranks in the
    /// store (once per rank for the process's life), all before `deadline`. The note gains the
    /// first store error met.
    pub(super) fn dump_and_report(&self, reason: &str, note: &mut DumpNote, deadline: Instant) {
        self.failure_dumped.store(true, Ordering::Release);
        let left = deadline.saturating_duration_since(Instant::now());
        if !write_within(self.jobs(Some(note)), reason, left) {
            // The dump did not get written: reporting it would end the others' wait falsely.
            return;
        }
        let todo: Vec<Reporter> = {
            let mut done = lock(&self.reported);
            self.reporters()
                .into_iter()
                .filter(|r| {
                    let first = !done.contains(&r.rank);
                    if first {
                        done.push(r.rank);
                    }
                    first
                })
                .collect()
        };
        if todo.is_empty() {
            return;
        }
        let reported = within(self, deadline, "oxccl-dump-report", move || {
            for r in &todo {
                let key = report_key(r.rank);
                let sent = r
                    .store
                    .set(&key, b"1")
                    .and_then(|()| r.store.add(DUMP_REPORT_COUNT_KEY, 1))
                    .and_then(|n| {
                        // The last report wakes the failing ranks' waits.
                        if n >= i64::from(r.world) {
                            r.store.set(DUMP_ALL_REPORTED_KEY, b"1")
                        } else {
                            Ok(())
                        }
                    });
                if let Err(e) = sent {
                    return Err(format!(
                        "reporting rank {}'s dump at `{}`: {e}",
                        r.rank,
                        r.store.full_key(&key)
                    ));
                }
            }
            Ok(())
        });
        let err = match reported {
            Some(Ok(())) => return,
            Some(Err(e)) => e,
            None => "the store did not answer in time while reporting the dump".to_string(),
        };
        log::error!("oxccl watchdog: {err}");
        note.store_error.get_or_insert(err);
    }

    /// The whole failure path of a rank whose plan dumps: the signal (when its group dumps on
    /// timeout), its dump and report, and the wait for every rank's dump, bounded by `limit`
    /// from now. Returns when the error-handling mode may be applied.
    pub(super) fn dump_for_failure(
        &self,
        reason: &str,
        rank: u32,
        signal: Option<&Arc<dyn Store>>,
        limit: Duration,
    ) {
        let began = Instant::now();
        let deadline = crate::deadline::deadline_after(limit);
        // An exit meanwhile waits for this (plus the bounded rewrite of the dump at the end).
        *lock(&self.ending_until) = Some(deadline + Duration::from_secs(2));
        self.coordinate_failure(reason, rank, signal, limit, began, deadline);
        *lock(&self.ending_until) = None;
    }

    /// [`Dumps::dump_for_failure`]'s steps.
    fn coordinate_failure(
        &self,
        reason: &str,
        rank: u32,
        signal: Option<&Arc<dyn Store>>,
        limit: Duration,
        began: Instant,
        deadline: Instant,
    ) {
        let mut note = DumpNote::new(DumpCause::OwnFailure);
        let signalled = signal.is_some_and(|store| {
            let store = store.clone();
            let set = within(self, deadline, "oxccl-dump-signal", move || {
                store
                    .set(DUMP_SIGNAL_KEY, rank.to_string().as_bytes())
                    .map_err(|e| e.to_string())
            });
            let err = match set {
                Some(Ok(())) => return true,
                Some(Err(e)) => format!("setting the dump signal: {e}"),
                None => "the store did not answer in time while setting the dump signal".into(),
            };
            log::warn!("oxccl watchdog: cannot signal the other ranks to dump: {err}");
            note.store_error = Some(err);
            false
        });
        self.dump_and_report(reason, &mut note, deadline);
        if !signalled {
            return;
        }
        let Some(me) = self.reporters().into_iter().find(|r| r.rank == rank) else {
            return;
        };
        let (wait, store_error) = self.await_every_dump(&me, began, deadline);
        if let Some(e) = store_error {
            note.store_error.get_or_insert(e);
        }
        let short = wait.outcome != DumpWaitEnd::AllReported;
        match wait.outcome {
            DumpWaitEnd::AllReported => log::info!(
                "oxccl watchdog: every rank of {} reported its dump after {} ms",
                me.world,
                wait.waited_ms
            ),
            outcome => log::error!(
                "oxccl watchdog: stopped waiting for the other ranks' dumps after {} ms ({}); \
                 not reported: {}",
                wait.waited_ms,
                match outcome {
                    DumpWaitEnd::StoreUnreachable => "the store stopped answering",
                    _ => "OXCCL_WAIT_TIMEOUT_DUMP_MS passed",
                },
                if wait.unreported.is_empty() {
                    "unknown".to_string()
                } else {
                    crate::recorder::rank_ranges(&wait.unreported)
                }
            ),
        }
        note.wait = Some(wait);
        if short {
            // The dump on disk says who never reported, for `oxccl trace`; a short, bounded
            // rewrite (the one before was written in time, so this one should be too).
            write_within(
                self.jobs(Some(&note)),
                reason,
                Duration::from_secs(2).min(limit),
            );
        }
    }

    /// Waits until every rank of `me`'s world has reported its dump, the store stops
    /// answering, or `deadline` passes.
    /// Also the store's error, when it stopped answering.
    fn await_every_dump(
        &self,
        me: &Reporter,
        began: Instant,
        deadline: Instant,
    ) -> (DumpWait, Option<String>) {
        let limit_ms = millis(deadline.saturating_duration_since(began));
        // One wait for the rest of the limit: the last report ends it.
        let poll_ms = limit_ms;
        let (store, world) = (me.store.clone(), me.world);
        // The whole loop on one thread, bounded by the deadline (a store call that hangs past
        // it ends the wait as the limit does).
        let (outcome, store_error) = within(self, deadline, "oxccl-dump-wait", move || loop {
            let reported = store.add(DUMP_REPORT_COUNT_KEY, 0);
            let elapsed = millis(began.elapsed());
            let step = dump_wait_step(
                reported.as_ref().ok().copied(),
                world,
                elapsed,
                limit_ms,
                poll_ms,
            );
            match step {
                DumpWaitStep::PollAfter(ms) => {
                    let waited = store.wait(&[DUMP_ALL_REPORTED_KEY], Duration::from_millis(ms));
                    // A timeout shows at the next read of the counter; another failure may
                    // be the wait's alone (the counter still answers): no faster than this.
                    if matches!(waited, Err(ref e) if !matches!(e, oxccl_core::Error::Timeout { .. }))
                    {
                        std::thread::sleep(WAIT_FAILED_PAUSE.min(Duration::from_millis(ms)));
                    }
                }
                DumpWaitStep::End(end) => {
                    let err = reported
                        .err()
                        .map(|e| format!("reading `{DUMP_REPORT_COUNT_KEY}`: {e}"));
                    break (end, err);
                }
            }
        })
        .unwrap_or((DumpWaitEnd::LimitPassed, None));
        let unreported = if outcome == DumpWaitEnd::LimitPassed && me.world <= NAME_UNREPORTED_UP_TO
        {
            // Asked after the deadline, with a short bound of its own.
            let (store, world) = (me.store.clone(), me.world);
            let ask = Instant::now() + Duration::from_secs(2);
            within(self, ask, "oxccl-dump-wait", move || {
                (0..world)
                    .filter(|&r| !matches!(store.check(&[&report_key(r)]), Ok(true)))
                    .collect()
            })
            .unwrap_or_default()
        } else {
            Vec::new()
        };
        let wait = DumpWait {
            outcome,
            waited_ms: millis(began.elapsed()),
            unreported,
        };
        (wait, store_error)
    }
}

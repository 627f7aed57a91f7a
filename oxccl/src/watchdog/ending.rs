//! The ending order after a failure that dumps: the failing rank writes its own dump, sets the
//! dump request, reports its dump in the store, and then keeps its process (and the store it
//! may host: under `env://` without an agent, rank 0's process serves it) alive until every
//! rank of the world has reported its dump or `OXCCL_WAIT_TIMEOUT_DUMP_MS` has passed since
//! the failure; only then is the error-handling mode applied. The other ranks see the signal
//! within `OXCCL_COORD_CHECK_MS` (see `coord`), dump and report. Without the wait, the rank
//! that hosts the store would end first and take the signal with it, and the one dump that
//! matters, the stuck rank's, would be the one lost.
//!
//! A rank's dump is written before anything that can wait on the store: a store that stopped
//! answering (its host frozen, say) blocks a call for its whole timeout, and the dump is what
//! the failure must leave whatever the store does. The dump then holds the note as known at
//! that point; what the rank learns afterwards (store errors, who signalled, who never
//! reported) is written into it again at the end, in a short, bounded rewrite of the same
//! ring, so `oxccl trace` can say why a dump is missing.
//!
//! Every store call runs on a thread of its own, bounded by what is left of the limit: a
//! stuck call must not keep a failed process from ending.
//!
//! A program whose mode keeps the process may still end it while the wait runs (its thread
//! saw the error and returned from `main`): an exit guard (`atexit`) holds the exit until the
//! wait in progress is over, bounded by its deadline. The program may even see its error
//! before the watchdog does (both go by the same deadline): the guard first lets the watchdog
//! look at every work once, so the ending of that failure begins before the exit goes on.
//!
//! The decision of each step is the core's `dump_wait_step`. Between two reads of the report
//! counter the failing rank waits on the key the last reporter sets, which the store answers
//! when it is set: a few store calls per failing rank, however long the wait, even when
//! every rank of a large world failed at once.

use super::dumps::{Dumps, Reporter};
use super::lock::lock;
use crate::recorder::now_ns;
use crate::recorder::target::{write_within, DumpJob, DumpWriting};
use crate::recorder::{DumpCause, DumpNote, DumpWait};
use crate::store::Store;
use oxccl_rules::watchdog::{
    dump_wait_step, DumpWaitEnd, DumpWaitStep, DUMP_ALL_REPORTED_KEY, DUMP_REPORT_COUNT_KEY,
    DUMP_REPORT_PREFIX, DUMP_REQUEST_KEY,
};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The pause after a wait for the last report that failed other than by timing out.
const WAIT_FAILED_PAUSE: Duration = Duration::from_millis(100);

/// Worlds up to this size are asked rank by rank who did not report, when a wait ends short;
/// larger ones are counted only (one store call per rank would outlast the wait).
const NAME_UNREPORTED_UP_TO: u32 = 4096;

/// How long a failing rank waits for its own dump before it signals the other ranks anyway:
/// far more than a dump takes, and a dump stuck on a hung filesystem must not keep the other
/// ranks from dumping.
const WRITE_BEFORE_REQUEST: Duration = Duration::from_secs(2);

/// The bound of the question of who did not report, asked once the wait's deadline passed.
const ASK_UNREPORTED: Duration = Duration::from_secs(2);

/// The bound of a dump's rewrite with its final note (the first write was in time, so this
/// one should be too).
const REWRITE_LIMIT: Duration = Duration::from_secs(2);

/// How long past its deadline a failure's ending may still take: the question of who did not
/// report, then the rewrite of the dump.
pub(super) const PAST_DEADLINE: Duration =
    Duration::from_secs(ASK_UNREPORTED.as_secs() + REWRITE_LIMIT.as_secs());

/// How long an exit waits for the watchdog to look at every work once (a pass takes far
/// less; one stuck in a driver call must not hold the exit).
const EXIT_LOOKS_FOR: Duration = Duration::from_secs(2);

/// The key rank `rank` sets when it reported its dump.
fn report_key(rank: u32) -> String {
    format!("{DUMP_REPORT_PREFIX}{rank}")
}

/// Runs `f` on a thread of its own and waits for it until `deadline` (keeping the watchdog's
/// heartbeat while it waits, so a long dump wait is not taken for a stuck watchdog); `None`
/// when the deadline came first (the thread is left to finish alone).
pub(super) fn within<T: Send + 'static>(
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

/// The dumps of a failure as first written, kept for their rewrite with the final note.
pub(super) struct FirstDumps {
    /// The jobs written (sharing the ring they wrote).
    jobs: Vec<DumpJob>,
    /// The note they hold.
    note: DumpNote,
}

/// Whether `now` says more than `written`, the note a dump holds, so the dump is written again:
/// a wait that ended with every rank's report says nothing the dumps themselves do not.
fn says_more(written: &DumpNote, now: &DumpNote) -> bool {
    let all_reported = now
        .wait
        .as_ref()
        .is_some_and(|w| w.outcome == DumpWaitEnd::AllReported);
    now.cause != written.cause
        || now.store_error != written.store_error
        || (now.wait != written.wait && !all_reported)
}

/// How the exit guard waits for one whole pass of the watchdog, until `done` says the
/// ending began or [`EXIT_LOOKS_FOR`] passed (the watchdog gives it, so this file needs
/// nothing of the thread's).
pub(super) type AwaitPass = fn(limit: Duration, done: &dyn Fn() -> bool);

/// The dumps whose ending the exit guard waits for (the watchdog's, set with the guard), and
/// how it waits for a pass.
static GUARDED: OnceLock<(Arc<Dumps>, AwaitPass)> = OnceLock::new();

/// Installs the exit guard once per process, waiting for `dumps`' ending (when the first group
/// that dumps on timeout is made, long before any exit begins).
pub(super) fn install_exit_guard(dumps: &Arc<Dumps>, await_pass: AwaitPass) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = GUARDED.set((dumps.clone(), await_pass));
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
        if let Some((dumps, await_pass)) = GUARDED.get() {
            // A failure the program saw first (its wait timed out as the watchdog's deadline
            // came) may not have reached the watchdog yet: a whole pass of it looks at every
            // work and begins the ending of one that failed.
            await_pass(EXIT_LOOKS_FOR, &|| lock(&dumps.ending_until).is_some());
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

    /// Starts writing every dump of this process with `note`, for a failure (its own or one
    /// it was told of): the coordination check has nothing left to do once this begins.
    pub(super) fn start_dumps(&self, reason: &str, note: &DumpNote) -> (DumpWriting, FirstDumps) {
        self.failure_dumped.store(true, Ordering::Release);
        let jobs = self.jobs(Some(note));
        let first = FirstDumps {
            jobs: jobs.iter().map(|j| j.renoted(Some(note))).collect(),
            note: note.clone(),
        };
        (DumpWriting::start(jobs, reason), first)
    }

    /// Reports each rank of this process in the store (once per rank for the process's life),
    /// before `deadline`; only for dumps written (a report ends the others' wait). The note
    /// gains the first store error met.
    pub(super) fn report(&self, note: &mut DumpNote, deadline: Instant) {
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

    /// Writes `first` again with `note` when it says more than the note they hold (see
    /// [`says_more`]), within [`REWRITE_LIMIT`] (or `limit`, when shorter): never long, as the
    /// first write was in time.
    pub(super) fn rewrite(
        &self,
        first: &mut FirstDumps,
        reason: &str,
        note: &DumpNote,
        limit: Duration,
    ) {
        if !says_more(&first.note, note) {
            return;
        }
        let jobs = first.jobs.iter().map(|j| j.renoted(Some(note))).collect();
        if write_within(jobs, reason, REWRITE_LIMIT.min(limit)) {
            first.note = note.clone();
        }
    }

    /// Writes every dump of this process with `note`, then reports each of its ranks in the
    /// store, all before `deadline`, and writes the dumps again if the note gained a store
    /// error meanwhile: for a failure this process does not wait on the other ranks for (a
    /// stuck watchdog).
    pub(super) fn dump_and_report(&self, reason: &str, note: &mut DumpNote, deadline: Instant) {
        let limit = deadline.saturating_duration_since(Instant::now());
        let (mut writing, mut first) = self.start_dumps(reason, note);
        if !writing.finish_by(deadline, limit) {
            // The dump did not get written: reporting it would end the others' wait falsely.
            return;
        }
        self.report(note, deadline);
        self.rewrite(&mut first, reason, note, limit);
    }

    /// The whole failure path of a rank whose plan dumps: its dump, the signal (when its group
    /// dumps on timeout), its report, and the wait for every rank's dump, bounded by `limit`
    /// from now (and a short rewrite of the dump past it). Returns when the error-handling
    /// mode may be applied.
    pub(super) fn dump_for_failure(
        &self,
        reason: &str,
        rank: u32,
        signal: Option<&Arc<dyn Store>>,
        limit: Duration,
    ) {
        let began = Instant::now();
        let deadline = crate::deadline::deadline_after(limit);
        // An exit meanwhile waits for this, and for what may follow the deadline.
        *lock(&self.ending_until) = Some(deadline + PAST_DEADLINE);
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
        // The dump first: every step after it may wait on the store.
        let (mut writing, mut first) = self.start_dumps(reason, &note);
        writing.written_by(deadline.min(Instant::now() + WRITE_BEFORE_REQUEST));
        let signalled =
            signal.is_some_and(|store| self.request_dumps(store, rank, deadline, &mut note));
        if !writing.finish_by(deadline, limit) {
            // Not written: reporting it would end the others' wait falsely, and a rewrite
            // would race the write still under way.
            return;
        }
        self.report(&mut note, deadline);
        if signalled {
            if let Some(me) = self.reporters().into_iter().find(|r| r.rank == rank) {
                note.wait = Some(self.await_every_dump(&me, began, deadline, &mut note));
            }
        }
        // The dump on disk says what the store did and who never reported, for `oxccl trace`.
        self.rewrite(&mut first, reason, &note, limit);
    }

    /// Sets the dump request in `store` as rank `rank`, before `deadline`; `false`, and the
    /// note gains the error, when the store did not take it.
    fn request_dumps(
        &self,
        store: &Arc<dyn Store>,
        rank: u32,
        deadline: Instant,
        note: &mut DumpNote,
    ) -> bool {
        let store = store.clone();
        let set = within(self, deadline, "oxccl-dump-request", move || {
            store
                .set(DUMP_REQUEST_KEY, rank.to_string().as_bytes())
                .map_err(|e| e.to_string())
        });
        let err = match set {
            Some(Ok(())) => return true,
            Some(Err(e)) => format!("setting the dump request: {e}"),
            None => "the store did not answer in time while setting the dump request".into(),
        };
        log::warn!("oxccl watchdog: cannot signal the other ranks to dump: {err}");
        note.store_error.get_or_insert(err);
        false
    }

    /// Waits until every rank of `me`'s world has reported its dump, the store stops
    /// answering, or `deadline` passes, and says how it ended; the note gains the store's
    /// error, when it stopped answering.
    fn await_every_dump(
        &self,
        me: &Reporter,
        began: Instant,
        deadline: Instant,
        note: &mut DumpNote,
    ) -> DumpWait {
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
        if let Some(e) = store_error {
            note.store_error.get_or_insert(e);
        }
        let unreported = if outcome == DumpWaitEnd::LimitPassed && me.world <= NAME_UNREPORTED_UP_TO
        {
            // Asked after the deadline, with a short bound of its own.
            let (store, world) = (me.store.clone(), me.world);
            let ask = Instant::now() + ASK_UNREPORTED;
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
        wait
    }
}

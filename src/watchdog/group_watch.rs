//! What the watchdog needs to know of a group and of its works: the group's error-handling
//! mode, its completion hooks, the flight recorder its works are recorded in, the store it
//! signals dumps through, its desync-debug progress, and the ring its works are handed to the
//! watchdog through; a work as the watchdog sees it ([`Watched`]: each names its group).

use super::lock::lock;
use super::queue::Queue;
use crate::recorder::Recorder;
use crate::store::Store;
use oxccl_core::env::ErrorHandling;
use oxccl_core::state::work::WorkInfo;
use oxccl_core::text::Escaped;
use oxccl_core::watchdog::desync::RankProgress;
use oxccl_core::watchdog::Hint;
use oxccl_core::{OpKind, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A work as the watchdog sees it.
pub(crate) trait Watched: Send + Sync {
    /// Records the work's flight-recorder entry unless it was recorded at issue (in issue
    /// order, to within a pass: see the watchdog's `issue_order`); its id, which the watchdog
    /// keeps (nothing is written into the work).
    fn record_trace(&self) -> Option<u64>;
    /// Whether its end event has been reached (one query, no state change); `None` for a work
    /// without one (it issued nothing, so it says nothing of its stream).
    fn probe_done(&self) -> Option<bool>;
    /// Whether it has an end event (no query).
    fn has_end(&self) -> bool;
    /// One look: completed, still running, or its first error (timeouts against the group's
    /// limit). A completion or failure seen feeds hooks and the recorder (entry `trace`): the
    /// watchdog looks until then, and no more.
    fn poll(&self, now_ns: u64, hint: Hint, trace: Option<u64>) -> Result<bool>;
    /// When its group's timeout runs out.
    fn deadline_ns(&self) -> u64;
    /// When it was issued (process clock, ns).
    fn created_ns(&self) -> u64;
    /// Its group's configuration.
    fn watch(&self) -> &GroupWatch;
    /// Its group's configuration, shared.
    fn watch_arc(&self) -> Arc<GroupWatch>;
    /// What it is (sequence number, operation).
    fn info(&self) -> WorkInfo;
    /// Aborts its communicator.
    fn abort_comm(&self, reason: &str);
}

/// A group's hand-off ring to the watchdog (held by its [`GroupWatch`]).
pub(crate) type Inbox = Queue<Arc<dyn Watched>>;

/// Slots of a group's hand-off ring (works queued between two passes beyond it overflow to a
/// list).
const INBOX_SLOTS: usize = 1024;

/// Where the watchdog of group `uid`'s group rank `rank` writes its progress (desync debug;
/// listed with every other key of a process group in `pg::keys`).
pub(crate) fn desync_key(uid: u64, rank: u32) -> String {
    format!("oxccl/desync/{uid}/{rank}")
}

/// What a completion hook is told about a finished operation (timing on).
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedWork {
    /// The group's uid.
    pub group: u64,
    /// The operation (the first of a coalesced block).
    pub op: OpKind,
    /// Whether the work stood for a coalesced block.
    pub coalesced: bool,
    /// Its sequence number in the group.
    pub seq: u64,
    /// When it was issued, in nanoseconds of the process's monotonic clock.
    pub created_ns: u64,
    /// When the watchdog saw it completed, same clock.
    pub completed_ns: u64,
    /// How long it ran on its stream, from its start and end events.
    pub duration: Duration,
}

/// A completion hook: an error it returns is reported (logged and kept on the group).
pub type CompletionHook = Box<dyn Fn(&CompletedWork) -> Result<(), String> + Send + Sync>;

/// A group's part of the watchdog's configuration, shared by its works.
pub(crate) struct GroupWatch {
    pub uid: u64,
    pub desc: String,
    pub global_rank: u32,
    pub mode: ErrorHandling,
    pub dump_on_timeout: bool,
    pub recorder: Recorder,
    /// The group's store: the dump signal is set there, desync reports live there.
    pub store: Arc<dyn Store>,
    /// How long a failed rank waits for its dump before it aborts or ends the process.
    pub wait_timeout_dump: Duration,
    /// Desync debugging, when on.
    pub desync: Option<Desync>,
    hooks: Mutex<Vec<CompletionHook>>,
    hook_errors: Mutex<Vec<String>>,
    /// Works the watchdog is done with, dropped by the next thread that issues on the group
    /// (see [`GroupWatch::reap`]); `None` once the group is gone.
    graveyard: Mutex<Option<Graveyard>>,
    /// Works in the graveyard (read without the lock on the hot path).
    buried: AtomicUsize,
    /// Works queued to the watchdog so far (the last one's place; the issuing thread's).
    queued: AtomicU64,
    /// The place of the newest work the watchdog saw complete: it and every earlier work of
    /// the group's stream are done (written by the watchdog, on a line of its own).
    done: Padded,
    /// Works handed to the watchdog, not yet taken by a pass (the group's own ring; see
    /// `crate::watchdog`).
    pub inbox: Inbox,
    /// Whether the watchdog drains [`GroupWatch::inbox`] (set by its first work).
    pub enrolled: AtomicBool,
}

/// A counter alone on its cache line (the watchdog writes it; issuing threads only read it).
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// Works buried before the issuing thread drops them, in one batch.
const REAP_EVERY: usize = 32;

type Buried = Vec<Arc<dyn Watched>>;

/// Buried works, and the emptied list of the last reap kept for the next one (no allocation
/// on either thread once both lists have grown).
#[derive(Default)]
struct Graveyard {
    dead: Buried,
    spare: Buried,
}

/// What [`GroupWatch::new`] is made from.
pub(crate) struct WatchConfig {
    pub uid: u64,
    pub desc: String,
    pub global_rank: u32,
    pub mode: ErrorHandling,
    pub dump_on_timeout: bool,
    pub recorder: Recorder,
    pub store: Arc<dyn Store>,
    pub wait_timeout_dump: Duration,
    /// Desync debugging: this rank's group rank and the members' global ranks.
    pub desync: Option<(u32, Vec<u32>)>,
}

/// A group's desync-debug state: this rank's progress (kept by the watchdog) and what it last
/// published in the store.
pub(crate) struct Desync {
    /// This rank in the group.
    pub group_rank: u32,
    /// The members' global ranks, by group rank.
    pub ranks: Vec<u32>,
    /// (now, last published).
    progress: Mutex<(RankProgress, Option<RankProgress>)>,
    /// The last report written on a timeout.
    pub report: Mutex<Option<String>>,
    /// The verdict of the last collective that timed out here (computed once per collective,
    /// by the watchdog or a blocking wait, whichever saw the timeout first).
    last: Mutex<Option<Verdict>>,
}

/// What desync debugging concluded of a collective that timed out on this rank: the global
/// ranks that never joined it (empty: every rank did, so the hang is elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// The collective's sequence number.
    pub seq: u64,
    /// The global ranks that never joined it, ascending.
    pub lagging: Vec<u32>,
}

impl Verdict {
    /// The note a timed-out work's error ends with (the core's
    /// [`oxccl_core::watchdog::desync::write_note`]).
    pub fn note(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = oxccl_core::watchdog::desync::write_note(&mut s, &self.lagging);
        s
    }

    /// The head of an abort reason (first, so that a reason cut to the error's inline length
    /// still says it); `None` when no rank lagged (the core's
    /// [`oxccl_core::watchdog::desync::write_headline`]).
    pub fn headline(&self) -> Option<String> {
        let mut s = String::new();
        let wrote = oxccl_core::watchdog::desync::write_headline(&mut s, self.seq, &self.lagging);
        wrote.unwrap_or(false).then_some(s)
    }
}

/// How long a desync verdict waits for each rank's progress in the store.
pub(crate) const DESYNC_READ_LIMIT: Duration = Duration::from_secs(2);

impl Desync {
    /// Notes a collective issued (`completed == false`) or seen complete.
    pub fn note(&self, seq: u64, completed: bool) {
        let mut p = lock(&self.progress);
        p.0.issued = p.0.issued.max(seq);
        if completed {
            p.0.completed = p.0.completed.max(seq);
        }
    }

    /// Writes this rank's progress to the store when it changed since the last write (at most
    /// one store call per group per watchdog pass). A store failure is logged, and retried at
    /// the next change.
    pub fn publish(&self, uid: u64, store: &dyn Store) {
        let now = {
            let mut p = lock(&self.progress);
            if p.1 == Some(p.0) {
                return;
            }
            p.1 = Some(p.0);
            p.0
        };
        let key = desync_key(uid, self.group_rank);
        if let Err(e) = store.set(&key, now.encode().as_bytes()) {
            log::warn!("oxccl desync debug: cannot publish progress at `{key}`: {e}");
            lock(&self.progress).1 = None;
        }
    }
}

impl GroupWatch {
    pub fn new(c: WatchConfig) -> Arc<GroupWatch> {
        Arc::new(GroupWatch {
            uid: c.uid,
            desc: c.desc,
            global_rank: c.global_rank,
            mode: c.mode,
            dump_on_timeout: c.dump_on_timeout,
            recorder: c.recorder,
            store: c.store,
            wait_timeout_dump: c.wait_timeout_dump,
            desync: c.desync.map(|(group_rank, ranks)| Desync {
                group_rank,
                ranks,
                progress: Mutex::new((RankProgress::default(), None)),
                report: Mutex::new(None),
                last: Mutex::new(None),
            }),
            hooks: Mutex::new(Vec::new()),
            hook_errors: Mutex::new(Vec::new()),
            graveyard: Mutex::new(Some(Graveyard::default())),
            buried: AtomicUsize::new(0),
            queued: AtomicU64::new(0),
            done: Padded::default(),
            inbox: Queue::new(INBOX_SLOTS),
            enrolled: AtomicBool::new(false),
        })
    }

    /// The place of the next work queued to the watchdog (from 1, issue order; called under
    /// the group's issue lock).
    pub fn next_place(&self) -> u64 {
        self.queued.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The watchdog saw the work at `place` complete (so every earlier one is done too).
    pub fn saw_done(&self, place: u64) {
        self.done.0.fetch_max(place, Ordering::Release);
    }

    /// The place of the newest work the watchdog saw complete (0: none yet).
    pub fn done_upto(&self) -> u64 {
        self.done.0.load(Ordering::Acquire)
    }

    /// Hands works the watchdog is done with to the group's issuing thread, which drops them
    /// ([`GroupWatch::reap`]): a work was allocated there, and freeing it there keeps its
    /// memory, its event (back to the stream's pool) and the reference counts it holds (the
    /// group's, the communicator's) on the issuing thread's core, instead of bouncing those
    /// cache lines to the watchdog's on every operation. Dropped here when the group is gone.
    pub fn bury(&self, works: impl Iterator<Item = Arc<dyn Watched>>) {
        let mut g = lock(&self.graveyard);
        if let Some(y) = g.as_mut() {
            y.dead.extend(works);
            self.buried.store(y.dead.len(), Ordering::Relaxed);
            return;
        }
        drop(g);
        works.for_each(drop);
    }

    /// Drops the buried works once there are [`REAP_EVERY`] of them (the issuing thread's
    /// call: one relaxed load otherwise).
    pub fn reap(&self) {
        if self.buried.load(Ordering::Relaxed) < REAP_EVERY {
            return;
        }
        let mut dead = match lock(&self.graveyard).as_mut() {
            Some(y) => {
                self.buried.store(0, Ordering::Relaxed);
                let spare = std::mem::take(&mut y.spare);
                std::mem::replace(&mut y.dead, spare)
            }
            None => return,
        };
        // Dropped without the lock (the watchdog may bury meanwhile).
        dead.clear();
        if let Some(y) = lock(&self.graveyard).as_mut() {
            y.spare = dead;
        }
    }

    /// Drops the buried works and buries no more (the group is gone: its works hold the
    /// group's watch, so keeping them would keep it alive).
    pub fn close_graveyard(&self) {
        let dead = lock(&self.graveyard).take();
        self.buried.store(0, Ordering::Relaxed);
        drop(dead);
    }

    /// The desync report of a collective `seq` (`op`) that timed out here: every member's
    /// published progress read from the store (each read bounded by `limit`), analysed by the
    /// core ([`oxccl_core::watchdog::desync::write_report`]). `None` when desync debugging is
    /// off, and when the store could not be read (the report kept then says so). The report
    /// is also kept for `ProcessGroup::desync_report`. With it, the global ranks that
    /// never joined the collective.
    pub fn desync_report(
        &self,
        seq: u64,
        op: OpKind,
        limit: Duration,
    ) -> Option<(String, Vec<u32>)> {
        let d = self.desync.as_ref()?;
        // Publish this rank's own last state first, so the report has it.
        d.publish(self.uid, &*self.store);
        // After the first failed store call the rest are not read (unknown): a store that is
        // gone or cut off would otherwise cost its timeout once per rank, on the watchdog's
        // thread, and a heartbeat monitor would end the process meanwhile.
        let mut reachable = true;
        let reports: Vec<(u32, Option<RankProgress>)> = d
            .ranks
            .iter()
            .enumerate()
            .map(|(i, &global)| {
                let key = desync_key(self.uid, i as u32);
                let read = match reachable.then(|| self.store.check(&[&key])) {
                    Some(Ok(true)) => self.store.get(&key, limit).ok(),
                    Some(Ok(false)) | None => None,
                    Some(Err(e)) => {
                        log::warn!(
                            "oxccl desync debug: store unreachable reading `{}` ({e}): the other ranks' progress is unknown",
                            Escaped(&self.store.full_key(&key))
                        );
                        reachable = false;
                        None
                    }
                };
                (global, read.and_then(|v| RankProgress::decode(&v).ok()))
            })
            .collect();
        if !reachable {
            // No verdict: ranks whose progress could not be read are not known to lag.
            *lock(&d.report) = Some(format!(
                "desync report: collective #{seq} ({}) timed out on rank {}; the store could not be read, so the other ranks' progress is unknown",
                op.name(),
                self.global_rank
            ));
            return None;
        }
        let mut text = String::new();
        let _ = oxccl_core::watchdog::desync::write_report(
            &mut text,
            self.global_rank,
            seq,
            op.name(),
            &reports,
        );
        *lock(&d.report) = Some(text.clone());
        let lagging = oxccl_core::watchdog::desync::lagging(seq, &reports).collect();
        Some((text, lagging))
    }

    /// The desync verdict of collective `seq` (`op`) that timed out here: computed (and its
    /// report kept, see [`GroupWatch::desync_report`]) by the first caller, the same for the
    /// later ones. `None` with desync debugging off and for point-to-point operations (they
    /// have a sequence of their own, and a peer that skips one is not behind the group).
    pub fn verdict(&self, seq: u64, op: OpKind) -> Option<Verdict> {
        let d = self.desync.as_ref()?;
        if matches!(op, OpKind::Send | OpKind::Recv) {
            return None;
        }
        if let Some(v) = lock(&d.last).as_ref().filter(|v| v.seq == seq) {
            return Some(v.clone());
        }
        let (_, lagging) = self.desync_report(seq, op, DESYNC_READ_LIMIT)?;
        let v = Verdict { seq, lagging };
        *lock(&d.last) = Some(v.clone());
        Some(v)
    }

    /// Why the communicator is aborted for a failure `e` of this group: the desync headline
    /// first when there is one.
    pub fn failure_reason(&self, e: &oxccl_core::Error, verdict: Option<&Verdict>) -> String {
        let head = format!(
            "process group {} ({}) rank {}",
            self.uid,
            Escaped(&self.desc),
            self.global_rank
        );
        match verdict.and_then(Verdict::headline) {
            Some(h) => format!("{head}: {h}; {e}"),
            None => format!("{head}: {e}"),
        }
    }

    pub fn add_hook(&self, hook: CompletionHook) {
        lock(&self.hooks).push(hook);
    }

    /// Runs every hook on `done`; a failing or panicking hook is reported, not lost.
    pub fn run_hooks(&self, done: &CompletedWork) {
        let hooks = lock(&self.hooks);
        for (i, hook) in hooks.iter().enumerate() {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(done)));
            let failure = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(_) => String::from("the hook panicked"),
            };
            let msg = format!(
                "completion hook {i} of group {} failed on seq {}: {}",
                self.uid,
                done.seq,
                Escaped(&failure)
            );
            log::error!("{msg}");
            lock(&self.hook_errors).push(msg);
        }
    }

    pub fn hook_errors(&self) -> Vec<String> {
        lock(&self.hook_errors).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    /// A store that is gone: every call fails, and is counted.
    struct Gone {
        calls: AtomicUsize,
    }

    impl Store for Gone {
        fn set(&self, _: &str, _: &[u8]) -> oxccl_core::Result<()> {
            Err(self.fail())
        }
        fn get(&self, _: &str, _: Duration) -> oxccl_core::Result<Vec<u8>> {
            Err(self.fail())
        }
        fn add(&self, _: &str, _: i64) -> oxccl_core::Result<i64> {
            Err(self.fail())
        }
        fn wait(&self, _: &[&str], _: Duration) -> oxccl_core::Result<()> {
            Err(self.fail())
        }
        fn check(&self, _: &[&str]) -> oxccl_core::Result<bool> {
            Err(self.fail())
        }
        fn compare_set(&self, _: &str, _: &[u8], _: &[u8]) -> oxccl_core::Result<Vec<u8>> {
            Err(self.fail())
        }
        fn delete(&self, _: &str) -> oxccl_core::Result<bool> {
            Err(self.fail())
        }
        fn num_keys(&self) -> oxccl_core::Result<u64> {
            Err(self.fail())
        }
        fn timeout(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    impl Gone {
        fn fail(&self) -> oxccl_core::Error {
            self.calls.fetch_add(1, Ordering::Relaxed);
            oxccl_core::Error::Remote {
                detail: oxccl_core::text!("connection refused"),
            }
        }
    }

    fn watch(store: Arc<dyn Store>, ranks: u32) -> Arc<GroupWatch> {
        GroupWatch::new(WatchConfig {
            uid: 0,
            desc: String::from("default_pg"),
            global_rank: 0,
            mode: ErrorHandling::CleanUpOnly,
            dump_on_timeout: false,
            recorder: Recorder::new(0),
            store,
            wait_timeout_dump: Duration::from_secs(1),
            desync: Some((0, (0..ranks).collect())),
        })
    }

    #[test]
    fn a_gone_store_costs_one_failed_read_not_one_per_rank() {
        let gone = Arc::new(Gone {
            calls: AtomicUsize::new(0),
        });
        let w = watch(gone.clone(), 64);
        // No verdict: nobody's progress is known, so nobody is named as lagging.
        assert_eq!(
            w.desync_report(5, OpKind::AllReduce, Duration::from_secs(1)),
            None
        );
        // This rank's publish, then the first check; the other 63 ranks are not asked.
        assert_eq!(gone.calls.load(Ordering::Relaxed), 2);
        assert_eq!(w.verdict(5, OpKind::AllReduce), None);
        assert_eq!(gone.calls.load(Ordering::Relaxed), 4);
        let kept = w.desync.as_ref().unwrap().report.lock().unwrap().clone();
        assert_eq!(
            kept.as_deref(),
            Some(
                "desync report: collective #5 (all_reduce) timed out on rank 0; the store could \
                 not be read, so the other ranks' progress is unknown"
            )
        );
    }

    #[test]
    fn a_live_store_is_read_for_every_rank() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let w = watch(store.clone(), 3);
        // Ranks 0 and 1 issued and completed seq 5; rank 2 never got to it.
        for r in [1u32, 2] {
            let p = RankProgress {
                issued: if r == 1 { 5 } else { 4 },
                completed: 4,
            };
            store.set(&desync_key(0, r), p.encode().as_bytes()).unwrap();
        }
        w.desync.as_ref().unwrap().note(5, false);
        let (_, lagging) = w
            .desync_report(5, OpKind::AllReduce, Duration::from_secs(1))
            .unwrap();
        assert_eq!(lagging, [2]);
    }
}

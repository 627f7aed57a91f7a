//! What the watchdog needs to know of a group and of its works: the group's error-handling
//! mode, its completion hooks, the flight recorder its works are recorded in, the store it
//! signals dumps through, its desync-debug state ([`Desync`]), and the ring its works of their
//! own are handed to the watchdog through; a work as the watchdog sees it ([`Watched`]: each
//! names its group), and a communicator's ring of works as it sees it ([`WatchedRing`]).

use super::desync::{Desync, Verdict};
use super::lock::lock;
use super::queue::Queue;
use crate::recorder::slot::TraceContext;
use crate::recorder::Recorder;
use crate::store::Store;
use oxccl_core::state::work::WorkInfo;
use oxccl_core::text::Escaped;
use oxccl_core::{OpKind, Result};
use oxccl_rules::env::ErrorHandling;
use oxccl_rules::watchdog::Hint;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// A communicator's ring of works (see `pg::work::ring`) as the watchdog sees it: it looks
/// at the works through it, and takes from it those that need a look of their own.
pub(crate) trait WatchedRing: Send + Sync {
    /// Its group's configuration.
    fn watch(&self) -> &GroupWatch;
    /// Its group's configuration, shared.
    fn watch_arc(&self) -> Arc<GroupWatch>;
    /// Appends the issue times of its works not yet recorded in the flight recorder, oldest
    /// first.
    fn unrecorded(&self, times: &mut Vec<u64>);
    /// Records the oldest work not yet recorded (nothing when none is left).
    fn record_next(&self);
    /// One look at its works in flight: records what is left, marks what completed, and
    /// moves the works that need a look of their own (failed, past their deadline) into `out`
    /// with their recorder entries. Returns the works it still watches and the earliest of
    /// their deadlines.
    fn pass(
        &self,
        now_ns: u64,
        out: &mut Vec<(Arc<dyn Watched>, Option<u64>)>,
    ) -> (usize, Option<u64>);
    /// Whether it holds nothing to look at.
    fn idle(&self) -> bool;
    /// Notes that the watchdog let it go (it stopped): the ring's next work enrolls it again.
    fn unenroll(&self);
}

/// A group's hand-off ring to the watchdog (held by its [`GroupWatch`]).
pub(crate) type Inbox = Queue<Arc<dyn Watched>>;

/// Slots of a group's hand-off ring (works queued between two passes beyond it overflow to a
/// list).
const INBOX_SLOTS: usize = 1024;

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
    /// The group's store: the dump request is set there, desync reports live there.
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
    /// Works handed to the watchdog, not yet taken by a pass (the group's own ring; see
    /// `crate::watchdog`).
    pub inbox: Inbox,
    /// Whether the watchdog drains [`GroupWatch::inbox`] (set by its first work).
    pub enrolled: AtomicBool,
}

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
            desync: c
                .desync
                .map(|(group_rank, ranks)| Desync::new(c.uid, c.global_rank, group_rank, ranks)),
            hooks: Mutex::new(Vec::new()),
            hook_errors: Mutex::new(Vec::new()),
            graveyard: Mutex::new(Some(Graveyard::default())),
            buried: AtomicUsize::new(0),
            inbox: Queue::new(INBOX_SLOTS),
            enrolled: AtomicBool::new(false),
        })
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

    /// The desync verdict of collective `seq` (`op`) that timed out here
    /// ([`Desync::verdict`]); `None` with desync debugging off.
    pub fn verdict(&self, seq: u64, op: OpKind) -> Option<Verdict> {
        self.desync.as_ref()?.verdict(&*self.store, seq, op)
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

    /// What a recorder entry of its work `info`, issued at `created_ns`, takes from the work
    /// and the group.
    pub fn trace_context(&self, info: WorkInfo, created_ns: u64) -> TraceContext {
        TraceContext {
            pg_id: self.uid,
            rank: self.global_rank,
            info,
            created_ns,
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

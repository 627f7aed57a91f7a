//! The process's dumps as the watchdog keeps them: where they go (a target per default group
//! with a dump directory) and what a failure did of them so far (whether this process dumped
//! for one, which of its ranks reported that in the store, until when an ending in progress
//! may keep the process). The failure's ending order is `ending`'s; the check for another
//! rank's signal is `coord`'s.

use super::lock::lock;
use crate::recorder::target::{DumpJob, DumpTarget};
use crate::recorder::{DumpCause, DumpNote};
use crate::store::Store;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A rank's place in the coordination: its rank, its world's size, the store it reports in and
/// how often the store is checked for the signal.
#[derive(Clone)]
pub(super) struct Reporter {
    pub rank: u32,
    pub world: u32,
    pub store: Arc<dyn Store>,
    pub every: Duration,
}

/// Where the process's dumps go, and what a failure did of them.
pub(crate) struct Dumps {
    /// A target per default group with a dump directory.
    targets: Mutex<Vec<DumpTarget>>,
    /// The watchdog's heartbeat (nanoseconds of the process clock at its last pass), kept
    /// beating while a dump waits on the store, so a long wait is not taken for a stuck
    /// watchdog.
    pub(super) heartbeat: Arc<AtomicU64>,
    /// Whether this process has dumped for a failure, its own or a signalled one (the
    /// coordination check then has nothing left to do).
    pub(super) failure_dumped: AtomicBool,
    /// Whether the coordination thread runs.
    pub(super) coord_started: AtomicBool,
    /// The ranks of this process that reported their dump in the store (once each).
    pub(super) reported: Mutex<Vec<u32>>,
    /// Until when a failure's dump coordination may keep the process (`None`: none runs); the
    /// exit guard waits for it.
    pub(super) ending_until: Mutex<Option<Instant>>,
}

impl Dumps {
    /// No target yet; `heartbeat` is the watchdog's.
    pub(super) fn new(heartbeat: Arc<AtomicU64>) -> Dumps {
        Dumps {
            targets: Mutex::new(Vec::new()),
            heartbeat,
            failure_dumped: AtomicBool::new(false),
            coord_started: AtomicBool::new(false),
            reported: Mutex::new(Vec::new()),
            ending_until: Mutex::new(None),
        }
    }

    /// Adds where a default group's dumps go.
    pub(super) fn add(&self, target: DumpTarget) {
        lock(&self.targets).push(target);
    }

    /// Whether any target is registered.
    pub(super) fn any(&self) -> bool {
        !lock(&self.targets).is_empty()
    }

    /// The ranks of this process that take part in the coordination (a default group that
    /// dumps on timeout), each with its store.
    pub(super) fn reporters(&self) -> Vec<Reporter> {
        lock(&self.targets)
            .iter()
            .filter_map(|t| {
                t.signal.as_ref().map(|(store, every)| Reporter {
                    rank: t.meta.rank,
                    world: t.meta.world_size,
                    store: store.clone(),
                    every: *every,
                })
            })
            .collect()
    }

    /// Writes every target's dump on request (nothing when none is registered).
    pub(super) fn write_requested(&self, reason: &str) {
        let note = DumpNote::new(DumpCause::Request);
        for j in self.jobs(Some(&note)) {
            j.write(reason, false);
        }
    }

    /// Every target's dump job, with `note` (taken under the lock, written without it).
    pub(super) fn jobs(&self, note: Option<&DumpNote>) -> Vec<DumpJob> {
        lock(&self.targets).iter().map(|t| t.job(note)).collect()
    }

    /// How long a failing process waits for its dumps: the longest limit of its targets.
    pub(super) fn wait_limit(&self) -> Duration {
        lock(&self.targets)
            .iter()
            .map(|t| t.wait_limit)
            .max()
            .unwrap_or(Duration::from_secs(60))
    }

    /// Serves dump requests (a `dump_request` file touched in a dump directory).
    pub(super) fn serve_requests(&self) {
        let note = DumpNote::new(DumpCause::Request);
        for t in lock(&self.targets).iter() {
            if t.trigger.requested() {
                t.write("requested", false, Some(&note));
            }
        }
    }
}

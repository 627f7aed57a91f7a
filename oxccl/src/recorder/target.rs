//! Where the watchdog writes flight-recorder dumps: one target per default group that has a
//! dump directory, written on a failure whose plan asks for it, when the heartbeat monitor
//! gives up, when another rank signals a failure through the store (see `coord`), and on
//! request (a `dump_request` file in the directory, see [`DumpTrigger`]).

use super::dump::{write_dump, DumpMeta};
use super::note::DumpNote;
use super::shared::Recorder;
use super::trigger::DumpTrigger;
use crate::store::Store;
use oxccl_rules::recorder::FlightRecorder;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// One rank's recorder and where its dumps go.
pub(crate) struct DumpTarget {
    pub dir: PathBuf,
    pub meta: DumpMeta,
    pub recorder: Recorder,
    pub trigger: DumpTrigger,
    /// How long a failing rank may take for its dumps and the other ranks' reports before it
    /// goes on (`OXCCL_WAIT_TIMEOUT_DUMP_MS`).
    pub wait_limit: Duration,
    /// The store polled for other ranks' dump requests, and how often (a group with dump on
    /// timeout); `None`: this target dumps only for its own process's reasons.
    pub signal: Option<(Arc<dyn Store>, Duration)>,
}

/// A dump to write, taken out of the target list so the write holds no lock. A clone writes
/// the same ring snapshot (`taken` is shared).
#[derive(Clone)]
pub(crate) struct DumpJob {
    dir: PathBuf,
    meta: DumpMeta,
    recorder: Recorder,
    /// The ring as the first write of this job (or of one it was [renoted](DumpJob::renoted)
    /// from) took it: a rewrite with a later note shows the same moment.
    taken: Arc<OnceLock<FlightRecorder>>,
}

impl DumpTarget {
    pub fn new(dir: PathBuf, meta: DumpMeta, recorder: Recorder) -> DumpTarget {
        let trigger = DumpTrigger::new(&dir);
        DumpTarget {
            dir,
            meta,
            recorder,
            trigger,
            wait_limit: Duration::from_secs(60),
            signal: None,
        }
    }

    /// The job that writes this target's dump, with `note` (see [`DumpNote`]).
    pub fn job(&self, note: Option<&DumpNote>) -> DumpJob {
        let mut meta = self.meta.clone();
        meta.note = note.cloned();
        DumpJob {
            dir: self.dir.clone(),
            meta,
            recorder: self.recorder.clone(),
            taken: Arc::new(OnceLock::new()),
        }
    }

    /// Writes the dump; a failure is logged (a dump must never take the watchdog down).
    pub fn write(&self, reason: &str, only_active: bool, note: Option<&DumpNote>) {
        self.job(note).write(reason, only_active);
    }
}

impl DumpJob {
    /// This job with `note` instead of its own, writing the ring this job took (or takes
    /// first), not a later one.
    pub fn renoted(&self, note: Option<&DumpNote>) -> DumpJob {
        let mut job = self.clone();
        job.meta.note = note.cloned();
        job
    }

    /// Writes the dump; a failure is logged.
    pub fn write(&self, reason: &str, only_active: bool) {
        let ring = self.taken.get_or_init(|| self.recorder.lock().clone());
        match write_dump(&self.dir, &self.meta, ring, only_active) {
            Ok(files) => log::error!(
                "oxccl: flight recorder of rank {} dumped to {} ({reason})",
                self.meta.rank,
                crate::escaped_path(&files.json)
            ),
            Err(e) => log::error!(
                "oxccl: cannot write the flight-recorder dump of rank {} into {}: {e}",
                self.meta.rank,
                crate::escaped_path(&self.dir)
            ),
        }
    }
}

/// Dumps being written on a thread of their own: a dump stuck on a hung filesystem must not
/// keep a failed process from aborting or ending, nor from doing what comes next meanwhile.
pub(crate) struct DumpWriting {
    /// Answers once every dump was written; `None`: the thread could not be started.
    done: Option<Receiver<()>>,
    finished: bool,
}

impl DumpWriting {
    /// Starts writing `jobs` (every entry, not only the active ones).
    pub fn start(jobs: Vec<DumpJob>, reason: &str) -> DumpWriting {
        if jobs.is_empty() {
            return DumpWriting {
                done: None,
                finished: true,
            };
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let why = reason.to_owned();
        let spawned = std::thread::Builder::new()
            .name("oxccl-dump".into())
            .spawn(move || {
                for j in &jobs {
                    j.write(&why, false);
                }
                let _ = tx.send(());
            });
        let done = match spawned {
            Ok(_) => Some(rx),
            Err(e) => {
                log::error!("oxccl: cannot start the dump thread: {e}");
                None
            }
        };
        DumpWriting {
            done,
            finished: false,
        }
    }

    /// Whether every dump was written by `until` (waiting for them until then at most).
    pub fn written_by(&mut self, until: Instant) -> bool {
        if !self.finished {
            if let Some(rx) = &self.done {
                let left = until.saturating_duration_since(Instant::now());
                // A thread gone without answering (it panicked) did not write them all.
                self.finished = rx.recv_timeout(left).is_ok();
            }
        }
        self.finished
    }

    /// [`DumpWriting::written_by`] `until`, saying so when the dumps did not finish in time
    /// (`limit`, the limit `until` comes from, is `OXCCL_WAIT_TIMEOUT_DUMP_MS`).
    pub fn finish_by(&mut self, until: Instant, limit: Duration) -> bool {
        if self.written_by(until) {
            return true;
        }
        if self.done.is_none() {
            // Never started (said when it failed to).
            return false;
        }
        let msg = format!(
            "oxccl watchdog: the flight-recorder dump did not finish within {} ms \
             (OXCCL_WAIT_TIMEOUT_DUMP_MS); going on without it",
            limit.as_millis()
        );
        log::error!("{msg}");
        eprintln!("{msg}");
        false
    }
}

/// Writes `jobs` on a thread of their own and waits for them at most `limit`
/// (`OXCCL_WAIT_TIMEOUT_DUMP_MS`; see [`DumpWriting`]). `true` when every dump was written in
/// time.
pub(crate) fn write_within(jobs: Vec<DumpJob>, reason: &str, limit: Duration) -> bool {
    DumpWriting::start(jobs, reason).finish_by(crate::deadline::deadline_after(limit), limit)
}

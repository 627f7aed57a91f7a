//! Where the watchdog writes flight-recorder dumps: one target per default group that has a
//! dump directory, written on a failure whose plan asks for it, when the heartbeat monitor
//! gives up, when another rank signals a failure through the store (see `coord`), and on
//! request (a `dump_request` file in the directory, see [`DumpTrigger`]).

use super::dump::{write_dump, DumpMeta};
use super::note::DumpNote;
use super::shared::Recorder;
use super::trigger::DumpTrigger;
use crate::store::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One rank's recorder and where its dumps go.
pub(crate) struct DumpTarget {
    pub dir: PathBuf,
    pub meta: DumpMeta,
    pub recorder: Recorder,
    pub trigger: DumpTrigger,
    /// How long a failing rank may take for its dumps and the other ranks' reports before it
    /// goes on (`OXCCL_WAIT_TIMEOUT_DUMP_MS`).
    pub wait_limit: Duration,
    /// The store polled for other ranks' dump signals, and how often (a group with dump on
    /// timeout); `None`: this target dumps only for its own process's reasons.
    pub signal: Option<(Arc<dyn Store>, Duration)>,
}

/// A dump to write, taken out of the target list so the write holds no lock.
pub(crate) struct DumpJob {
    dir: PathBuf,
    meta: DumpMeta,
    recorder: Recorder,
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
        }
    }

    /// Writes the dump; a failure is logged (a dump must never take the watchdog down).
    pub fn write(&self, reason: &str, only_active: bool, note: Option<&DumpNote>) {
        self.job(note).write(reason, only_active);
    }
}

impl DumpJob {
    /// Writes the dump; a failure is logged.
    pub fn write(&self, reason: &str, only_active: bool) {
        let ring = self.recorder.lock().clone();
        match write_dump(&self.dir, &self.meta, &ring, only_active) {
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

/// Writes `jobs` on a thread of their own and waits for them at most `limit`
/// (`OXCCL_WAIT_TIMEOUT_DUMP_MS`): a dump stuck on a hung filesystem must not keep a failed
/// process from aborting or ending. `true` when every dump was written in time.
pub(crate) fn write_within(jobs: Vec<DumpJob>, reason: &str, limit: Duration) -> bool {
    if jobs.is_empty() {
        return true;
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
    if let Err(e) = spawned {
        log::error!("oxccl: cannot start the dump thread: {e}");
        return false;
    }
    match rx.recv_timeout(limit) {
        Ok(()) => true,
        Err(_) => {
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
}

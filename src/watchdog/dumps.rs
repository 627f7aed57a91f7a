//! Where the watchdog writes flight-recorder dumps: one target per default group that has a
//! dump directory, written on a failure whose plan asks for it, when the heartbeat monitor
//! gives up, and on request (a `dump_request` file in the directory, see
//! [`crate::trace::DumpTrigger`]).

use crate::pg::Recorder;
use crate::trace::{write_dump, DumpMeta, DumpTrigger};
use std::path::PathBuf;

/// One rank's recorder and where its dumps go.
pub(crate) struct DumpTarget {
    pub dir: PathBuf,
    pub meta: DumpMeta,
    pub recorder: Recorder,
    pub trigger: DumpTrigger,
}

impl DumpTarget {
    pub fn new(dir: PathBuf, meta: DumpMeta, recorder: Recorder) -> DumpTarget {
        let trigger = DumpTrigger::new(&dir);
        DumpTarget {
            dir,
            meta,
            recorder,
            trigger,
        }
    }

    /// Writes the dump; a failure is logged (a dump must never take the watchdog down).
    pub fn write(&self, reason: &str, only_active: bool) {
        let ring = self.recorder.lock().clone();
        match write_dump(&self.dir, &self.meta, &ring, only_active) {
            Ok(files) => log::error!(
                "oxccl: flight recorder of rank {} dumped to {} ({reason})",
                self.meta.rank,
                files.json.display()
            ),
            Err(e) => log::error!(
                "oxccl: cannot write the flight-recorder dump of rank {} into {}: {e}",
                self.meta.rank,
                self.dir.display()
            ),
        }
    }
}

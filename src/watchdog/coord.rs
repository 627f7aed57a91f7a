//! The coordination check (c10d's `TORCH_NCCL_COORD_CHECK_MILSEC`): a rank whose failure
//! dumps its flight recorder also sets a signal in the store ([`DUMP_SIGNAL_KEY`]); every
//! process with a group that dumps on timeout looks for that signal every `coord_check` (on a
//! TCP store without asking the server: its client's idle connection waits on the key, so
//! the server answers once, when the signal is set; see `Store::check_watched`) and,
//! on seeing it, dumps its own flight recorder and reports that in the store (see `ending`:
//! the failing rank waits for every report before it ends), so one rank's timeout leaves a
//! dump of every rank for the analysis (`oxccl trace`, `torchfrtrace`).
//!
//! It runs on a thread of its own rather than in the watchdog's pass: a store that stopped
//! answering may block a call for its whole timeout, and the watchdog must keep checking
//! deadlines meanwhile. A process dumps once on a signal; the check ends then. What the
//! process does afterwards is up to its own watchdog: the collectives it waits on with the
//! failed rank time out there too (and dump again, with what they know then).

use super::dumps::Dumps;
use crate::recorder::{DumpCause, DumpNote};
use oxccl_core::watchdog::{dump_signal_rank, should_dump_on_signal, DUMP_SIGNAL_KEY};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl Dumps {
    /// Starts the coordination thread once per process.
    pub(super) fn start_coordination(self: &Arc<Self>) {
        if self.coord_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("oxccl-coord".into())
            .spawn(move || me.coordinate());
        if let Err(e) = spawned {
            self.coord_started.store(false, Ordering::Release);
            log::error!("oxccl: cannot start the dump coordination thread: {e}");
        }
    }

    /// The coordination thread: looks for the dump signal until this process has dumped for
    /// a failure.
    fn coordinate(&self) {
        loop {
            // The stores to look in, and how often (the shortest interval asked for).
            let reporters = self.reporters();
            let every = reporters
                .iter()
                .map(|r| r.every)
                .min()
                .unwrap_or(Duration::from_secs(1));
            std::thread::sleep(every);
            if self.failure_dumped.load(Ordering::Acquire) {
                return;
            }
            for r in &reporters {
                // Answered by the store's client without a query while the signal is not
                // set (where the store can: see `Store::check_watched`).
                if !matches!(r.store.check_watched(DUMP_SIGNAL_KEY), Ok(true)) {
                    continue;
                }
                let signaller = r
                    .store
                    .get(DUMP_SIGNAL_KEY, every)
                    .ok()
                    .and_then(|v| dump_signal_rank(&v));
                let dumped = self.failure_dumped.load(Ordering::Acquire);
                if !should_dump_on_signal(signaller, r.rank, dumped) {
                    continue;
                }
                let who =
                    signaller.map_or_else(|| "another rank".to_owned(), |r| format!("rank {r}"));
                let reason = format!("{who} failed and signalled every rank to dump");
                log::error!("oxccl: {reason}");
                let mut note = DumpNote::new(DumpCause::Signal(signaller));
                let deadline = crate::deadline::deadline_after(self.wait_limit());
                self.dump_and_report(&reason, &mut note, deadline);
                return;
            }
        }
    }
}

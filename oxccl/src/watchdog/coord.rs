//! The coordination check (c10d's `TORCH_NCCL_COORD_CHECK_MILSEC`): a rank whose failure
//! dumps its flight recorder also sets a signal in the store ([`DUMP_REQUEST_KEY`]); every
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

use super::dumps::{Dumps, Reporter};
use super::ending::within;
use crate::recorder::{DumpCause, DumpNote};
use oxccl_rules::watchdog::{dump_signal_rank, should_dump_on_request, DUMP_REQUEST_KEY};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bound of the read of who signalled (a key known to be set: a store that answers does
/// at once).
const SIGNALLER_READ_LIMIT: Duration = Duration::from_secs(1);

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

    /// The coordination thread: looks for the dump request until this process has dumped for
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
                if !matches!(r.store.check_watched(DUMP_REQUEST_KEY), Ok(true)) {
                    continue;
                }
                // Who signalled is read after the dump, which nothing that can wait on the
                // store may delay. This process's own signal is set only once its own dump
                // began, which `failure_dumped` tells: it is never taken for another's.
                let dumped = self.failure_dumped.load(Ordering::Acquire);
                if !should_dump_on_request(None, r.rank, dumped) {
                    continue;
                }
                self.dump_on_request(r, every);
                return;
            }
        }
    }

    /// Dumps on the signal seen in `r`'s store, learns who set it, reports the dumps, and
    /// writes them again with what it learned (`every`: how often the store is looked at).
    fn dump_on_request(&self, r: &Reporter, every: Duration) {
        let reason = "another rank failed and signalled every rank to dump";
        log::error!("oxccl: {reason}");
        let limit = self.wait_limit();
        let deadline = crate::deadline::deadline_after(limit);
        let mut note = DumpNote::new(DumpCause::Signal(None));
        let (mut writing, mut first) = self.start_dumps(reason, &note);
        if !writing.finish_by(deadline, limit) {
            // Not written: reporting it would end the failing ranks' wait falsely.
            return;
        }
        let store = r.store.clone();
        let read_by = deadline.min(Instant::now() + SIGNALLER_READ_LIMIT);
        let requester = within(self, read_by, "oxccl-dump-requester", move || {
            store
                .get(DUMP_REQUEST_KEY, every)
                .ok()
                .and_then(|v| dump_signal_rank(&v))
        })
        .flatten();
        if let Some(from) = requester {
            log::error!("oxccl: the dump request came from rank {from}");
        }
        note.cause = DumpCause::Signal(requester);
        // Before the report: the last one ends the failing ranks' wait, and their end may take
        // this process with it (a launcher ending every worker once one fails).
        self.rewrite(&mut first, reason, &note, limit);
        self.report(&mut note, deadline);
        self.rewrite(&mut first, reason, &note, limit);
    }
}

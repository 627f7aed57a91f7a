//! The watchdog's thread: each pass drains the groups' hand-off rings and records their
//! works and the communicators' rings' new works in their flight recorders in issue order,
//! looks through every ring (a few event queries each), looks at every work of its own in
//! flight, hands finished works back to their groups, applies a failed group's plan, and then
//! sleeps until the nearest deadline, the period or a wake (see `crate::watchdog`).

use super::desync::counts_in_desync;
use super::dumps::Dumps;
use super::ending;
use super::group_watch::{GroupWatch, Watched, WatchedRing};
use super::lock::lock;
use crate::recorder::now_ns;
use crate::recorder::target::DumpTarget;
use oxccl_rules::watchdog::{failure_plan, next_sleep_ms, stream_hints, FailureKind, Hint};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

/// A group's identity for one pass (its watch's address: alive while its works are).
fn group_key(g: &GroupWatch) -> usize {
    g as *const GroupWatch as usize
}

/// How often the watchdog looks at works in flight when no deadline is nearer.
const PERIOD_MS: u64 = 100;

/// Works queued after which the watchdog is woken before its period ends, so finished works
/// give their events back to the stream's pool soon (a busy rank would otherwise create an
/// event per work).
const WAKE_EVERY: usize = 64;

/// What ends a process the watchdog decided to take down (replaceable in tests).
type EndProcess = fn(&str);

fn abort_process(reason: &str) {
    log::error!("oxccl watchdog: ending the process: {reason}");
    eprintln!("oxccl watchdog: ending the process: {reason}");
    std::process::abort();
}

/// The process's watchdog.
pub struct Watchdog {
    /// The groups whose works it watches: their hand-off rings, drained by each pass.
    groups: Mutex<Vec<Weak<GroupWatch>>>,
    /// The communicators' rings of works (each pass looks through them); a ring nobody else
    /// holds is let go once it holds nothing to look at.
    rings: Mutex<Vec<Arc<dyn WatchedRing>>>,
    /// The thread to unpark (the running watchdog's).
    thread_id: Mutex<Option<Thread>>,
    stop: AtomicBool,
    /// Whether a thread is running (restarted by the next work after a stop).
    running: AtomicBool,
    /// Nanoseconds (process clock) of the last pass (shared with [`Dumps`], which keeps it
    /// beating while a dump waits).
    heartbeat: Arc<AtomicU64>,
    /// Passes made (tests wait on it).
    passes: AtomicU64,
    /// Works the last pass kept watching.
    in_flight: AtomicUsize,
    thread: Mutex<Option<JoinHandle<()>>>,
    end_process: Mutex<EndProcess>,
    /// Where dumps go, and what a failure did of them.
    dumps: Arc<Dumps>,
}

impl Watchdog {
    /// The process's watchdog, its thread started on first use (and again after a stop).
    pub fn global() -> &'static Arc<Watchdog> {
        let dog = Watchdog::instance();
        dog.ensure_running(dog);
        dog
    }

    /// The process's watchdog as it is: its thread is not started by asking (the heartbeat
    /// monitor watches it without reviving a stopped one).
    pub fn instance() -> &'static Arc<Watchdog> {
        static GLOBAL: OnceLock<Arc<Watchdog>> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let heartbeat = Arc::new(AtomicU64::new(now_ns()));
            Arc::new(Watchdog {
                groups: Mutex::new(Vec::new()),
                rings: Mutex::new(Vec::new()),
                thread_id: Mutex::new(None),
                stop: AtomicBool::new(false),
                running: AtomicBool::new(false),
                dumps: Arc::new(Dumps::new(heartbeat.clone())),
                heartbeat,
                passes: AtomicU64::new(0),
                in_flight: AtomicUsize::new(0),
                thread: Mutex::new(None),
                end_process: Mutex::new(abort_process),
            })
        })
    }

    /// Starts the thread unless it runs (after a [`Watchdog::stop`], the next use restarts it).
    fn ensure_running(&self, me: &Arc<Watchdog>) {
        if self.running.load(Ordering::Acquire)
            || self
                .running
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        self.stop.store(false, Ordering::Release);
        let me = me.clone();
        match std::thread::Builder::new()
            .name("oxccl-watchdog".into())
            .spawn(move || me.run())
        {
            Ok(h) => {
                *lock(&self.thread_id) = Some(h.thread().clone());
                *lock(&self.thread) = Some(h);
            }
            Err(e) => {
                self.running.store(false, Ordering::Release);
                log::error!("oxccl: cannot start the watchdog thread: {e}");
            }
        }
    }

    /// Wakes the watchdog for a pass now (an unpark: a futex wake only when it sleeps).
    fn wake(&self) {
        if let Some(t) = &*lock(&self.thread_id) {
            t.unpark();
        }
    }

    /// Queues a work of `group` to watch: a slot of the group's hand-off ring; every
    /// [`WAKE_EVERY`] works the watchdog is woken early (see `crate::watchdog`).
    pub(crate) fn watch(&self, group: &Arc<GroupWatch>, w: Arc<dyn Watched>) {
        if !group.enrolled.load(Ordering::Acquire) {
            self.enroll(group);
        }
        match group.inbox.push(w) {
            Some(pos) if pos % WAKE_EVERY != WAKE_EVERY - 1 => {}
            // Every WAKE_EVERY-th slot, and whenever the ring was full.
            _ => self.wake(),
        }
    }

    /// Makes the watchdog look through `ring` from its next pass on (once per ring), its
    /// group enrolled too (a failure of its works is then the watchdog's to settle).
    pub(crate) fn enroll_ring(&self, ring: Arc<dyn WatchedRing>) {
        let group = ring.watch_arc();
        if !group.enrolled.load(Ordering::Acquire) {
            self.enroll(&group);
        }
        lock(&self.rings).push(ring);
    }

    /// A ring's work was placed at `place` (from 1): every [`WAKE_EVERY`] places the watchdog
    /// is woken early, as for the works queued to it, and started again if it was stopped
    /// (the other places touch nothing of it).
    #[inline]
    pub(crate) fn ring_pushed(place: u64) {
        if place.is_multiple_of(WAKE_EVERY as u64) {
            Watchdog::global().wake();
        }
    }

    /// Makes the watchdog drain `group`'s ring from its next pass on (once per group).
    fn enroll(&self, group: &Arc<GroupWatch>) {
        let mut groups = lock(&self.groups);
        if !group.enrolled.swap(true, Ordering::AcqRel) {
            groups.push(Arc::downgrade(group));
        }
    }

    /// Moves every enrolled group's queued works into `out`, a run per group in its issue
    /// order (`ends`: where each run ends), and forgets the groups that are gone.
    fn drain_into(&self, out: &mut Vec<Arc<dyn Watched>>, ends: &mut Vec<usize>) {
        ends.clear();
        lock(&self.groups).retain(|g| match g.upgrade() {
            Some(g) => {
                g.inbox.drain_into(out);
                ends.push(out.len());
                true
            }
            None => false,
        });
    }

    /// Works in flight (as of the last pass; works queued since are not counted).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Passes made so far.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Wakes the watchdog and waits (up to `limit`) until it has made a whole pass begun
    /// after this call: every work queued before it has then been recorded in its flight
    /// recorder and looked at once. `false` when the limit ran out first.
    pub fn flush(self: &Arc<Self>, limit: Duration) -> bool {
        self.ensure_running(self);
        let target = self.passes() + 2;
        let began = std::time::Instant::now();
        let mut looks = 0u32;
        while self.passes() < target {
            if began.elapsed() >= limit {
                return false;
            }
            self.wake();
            // Quick looks first; a pass that takes long (a dump, the wait for every rank's
            // dump) is then waited for gently.
            looks = looks.saturating_add(1);
            let pause = if looks < 50 { 200 } else { 5_000 };
            std::thread::sleep(Duration::from_micros(pause));
        }
        true
    }

    /// Waits (up to `limit`) until the watchdog has made a whole pass begun after this call,
    /// or `done` says it need not; at once where no watchdog thread runs, or on its thread.
    pub(super) fn await_pass(&self, limit: Duration, done: impl Fn() -> bool) {
        let on_watchdog = lock(&self.thread_id)
            .as_ref()
            .is_some_and(|t| t.id() == std::thread::current().id());
        if on_watchdog || !self.running.load(Ordering::Acquire) {
            return;
        }
        let target = self.passes() + 2;
        let began = std::time::Instant::now();
        while self.passes() < target && !done() && began.elapsed() < limit {
            self.wake();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// When the watchdog last made a pass (process clock, ns).
    pub fn heartbeat_ns(&self) -> u64 {
        self.heartbeat.load(Ordering::Relaxed)
    }

    /// Adds where a default group's dumps go; a target with a signal store starts the
    /// coordination check (see `coord`).
    pub(crate) fn add_dump_target(&self, target: DumpTarget) {
        let coordinated = target.signal.is_some();
        self.dumps.add(target);
        if coordinated {
            ending::install_exit_guard(&self.dumps, |limit, done| {
                Watchdog::instance().await_pass(limit, done)
            });
            self.dumps.start_coordination();
        }
    }

    /// Whether any group of this process dumps its flight recorder (has a dump directory).
    pub fn has_dump_targets(&self) -> bool {
        self.dumps.any()
    }

    /// Where the process's dumps go, and what a failure did of them.
    pub(super) fn dumps(&self) -> &Dumps {
        &self.dumps
    }

    /// Replaces what ends the process (tests observe the decision instead of dying).
    #[doc(hidden)]
    pub fn set_end_process(&self, f: fn(&str)) {
        *lock(&self.end_process) = f;
    }

    /// Writes every registered dump (nothing when no group has a dump directory).
    pub fn dump(&self, reason: &str) {
        self.dumps.write_requested(reason);
    }

    /// Ends the process for `reason` (what [`Watchdog::set_end_process`] set, an abort by
    /// default).
    pub(super) fn end_process(&self, reason: &str) {
        let end = *lock(&self.end_process);
        end(reason);
    }

    /// Called by a thread that is about to return `e`, a failure of one of `group`'s works,
    /// to the program: when the watchdog will dump for it and then end the process (the
    /// group's plan), waits until it has, so that the program cannot end the process (and the
    /// store it may host) first, before the signal, the dumps and the wait for every rank's
    /// dump are done; the process ends during this call. Bounded by the dump wait and what may
    /// follow its deadline; nothing to wait for in a process without a dump directory. Under a
    /// mode that keeps the process, the error returns at once (the program handles it), and an
    /// exit the program makes meanwhile waits for the watchdog instead (see `ending`'s exit
    /// guard).
    pub(crate) fn settle_failure(self: &Arc<Self>, group: &GroupWatch, e: &oxccl_core::Error) {
        let plan = failure_plan(group.mode, FailureKind::of(e), group.dump_on_timeout);
        let ends = plan.dump && plan.end_process;
        if ends && group.enrolled.load(Ordering::Acquire) && self.has_dump_targets() {
            let limit = group
                .wait_timeout_dump
                .saturating_add(ending::PAST_DEADLINE);
            self.flush(limit);
        }
    }

    /// Stops the thread (works still queued are dropped unwatched), waiting at most `limit`.
    /// The rings it watched are let go: each one's next work enrolls it again, which starts
    /// the thread again.
    pub fn stop(&self, limit: Duration) {
        self.stop.store(true, Ordering::Release);
        self.running.store(false, Ordering::Release);
        self.wake();
        let handle = lock(&self.thread).take();
        if let Some(h) = handle {
            let began = std::time::Instant::now();
            while !h.is_finished() && began.elapsed() < limit {
                std::thread::sleep(Duration::from_millis(1));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
        // Not while a pass stuck in a driver call holds the list: stopping never waits for it.
        if let Ok(mut rings) = self.rings.try_lock() {
            for ring in rings.drain(..) {
                ring.unenroll();
            }
        }
    }

    fn run(&self) {
        // Kept across passes: no allocation per pass once grown.
        let mut fresh: Vec<Arc<dyn Watched>> = Vec::new();
        // Where each group's run in `fresh` ends, the works' issue times, the merged order.
        let (mut ends, mut times, mut order) = (Vec::new(), Vec::new(), Vec::new());
        let mut taken: Vec<Option<Arc<dyn Watched>>> = Vec::new();
        // The ring of each ring work's time in `times` (after the queued works').
        let mut ring_at: Vec<usize> = Vec::new();
        // Each work with its recorder entry's id.
        let mut works: Vec<(Arc<dyn Watched>, Option<u64>)> = Vec::new();
        let mut looked: Vec<(Arc<dyn Watched>, Option<u64>)> = Vec::new();
        let mut done: Vec<Arc<dyn Watched>> = Vec::new();
        // Each work's hint and group (by its place in `works`), the places `stream_hints`
        // needs, and the groups whose oldest running work turned out ended or failed.
        let (mut hints, mut keys, mut scratch, mut open): (
            Vec<Option<Hint>>,
            Vec<usize>,
            Vec<usize>,
            Vec<usize>,
        ) = Default::default();
        let mut publish: Vec<Arc<GroupWatch>> = Vec::new();
        while !self.stop.load(Ordering::Acquire) {
            let now = now_ns();
            self.heartbeat.store(now, Ordering::Relaxed);
            self.drain_into(&mut fresh, &mut ends);
            // Flight-recorder entries are numbered in the order they are recorded here: the
            // groups' runs merged by issue time, each run kept in its own (issue) order. (A
            // work queued while this pass drains the groups may be taken by the next pass
            // while a later one of another group is taken by this one: across groups the
            // numbering is issue order to within a pass.)
            times.clear();
            times.extend(fresh.iter().map(|w| w.created_ns()));
            // The rings' works not yet recorded, a run per ring after the queued works' runs.
            let mut rings = lock(&self.rings);
            ring_at.clear();
            for (k, ring) in rings.iter().enumerate() {
                ring.unrecorded(&mut times);
                ring_at.resize(times.len() - fresh.len(), k);
                ends.push(times.len());
            }
            issue_order(&times, &ends, &mut order);
            let queued = fresh.len();
            taken.clear();
            taken.extend(fresh.drain(..).map(Some));
            for &i in &order {
                let Some(w) = taken.get_mut(i).and_then(Option::take) else {
                    if let Some(&k) = ring_at.get(i.wrapping_sub(queued)) {
                        rings[k].record_next();
                    }
                    continue;
                };
                let trace = w.record_trace();
                if let Some(d) = &w.watch().desync {
                    let info = w.info();
                    if counts_in_desync(&info) {
                        d.note(info.seq, false);
                    }
                }
                works.push((w, trace));
            }
            // Each ring's look; the works it hands out are looked at alone below, this pass.
            let mut earliest: Option<u64> = None;
            let mut in_rings = 0;
            for ring in rings.iter() {
                let (held, due) = ring.pass(now, &mut works);
                in_rings += held;
                if let Some(d) = due {
                    earliest = Some(earliest.map_or(d, |e| e.min(d)));
                }
                if ring.watch().desync.is_some() {
                    publish_once(&mut publish, ring.watch(), || ring.watch_arc());
                }
            }
            // A ring only this thread holds (its communicator and its works' handles are
            // gone) is let go once it holds nothing.
            rings.retain(|r| Arc::strong_count(r) > 1 || !r.idle());
            drop(rings);
            // A few event queries per group (its works end in order), not one per work.
            hints.clear();
            hints.resize(works.len(), None);
            scratch.resize(works.len(), 0);
            keys.clear();
            keys.extend(works.iter().map(|(w, _)| group_key(w.watch())));
            stream_hints(
                |i| keys[i],
                |i| works[i].0.has_end(),
                |i| works[i].0.probe_done() == Some(true),
                &mut hints,
                &mut scratch,
            );
            // Each work moves to `looked` (still running) or `done`: moved, never cloned, so
            // this thread never writes the works' reference counts.
            std::mem::swap(&mut works, &mut looked);
            open.clear();
            for (i, (w, trace)) in looked.drain(..).enumerate() {
                let g = keys[i];
                let hint = match hints.get(i).copied().flatten() {
                    // The work before it was expected to run on but ended or failed meanwhile:
                    // this one is looked at in full too (a failure reaches every queued work
                    // of the group in one pass, as the communicator's error is theirs too).
                    Some(Hint::Pending) if open.contains(&g) => Hint::Unknown,
                    h => h.unwrap_or(Hint::Unknown),
                };
                let r = w.poll(now, hint, trace);
                if hint == Hint::Unknown && w.has_end() {
                    match r {
                        Ok(false) => open.retain(|k| *k != g),
                        _ if !open.contains(&g) => open.push(g),
                        _ => {}
                    }
                }
                if w.watch().desync.is_some() {
                    if matches!(r, Ok(true)) && counts_in_desync(&w.info()) {
                        if let Some(d) = &w.watch().desync {
                            d.note(w.info().seq, true);
                        }
                    }
                    publish_once(&mut publish, w.watch(), || w.watch_arc());
                }
                match r {
                    Ok(true) => done.push(w),
                    Ok(false) => {
                        let d = w.deadline_ns();
                        earliest = Some(earliest.map_or(d, |e| e.min(d)));
                        works.push((w, trace));
                    }
                    Err(e) => {
                        self.on_failure(&*w, &e);
                        done.push(w);
                    }
                }
            }
            // Back to their groups, one hand-over per run of a group's works.
            while let Some(first) = done.first() {
                let g: *const GroupWatch = first.watch();
                let n = done
                    .iter()
                    .take_while(|w| std::ptr::eq(w.watch(), g))
                    .count();
                let watch = first.watch_arc();
                watch.bury(done.drain(..n));
            }
            for g in publish.drain(..) {
                if let Some(d) = &g.desync {
                    d.publish(&*g.store);
                }
            }
            self.in_flight
                .store(works.len() + in_rings, Ordering::Relaxed);
            self.dumps.serve_requests();
            self.passes.fetch_add(1, Ordering::Relaxed);
            let sleep = next_sleep_ms(PERIOD_MS, now_ns(), earliest);
            // Even with works queued: the next wake (every WAKE_EVERY works, and every push
            // that overflows a ring) ends the sleep, and one that came during this pass ends
            // it at once, so nothing waits longer than the period. Without the sleep a tight
            // issuing loop kept the watchdog passing without pause, each pass querying events
            // beside the issuing threads' driver calls and reading the rings' counters they
            // write.
            if !self.stop.load(Ordering::Acquire) {
                std::thread::park_timeout(Duration::from_millis(sleep));
            }
        }
    }

    fn on_failure(&self, w: &dyn Watched, e: &oxccl_core::Error) {
        let g = w.watch();
        let kind = FailureKind::of(e);
        let plan = failure_plan(g.mode, kind, g.dump_on_timeout);
        // The verdict the work's own timeout error already carries (computed once per
        // collective), first in the reason; the whole report after it, and in the log.
        let info = w.info();
        let verdict = (kind == FailureKind::Timeout)
            .then(|| g.verdict(info.seq, info.kind))
            .flatten();
        let mut reason = g.failure_reason(e, verdict.as_ref());
        if verdict.is_some() {
            if let Some(report) = g.desync.as_ref().and_then(|d| lock(&d.report).clone()) {
                log::error!("oxccl watchdog: {report}");
                reason.push_str("; ");
                reason.push_str(&report);
            }
        }
        if plan.abort || plan.dump || plan.end_process {
            log::error!("oxccl watchdog: {reason}");
        }
        if plan.dump {
            // With dump on timeout, every rank's coordination check sees the signal and dumps
            // too, and this process waits for their dumps before the mode is applied.
            let signal = g.dump_on_timeout.then_some(&g.store);
            self.dumps
                .dump_for_failure(&reason, g.global_rank, signal, g.wait_timeout_dump);
        }
        if plan.abort {
            w.abort_comm(&reason);
        }
        if plan.end_process {
            self.end_process(&reason);
        }
    }
}

/// Adds `group` (shared by `arc`) to the groups whose desync progress this pass publishes,
/// once.
fn publish_once(
    publish: &mut Vec<Arc<GroupWatch>>,
    group: &GroupWatch,
    arc: impl FnOnce() -> Arc<GroupWatch>,
) {
    if !publish.iter().any(|p| std::ptr::eq(&**p, group)) {
        publish.push(arc());
    }
}

/// The order in which to take works drained as runs (`ends`: where each run ends in `times`,
/// the works' issue times): the runs merged by issue time, the earliest head first, each run
/// in its own order (a group's order is its issue order, whatever its clock reads say).
fn issue_order(times: &[u64], ends: &[usize], order: &mut Vec<usize>) {
    order.clear();
    // The next index of each run, and where it ends.
    let mut heads: Vec<(usize, usize)> = Vec::with_capacity(ends.len());
    let mut start = 0;
    for &end in ends {
        if end > start {
            heads.push((start, end));
        }
        start = end;
    }
    while let Some(k) = (0..heads.len()).min_by_key(|&k| (times[heads[k].0], k)) {
        let (next, end) = heads[k];
        order.push(next);
        if next + 1 < end {
            heads[k].0 = next + 1;
        } else {
            heads.swap_remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::issue_order;

    #[test]
    fn runs_merge_by_issue_time_and_keep_their_own_order() {
        let mut order = Vec::new();
        // Run a: 10, 30, 20 (its own order wins over its clock); run b: 15, 25.
        issue_order(&[10, 30, 20, 15, 25], &[3, 5], &mut order);
        assert_eq!(order, vec![0, 3, 4, 1, 2]);
        // Empty runs and ties (the earlier run first).
        issue_order(&[5, 5, 7], &[0, 1, 1, 3], &mut order);
        assert_eq!(order, vec![0, 1, 2]);
        issue_order(&[], &[0, 0], &mut order);
        assert!(order.is_empty());
    }
}

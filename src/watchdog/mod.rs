//! The watchdog: one thread per process that polls every work in flight, applies the group's
//! error-handling mode when one fails or times out (the decision is the core's
//! `failure_plan`), feeds completion hooks and the flight recorder, and beats a heartbeat a
//! monitor thread checks. The hot path only queues a work (a lock and a push).

mod dumps;
mod heartbeat;

pub(crate) use dumps::DumpTarget;

use crate::pg::recorder::now_ns;
use crate::pg::watch::GroupWatch;
use oxccl_core::watchdog::{failure_plan, next_sleep_ms, FailureKind};
use oxccl_core::Result;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

pub use heartbeat::HeartbeatMonitor;

/// A work as the watchdog sees it.
pub(crate) trait Watched: Send + Sync {
    /// Records the work's flight-recorder entry if still pending (issue order is queue order).
    fn record_trace(&self);
    /// One look: completed, still running, or its first error (timeouts against the group's
    /// limit). The first completion seen feeds hooks and the recorder.
    fn poll(&self, now_ns: u64) -> Result<bool>;
    /// When its group's timeout runs out.
    fn deadline_ns(&self) -> u64;
    /// Its group's configuration.
    fn watch(&self) -> &GroupWatch;
    /// Aborts its communicator.
    fn abort_comm(&self, reason: &str);
}

/// How often the watchdog looks at works in flight when no deadline is nearer.
const PERIOD_MS: u64 = 100;

/// Works in flight after which the watchdog is woken before its period ends.
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
    queue: Mutex<Vec<Arc<dyn Watched>>>,
    cv: Condvar,
    stop: AtomicBool,
    /// Whether a thread is running (restarted by the next work after a stop).
    running: AtomicBool,
    /// Nanoseconds (process clock) of the last pass.
    heartbeat: AtomicU64,
    /// Passes made (tests wait on it).
    passes: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
    end_process: Mutex<EndProcess>,
    /// Where dumps go (a target per default group with a dump directory).
    dumps: Mutex<Vec<DumpTarget>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
            Arc::new(Watchdog {
                queue: Mutex::new(Vec::new()),
                cv: Condvar::new(),
                stop: AtomicBool::new(false),
                running: AtomicBool::new(false),
                heartbeat: AtomicU64::new(now_ns()),
                passes: AtomicU64::new(0),
                thread: Mutex::new(None),
                end_process: Mutex::new(abort_process),
                dumps: Mutex::new(Vec::new()),
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
            Ok(h) => *lock(&self.thread) = Some(h),
            Err(e) => {
                self.running.store(false, Ordering::Release);
                log::error!("oxccl: cannot start the watchdog thread: {e}");
            }
        }
    }

    /// Queues a work to watch. Every [`WAKE_EVERY`] works in flight the watchdog is woken
    /// early, so works that finished give their events back to the stream's pool instead of
    /// waiting for the next period (a busy rank would otherwise create an event per work).
    pub(crate) fn watch(&self, w: Arc<dyn Watched>) {
        let mut q = lock(&self.queue);
        q.push(w);
        let n = q.len();
        drop(q);
        if n % WAKE_EVERY == 0 {
            self.cv.notify_one();
        }
    }

    /// Works in flight.
    pub fn in_flight(&self) -> usize {
        lock(&self.queue).len()
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
        while self.passes() < target {
            if began.elapsed() >= limit {
                return false;
            }
            self.cv.notify_all();
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// When the watchdog last made a pass (process clock, ns).
    pub fn heartbeat_ns(&self) -> u64 {
        self.heartbeat.load(Ordering::Relaxed)
    }

    /// Adds where a default group's dumps go.
    pub(crate) fn add_dump_target(&self, target: DumpTarget) {
        lock(&self.dumps).push(target);
    }

    /// Replaces what ends the process (tests observe the decision instead of dying).
    #[doc(hidden)]
    pub fn set_end_process(&self, f: fn(&str)) {
        *lock(&self.end_process) = f;
    }

    /// Writes every registered dump (nothing when no group has a dump directory).
    pub fn dump(&self, reason: &str) {
        for t in lock(&self.dumps).iter() {
            t.write(reason, false);
        }
    }

    /// Serves dump requests (a `dump_request` file touched in a dump directory).
    fn serve_requests(&self) {
        for t in lock(&self.dumps).iter() {
            if t.trigger.requested() {
                t.write("requested", false);
            }
        }
    }

    /// Stops the thread (works still queued are dropped unwatched), waiting at most `limit`.
    pub fn stop(&self, limit: Duration) {
        self.stop.store(true, Ordering::Release);
        self.running.store(false, Ordering::Release);
        self.cv.notify_all();
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
    }

    fn run(&self) {
        while !self.stop.load(Ordering::Acquire) {
            let now = now_ns();
            self.heartbeat.store(now, Ordering::Relaxed);
            let works = std::mem::take(&mut *lock(&self.queue));
            let mut keep = Vec::with_capacity(works.len());
            let mut earliest: Option<u64> = None;
            for w in &works {
                w.record_trace();
            }
            for w in works {
                match w.poll(now) {
                    Ok(true) => {}
                    Ok(false) => {
                        let d = w.deadline_ns();
                        earliest = Some(earliest.map_or(d, |e| e.min(d)));
                        keep.push(w);
                    }
                    Err(e) => self.on_failure(&*w, &e),
                }
            }
            lock(&self.queue).extend(keep);
            self.serve_requests();
            self.passes.fetch_add(1, Ordering::Relaxed);
            let sleep = next_sleep_ms(PERIOD_MS, now_ns(), earliest);
            let q = lock(&self.queue);
            if !self.stop.load(Ordering::Acquire) {
                let _ = self
                    .cv
                    .wait_timeout(q, Duration::from_millis(sleep))
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    fn on_failure(&self, w: &dyn Watched, e: &oxccl_core::Error) {
        let g = w.watch();
        let plan = failure_plan(g.mode, FailureKind::of(e), g.dump_on_timeout);
        let reason = format!(
            "process group {} ({}) rank {}: {e}",
            g.uid, g.desc, g.global_rank
        );
        if plan.abort || plan.dump || plan.end_process {
            log::error!("oxccl watchdog: {reason}");
        }
        if plan.dump {
            self.dump(&reason);
        }
        if plan.abort {
            w.abort_comm(&reason);
        }
        if plan.end_process {
            let end = *lock(&self.end_process);
            end(&reason);
        }
    }
}

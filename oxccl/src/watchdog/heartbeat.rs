//! The heartbeat monitor: a second thread that notices a watchdog stuck for longer than its
//! limit (blocked inside the library, say), dumps what it can and ends the process, as c10d's
//! monitoring thread does. The decision is the core's `heartbeat_stuck`.

use super::thread::Watchdog;
use crate::recorder::now_ns;
use crate::recorder::{DumpCause, DumpNote};
use oxccl_rules::watchdog::heartbeat_stuck;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The running monitor (one per process).
pub struct HeartbeatMonitor {
    stop: AtomicBool,
}

impl HeartbeatMonitor {
    /// Starts the process's monitor once, watching [`Watchdog::global`] with `limit`; later
    /// calls return the running one.
    pub fn start(limit: Duration) -> &'static Arc<HeartbeatMonitor> {
        static GLOBAL: OnceLock<Arc<HeartbeatMonitor>> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let m = Arc::new(HeartbeatMonitor {
                stop: AtomicBool::new(false),
            });
            let me = m.clone();
            let limit_ms = limit.as_millis().min(u128::from(u64::MAX)) as u64;
            // Look a few times per limit, never more often than every 100 ms.
            let every = Duration::from_millis((limit_ms / 4).clamp(100, 60_000));
            let spawned = std::thread::Builder::new()
                .name("oxccl-heartbeat".into())
                .spawn(move || {
                    let dog = Watchdog::instance();
                    while !me.stop.load(Ordering::Acquire) {
                        std::thread::sleep(every);
                        if heartbeat_stuck(dog.heartbeat_ns(), now_ns(), limit_ms) {
                            let reason = format!(
                                "the watchdog made no pass for over {limit_ms} ms (stuck inside a library call?)"
                            );
                            let mut note = DumpNote::new(DumpCause::Heartbeat);
                            let dumps = dog.dumps();
                            let deadline = crate::deadline::deadline_after(dumps.wait_limit());
                            dumps.dump_and_report(&reason, &mut note, deadline);
                            dog.end_process(&reason);
                            return;
                        }
                    }
                });
            if let Err(e) = spawned {
                log::error!("oxccl: cannot start the heartbeat monitor: {e}");
            }
            m
        })
    }

    /// Stops watching (the thread ends at its next look).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

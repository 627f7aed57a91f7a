//! The flight recorder the process group fills: one ring per process by default (c10d's), or
//! one of the caller's (tests, tools), shared by a default group and its subgroups.

use oxccl_rules::recorder::{FlightRecorder, PgConfig, TraceRecord, TraceState};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

/// A shared flight recorder.
#[derive(Clone, Debug)]
pub struct Recorder {
    ring: Arc<Mutex<FlightRecorder>>,
    /// Fixed at creation: the hot path asks without the lock.
    enabled: bool,
}

impl Recorder {
    /// A recorder of `capacity` entries (0: records nothing).
    pub fn new(capacity: usize) -> Recorder {
        Recorder {
            ring: Arc::new(Mutex::new(FlightRecorder::new(capacity))),
            enabled: capacity > 0,
        }
    }

    /// The process's recorder, sized by `OXCCL_TRACE_BUFFER_SIZE` (or PyTorch's
    /// `TORCH_NCCL_TRACE_BUFFER_SIZE`) when first used.
    pub fn global() -> Recorder {
        static GLOBAL: OnceLock<Recorder> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                // A refused value is the process group's error, not the recorder's.
                let settings = crate::env_vars::EnvVars::from_process().settings();
                let capacity = settings
                    .value(oxccl_rules::env::TRACE_BUFFER_SIZE)
                    .and_then(|v| {
                        oxccl_rules::env::parse_u64(
                            oxccl_rules::env::TRACE_BUFFER_SIZE,
                            v,
                            0,
                            oxccl_rules::env::MAX_TRACE_BUFFER,
                        )
                        .ok()
                    })
                    .unwrap_or(DEFAULT_CAPACITY as u64);
                Recorder::new(capacity as usize)
            })
            .clone()
    }

    /// The ring, locked.
    pub fn lock(&self) -> MutexGuard<'_, FlightRecorder> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether it records at all (checked before building a record).
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub(crate) fn add_pg(&self, pg: PgConfig) {
        self.lock().add_pg(pg);
    }

    pub(crate) fn record(&self, record: TraceRecord) -> Option<u64> {
        self.lock().record(record)
    }

    /// Records what `fill` writes (see [`FlightRecorder::record_with`]).
    pub(crate) fn record_with(&self, fill: impl FnOnce(&mut TraceRecord)) -> Option<u64> {
        self.lock().record_with(fill)
    }

    pub(crate) fn update(&self, id: Option<u64>, state: TraceState, now_ns: u64) {
        if let Some(id) = id {
            self.lock().update_state(id, state, now_ns);
        }
    }

    /// Marks entry `id` completed at `now_ns`, with its duration when known, and retires it
    /// (one lock: the watchdog's call per completed work).
    pub(crate) fn complete(&self, id: Option<u64>, now_ns: u64, duration_ns: Option<u64>) {
        if let Some(id) = id {
            let mut r = self.lock();
            r.update_state(id, TraceState::Completed, now_ns);
            if let Some(ns) = duration_ns {
                r.set_duration(id, ns);
            }
            r.retire(id);
        }
    }

    pub(crate) fn finish(&self, id: Option<u64>, duration_ns: Option<u64>) {
        if let Some(id) = id {
            let mut r = self.lock();
            if let Some(ns) = duration_ns {
                r.set_duration(id, ns);
            }
            r.retire(id);
        }
    }
}

/// Entries kept when `OXCCL_TRACE_BUFFER_SIZE` is unset (as recent PyTorch; the core's
/// `EnvConfig` default).
pub const DEFAULT_CAPACITY: usize = 2000;

/// Nanoseconds of the process's monotonic clock (from its first use).
#[inline]
pub fn now_ns() -> u64 {
    ns_since(clock_zero())
}

/// The zero of [`now_ns`]: the monotonic clock's reading at the process's first use of it.
pub fn clock_zero() -> u64 {
    static EPOCH: OnceLock<u64> = OnceLock::new();
    *EPOCH.get_or_init(monotonic_ns)
}

/// [`now_ns`] from a copy of [`clock_zero`] (a reading that touches no static).
#[inline]
pub fn ns_since(zero: u64) -> u64 {
    monotonic_ns().saturating_sub(zero)
}

/// The monotonic clock (`CLOCK_MONOTONIC`, which `std::time::Instant` reads too) in
/// nanoseconds, read directly: an operation reads it once, and `Instant`'s checked
/// arithmetic would cost it more than the reading.
#[inline]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec; CLOCK_MONOTONIC exists on every Linux, so
    // the call cannot fail (were it to, `ts` stays zero and the reading saturates to 0).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

//! The watchdog: one thread per process that polls every work in flight, applies the group's
//! error-handling mode when one fails or times out (the decision is the core's
//! `failure_plan`), feeds completion hooks and the flight recorder, publishes desync-debug
//! progress, and beats a heartbeat a monitor thread checks.
//!
//! The hot path only queues a work: a few atomic operations on a preallocated slot of its
//! group's lock-free ring (`queue`), and every 64 works an unpark of the watchdog (a futex
//! wake only when it sleeps). Between those wakes the watchdog sleeps even with works queued,
//! so a tight issuing loop wakes it about once per 64 works rather than keeping it passing
//! without pause. Each group has a ring of its own, which the watchdog drains:
//! ranks issuing from threads of one process (a thread per GPU) each write their own ring's
//! counters, so their cores never pass one shared tail back and forth at every operation
//! (docs/BENCHMARKS.md#watchdog-and-flight-recorder has its cost). A pass reads
//! works and never writes into one while all goes well (see `pg::work`). A pass queries one
//! end event per group when the group's newest work has completed: a group's works run in
//! issue order on its one stream, so the newest one done means all are done, and the first one
//! still running means the later ones are too. That keeps the watchdog's driver calls (which
//! contend with the issuing thread's) to about one per group per pass instead of one per work.
//! Works the watchdog is done with go back to their group and are dropped by the next issue
//! there (`GroupWatch::bury`), on the core that made them.

mod coord;
pub(crate) mod desync;
mod dumps;
mod ending;
pub(crate) mod group_watch;
mod heartbeat;
mod lock;
mod queue;
mod thread;

pub use group_watch::{CompletedWork, CompletionHook};
pub use heartbeat::HeartbeatMonitor;
pub use thread::Watchdog;

pub(crate) use group_watch::Watched;
pub(crate) use oxccl_core::watchdog::Hint;

//! The watchdog: one thread per process that looks at every work in flight, applies the
//! group's error-handling mode when one fails or times out (the decision is the core's
//! `failure_plan`), feeds completion hooks and the flight recorder, publishes desync-debug
//! progress, and beats a heartbeat a monitor thread checks.
//!
//! Most works are slots of their communicator's ring (`pg::work::ring`): issuing one writes a
//! slot and publishes its place, and every 64 places unparks the watchdog (a futex wake only
//! when it sleeps). Between those wakes the watchdog sleeps even with works queued, so a tight
//! issuing loop wakes it about once per 64 works. A pass records the new slots' flight-recorder
//! entries (merged by issue time across groups), queries the newest end event of each ring (a
//! communicator's works run in issue order on its one stream, so the newest one done means all
//! are done, and the first one still running means the later ones are too) and marks what
//! completed; it writes nothing into a slot while all goes well, so the issuing thread's lines
//! stay its own. A work that failed or ran past its deadline leaves its ring as a work of its
//! own (`Watched`), looked at alone from then on, as are the works that carry their own
//! state from the start (timed works, whose durations and hooks need their events): those are
//! handed over through a lock-free ring per group (`queue`) and, once done, go back to their
//! group to be dropped by its next issue (`GroupWatch::bury`), on the core that made them.

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
pub(crate) use oxccl_rules::watchdog::Hint;

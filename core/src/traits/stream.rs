use crate::error::Result;

/// An ordered queue of work on a device (a CUDA stream; an executor thread for the mock).
/// Operations issued on one stream run in issue order.
pub trait Stream: Send + Sync {
    /// The event type this stream records.
    type Event: Event;

    /// Records an event after everything issued so far. With `timing`, the event carries a
    /// time stamp for [`Event::elapsed_ms`].
    fn record(&self, timing: bool) -> Result<Self::Event>;

    /// Makes later work on this stream wait until `event` has completed.
    fn wait_event(&self, event: &Self::Event) -> Result<()>;

    /// Blocks until everything issued so far has run.
    fn synchronize(&self) -> Result<()>;
}

/// A point in a stream's work.
pub trait Event: Send + Sync {
    /// Whether the work before the event has completed (never blocks).
    fn query(&self) -> Result<bool>;

    /// Blocks until the work before the event has completed.
    fn synchronize(&self) -> Result<()>;

    /// Milliseconds from `self` to `end`; both must have been recorded with timing.
    fn elapsed_ms(&self, end: &Self) -> Result<f32>;
}

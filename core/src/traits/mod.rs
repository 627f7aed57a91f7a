//! The seams between oxccl's layers: what a backend (NCCL as loaded, the mock world) provides.
//!
//! Small on purpose, in the manner of embedded-hal: the process group, the safe `Comm` and
//! the command-line tool are written once against these traits.

mod abort;
mod backend;
mod communicator;
mod graph;
mod stream;

pub use abort::{pending_aborts, AbortInFlight, CommAbort};
pub use backend::Backend;
pub use communicator::{Communicator, Progress, RegHandle, StreamPriority};
pub use graph::{forbidden, Capture, CaptureError, Graph};
pub use stream::{Event, Stream};

/// The communicator type of a backend.
pub type CommOf<B> = <B as Backend>::Comm;

/// The abort handle of a backend's communicators.
pub type AbortOf<B> = <CommOf<B> as Communicator>::Abort;

/// A device ordinal (a CUDA device for NCCL; a label for the mock world).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Device(pub u32);

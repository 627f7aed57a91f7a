//! The seams between oxccl's layers: what a backend (NCCL as loaded, the mock world) provides.
//!
//! Small on purpose, in the manner of embedded-hal: the process group, the safe `Comm` and
//! the command-line tool are written once against these traits.

mod abort;
mod backend;
mod communicator;
mod device;
mod graph;
mod progress;
mod stream;

pub use crate::error::CaptureError;
pub use abort::{pending_aborts, AbortInFlight, CommAbort};
pub use backend::{AbortOf, Backend, CommOf};
pub use communicator::{Communicator, MemStats, ShrinkMode, StreamPriority};
pub use device::Device;
pub use graph::{forbidden, Capture, Graph};
pub use progress::Progress;
pub use stream::{Event, Stream};

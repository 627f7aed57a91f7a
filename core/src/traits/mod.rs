//! The seams between oxccl's layers: what a backend (NCCL as loaded, the mock world) provides.
//!
//! Small on purpose, in the manner of embedded-hal: the process group, the safe `Comm` and
//! the command-line tool are written once against these traits. [`Communicator`] holds what
//! every backend does; what only some backends (or library releases) offer is a capability
//! trait of its own, implemented or not: [`Reshape`] (revoke, shrink, grow), [`Suspend`],
//! [`OneSided`](crate::OneSided), [`Windows`], [`PeerKernels`] and [`PerCallConfig`].

mod abort;
mod backend;
mod communicator;
mod device;
mod graph;
mod peer_kernels;
mod per_call_config;
mod progress;
mod reshape;
mod stream;
mod suspend;
mod windows;

pub use crate::error::CaptureError;
pub use abort::{pending_aborts, AbortInFlight, CommAbort};
pub use backend::{AbortOf, Backend, CommOf};
pub use communicator::{Communicator, StreamPriority};
pub use device::Device;
pub use graph::{forbidden, Capture, Graph};
pub use peer_kernels::PeerKernels;
pub use per_call_config::PerCallConfig;
pub use progress::Progress;
pub use reshape::{Reshape, ReshapeBackend, ShrinkMode};
pub use stream::{Event, Stream};
pub use suspend::{MemStats, Suspend};
pub use windows::Windows;

//! The rank side of a communicator spanning processes (see [`crate::procs`]): a rank
//! process's mirror joins its host and runs its streams' batches there over the transport
//! (`transport`), a nonblocking split's outcome waits on a task of its own, and
//! whether a communicator spans processes at all.

#[cfg(target_os = "linux")]
pub(crate) mod one_sided;
#[cfg(target_os = "linux")]
pub(crate) mod remote;
pub(crate) mod spans;
pub(crate) mod split_task;
#[cfg(not(target_os = "linux"))]
mod unsupported;
#[cfg(not(target_os = "linux"))]
pub(crate) use unsupported::{one_sided, remote};

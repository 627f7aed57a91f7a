//! The transport of the mock world across processes (see [`crate::procs`]): the id of a
//! communicator that spans processes, the messages and their bytes, the socket and
//! shared-memory channel they travel on, and a rank's link to its host. It knows nothing of
//! communicators: the rank side (`mirror`) and the host side ([`crate::procs`]) put it to
//! work.

#[cfg(target_os = "linux")]
pub(crate) mod chan;
pub(crate) mod child_spec;
#[cfg(target_os = "linux")]
pub(crate) mod fields;
#[cfg(target_os = "linux")]
pub(crate) mod link;
pub(crate) mod proc_id;
#[cfg(not(target_os = "linux"))]
pub(crate) mod unsupported;
#[cfg(not(target_os = "linux"))]
pub(crate) use unsupported::link;
#[cfg(target_os = "linux")]
pub(crate) mod wire;
#[cfg(target_os = "linux")]
pub(crate) mod wire_one_sided;

//! Bootstrap: where a rank learns its place in the job (`env://` as torchrun, Slurm, Open MPI
//! and MPICH set it up, `tcp://host:port`, `file:///path`) and the store it rendezvous through.
//!
//! The decisions (which launcher, which rank, conflicts between launchers) are pure functions
//! of the core ([`oxccl_rules::launch`]); this module reads the process environment once and
//! opens the store. On torchrun's agent store, which outlives restarted workers, the process
//! groups of one agent's launch are scoped by its restart count ([`restart_scope`]); the
//! store itself is left as PyTorch leaves it, so keys of a torch program of the launch meet.

mod bootstrap;
mod choose;
mod init;
mod spawn;

pub use crate::env_vars::EnvVars;
pub use bootstrap::{restart_scope, Bootstrap};
pub use choose::{decide, init_process_group, with_backend, Choice, WithBackend, WithProcessGroup};
pub use init::InitMethod;
pub use oxccl_rules::launch::{HostList, HostName, LaunchInfo, Launcher};
pub use spawn::{local_gpus, spawn};

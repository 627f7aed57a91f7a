//! c10d's process group, written once over the backend traits: `ProcessGroup<B>` runs on the
//! mock world in tests and on NCCL in production, and no backend type is named here.
//!
//! - [`ProcessGroup`]: rank, size, every collective and p2p, each returning a [`Work`];
//!   communicators made lazily on first use (the unique id travels through the store), or at
//!   once when a device is bound; timeouts per group, changeable at run time.
//! - [`Coalescing`]: operations issued as one batch with one work, by a guard or a closure.
//! - Subgroups: [`ProcessGroup::new_group`], [`ProcessGroup::new_subgroups`],
//!   [`ProcessGroup::new_subgroups_by_enumeration`], global ↔ group rank translation.

pub(crate) mod capture;
mod coalesce;
mod comm;
mod group;
mod issue;
mod keys;
mod ops;
mod options;
mod subgroups;
mod tuned;
mod work;

pub use capture::{Launch, PgGraph};
pub use coalesce::{Coalescing, P2pOp};
pub use group::ProcessGroup;
pub use keys::world_namespace;
pub use options::{PgOptions, DEFAULT_TIMEOUT};
pub use oxccl_core::state::work::WorkInfo;
pub use oxccl_core::tune::{RegMode, TuneTable};
pub(crate) use tuned::tune_from_env;
pub use tuned::{load_tune_file, TunedStats, TUNE_FILE_VAR};
pub use work::{Work, WorkOf};

use oxccl_core::Stream;

pub use oxccl_core::traits::{AbortOf, CommOf};
/// The event type of a backend's streams.
pub type EventOf<B> = <crate::buffer::StreamOf<B> as Stream>::Event;

/// Aborts every communicator of `groups` and stops the watchdog, within `limit` (c10d's
/// shutdown): never waits for peers.
pub fn shutdown<B: crate::buffer::Memory>(groups: &[&ProcessGroup<B>], limit: std::time::Duration) {
    for g in groups {
        g.abort("shut down");
    }
    crate::watchdog::Watchdog::global().stop(limit);
}

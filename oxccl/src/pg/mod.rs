//! c10d's process group, written once over the backend traits: `ProcessGroup<B>` runs on the
//! mock world in tests and on NCCL in production, and no backend type is named here.
//!
//! - [`ProcessGroup`]: rank, size, every collective and p2p, each returning a [`Work`];
//!   communicators made lazily on first use (the unique id travels through the store), or at
//!   once when a device is bound; timeouts per group, changeable at run time.
//! - [`Coalescing`]: operations issued as one batch with one work, by a guard or a closure.
//! - Subgroups: [`ProcessGroup::new_group`], [`ProcessGroup::new_subgroups`],
//!   [`ProcessGroup::new_subgroups_by_enumeration`], global ↔ group rank translation.

mod arrival;
mod backend;
mod buffer_modes;
mod build;
mod capture;
mod capture_state;
mod coalesce;
mod comm_slot;
pub mod elastic;
mod family;
mod inner;
mod issue;
mod keys;
mod one_sided;
mod op_facts;
mod ops;
mod options;
mod process_group;
mod subgroups;
pub(crate) mod tune;
mod work;

pub use backend::PgBackend;
pub use capture::{PgGraph, Replay};
pub use coalesce::{Coalescing, P2pOp};
pub use inner::ProcessGroup;
pub use keys::world_namespace;
pub use options::{PgOptions, DEFAULT_TIMEOUT};
pub use oxccl_core::one_sided::SignalFrom;
pub use oxccl_core::state::work::WorkInfo;
pub use oxccl_core::traits::{AbortOf, CommOf};
pub use oxccl_rules::tune::file::{load_tune_file, TUNE_FILE_VAR};
pub use oxccl_rules::tune::{RegMode, TuneTable};
pub use process_group::shutdown;
pub use tune::reg_cache::TunedStats;
pub use work::{EventOf, Work, WorkOf};

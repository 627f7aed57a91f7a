//! The one layer that calls NCCL's function pointers: a wrapper per entry point the backend
//! uses, with typed arguments, so the rest of the backend reaches NCCL through Rust signatures.
//! A wrapper whose soundness rests on its own arguments is safe; one that takes a communicator
//! handle or a pointer NCCL dereferences is an `unsafe fn` whose `# Safety` says what its
//! caller vouches for.
//!
//! Results: a call that only the library settles returns [`Result`] through
//! [`oxccl_loader::Library::check`]; a call on a communicator returns NCCL's [`Code`](symbol::Code) for the
//! caller to settle (`CommInner::finish` waits out `InProgress` and records failures in the
//! lifecycle, which only the communicator can do). A function the library lacks is an error
//! here too, the same one its caller's earlier presence check gives.

mod collectives;
mod group;
mod lifecycle;
mod one_sided;
mod query;
mod registration;
mod symbol;

pub(crate) use collectives::*;
pub(crate) use group::*;
pub(crate) use lifecycle::*;
pub(crate) use one_sided::*;
pub(crate) use query::*;
pub(crate) use registration::*;

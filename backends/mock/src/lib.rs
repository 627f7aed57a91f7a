//! oxccl-mock: an in-process world of N ranks on host memory, implementing oxccl-core's
//! backend traits with real semantics, for testing oxccl's state machines and for testing
//! distributed code without GPUs.
//!
//! * [`World::new`] / [`World::builder`] give one [`MockComm`] per rank (rank i at index i),
//!   meant to be moved one per thread; [`MockBackend`] does the same through
//!   [`oxccl_core::Backend`] (`unique_id`, then `init_rank` on each rank's thread).
//! * Every op is checked by [`oxccl_core::check::op`] and the lifecycle, then queued on a
//!   [`MockStream`] (a worker thread per stream). Buffers are host addresses.
//! * The k-th collective of each rank is matched with the k-th of every other rank; calls that
//!   disagree (kind, count, dtype, op, root) end with [`oxccl_core::Error::Mismatch`] on every
//!   rank instead of a hang. Sends complete eagerly (see [`p2p`](crate#p2p)).
//! * Groups are per thread and may span communicators: one thread can drive every rank.
//!   They are opened and closed through any [`MockBackend`] ([`oxccl_core::Backend::group_start`]).
//! * Abort works from any thread and wakes whatever waits on the rank; peers get
//!   [`oxccl_core::Error::Remote`]. A [`FaultPlan`] injects failures, hangs, lost ranks, delays
//!   and slow inits.
//! * Across processes: [`MockBackend::across_processes`] makes ids that ranks in other processes
//!   of this machine join (`init_rank` in each, e.g. through a process group and a TCP store):
//!   rank 0's process hosts the communicator, the others reach it over a Unix socket with data
//!   in shared memory; same semantics, and a dead process is seen at once (see [`procs`]).
//! * One-sided puts, signals and waits on symmetric windows (NCCL 2.29.2+ imitated) with
//!   NCCL's semantics, within a process and across processes (there the signals live on the
//!   host, and a put into a rank of another process reaches its window by that rank's wait).
//!
//! Arithmetic rules (wrapping integers, rounding of half and fp8 types, Avg, PreMulSum) are in
//! the `arith` module's documentation and are repeated here: ranks are combined in rank order;
//! integers wrap and Avg is the sum divided by n, truncated toward zero; float16/bfloat16 round
//! to the type after every step, fp8 to half and then to fp8 (as NCCL's sm90 kernels); Avg on
//! every float type is premul-sum by `float(1.0 / n)` converted to the type (f64: `1.0 / n`), as
//! NCCL's `ncclAvg` is. fp8 conversions are in [`fp8`].
//!
//! # p2p
//! A send copies its buffer at once and completes: more lenient than NCCL, where a large send
//! outside a group waits for the matching recv.

mod arith;
mod backend;
mod binding;
mod calls;
mod capture;
mod collective;
mod comm;
mod delivery;
mod exec;
mod fault;
pub mod fp8;
mod fused;
mod graph;
mod group_call;
mod grow;
mod job;
mod limits;
mod lobby;
mod memory;
mod messages;
mod mirror;
mod mismatch;
mod one_sided;
mod op_desc;
mod p2p;
pub mod procs;
mod rendezvous;
mod shared;
mod shrink;
mod shrink_match;
mod split;
mod stream;
mod sync;
mod transport;
mod window;
mod world;

pub use backend::MockBackend;
pub use binding::MockAbort;
pub use comm::{MockComm, MockRedOp};
pub use fault::{Fault, FaultKind, FaultPlan, INIT_NEVER};
pub use graph::MockGraph;
pub use limits::{DEFAULT_INIT_TIMEOUT, DEFAULT_VERSION, MAX_RANKS};
pub use stream::{MockEvent, MockStream, DROP_GRACE};
pub use world::{World, WorldBuilder};

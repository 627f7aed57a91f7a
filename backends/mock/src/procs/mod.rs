//! The mock world across processes: ranks in different processes of one machine that share a
//! unique id form one mock communicator, with the in-process mock's semantics, because it *is*
//! the in-process mock.
//!
//! # Where
//! The host side is here (`host`, `split`, `split_match`); the rank side, a rank process's
//! mirror, is in the crate's `mirror` module; the ids, messages and channel both speak are in
//! its `transport` module, which knows no communicator.
//!
//! # How
//! The process whose backend made the id (rank 0's, under a process group) is the **host**: it
//! holds the one real communicator state (the mock's `CommShared`) where
//! every rank's operations meet, and a **proxy** per rank of another process. Each other
//! process holds a *mirror*: a local `CommShared` for its own rank's life (lifecycle, checks,
//! fault numbering, registrations, nonblocking polls, group queues are the unchanged mock
//! code) whose cross-rank steps (posting and waiting for collectives and p2p) go to the host as
//! a **batch** (one op, or one stream's share of a group, so grouped p2p rings work). The proxy
//! runs the batch with the mock's own executor (`exec`: posts, waits, faults) on host
//! addresses that point into shared memory, then answers. So matching, arithmetic, mismatch
//! detection, faults and death propagation are the same code for threads and processes.
//!
//! # Transport: a Unix stream socket for control, a memfd for data
//! * Control goes over one `SOCK_STREAM` Unix socket per communicator rank, in the abstract
//!   namespace (Linux): no file to unlink, the name dies with the listener. A socket, not a
//!   futex on shared memory, because the kernel closes it when a process dies *in any way*
//!   (exit 0/1, SIGTERM, SIGKILL): the host reads end-of-file at once and marks the rank
//!   dead, and the ranks read end-of-file when the host dies. A futex word would need
//!   heartbeats and timeouts to see a SIGKILL. The socket is crossed once per batch.
//! * Data goes through shared memory: each rank process creates memfd segments (a pool, one
//!   per batch in flight) and passes the descriptor once over the socket (SCM_RIGHTS); the
//!   host maps it. A memfd has no name, so nothing can leak into /dev/shm whatever dies when.
//!   The rank copies its send buffers in and its outputs out (its buffers are ordinary
//!   `HostBuf`s: the same `Memory` implementation serves threads and processes); the host's
//!   collective reads and writes the segments directly.
//!
//! # Ids
//! A process-spanning id is `OXMPROC1`, the host's pid, a 16-byte random token; the
//! listener's name is derived from pid and token, and a connection must present the token.
//! A plain [`MockBackend`](crate::MockBackend) makes in-process ids;
//! [`MockBackend::across_processes`](crate::MockBackend::across_processes) makes these. Any
//! backend's `init_rank` accepts both.
//!
//! # Failures
//! A rank process that dies or closes its connection is marked dead on the host (its peers'
//! operations end with `Error::Remote` naming it); the host's death fails every waiting rank
//! with `Error::Remote`; a rank that stops answering leaves its peers waiting as a thread
//! would, until their `Work::wait` timeout (`Error::Timeout`) and abort. Aborting a rank
//! tells the host at once (peers get `Remote`) and wakes the rank's own waits.
//!
//! # Split
//! A split is matched where the parent's state lives (its host) by the in-process code, so
//! colors, keys, the order by key then parent rank, NOCOLOR and a dead rank failing the match
//! are the same; each child is then hosted by the process of its own rank 0 and joined by its
//! members like an init (see `procs/split.rs`). Children span processes, are independent of the
//! parent's host, and split again. Every wait of a split across processes is bounded by the
//! parent's init limit (`Error::Timeout`); a dead peer ends it with `Error::Remote`.
//!
//! # Init limit
//! A blocking init waits for the other ranks up to the backend's init timeout, or the limit
//! given to [`Backend::init_rank_within`](oxccl_core::Backend::init_rank_within) (a process
//! group passes its timeout); a rank of another process sends its limit with its join, so its
//! host times it out and answers with the ranks still missing.
//!
//! # Limits
//! Linux only (abstract sockets, memfd): elsewhere an id spanning processes is refused with
//! `Error::InvalidArgument` on `backend`, and the in-process mock is unchanged.
//! A nonblocking init across processes returns after all ranks joined, then polls
//! `InProgress` as configured (a nonblocking split returns at once: its thread joins the
//! child). One group mixing in-process and cross-process communicators runs the cross-process
//! share first.

#[cfg(target_os = "linux")]
pub(crate) mod host;
#[cfg(target_os = "linux")]
pub(crate) mod one_sided;
#[cfg(target_os = "linux")]
pub(crate) mod split;
#[cfg(target_os = "linux")]
pub(crate) mod split_match;
#[cfg(not(target_os = "linux"))]
mod unsupported;
#[cfg(not(target_os = "linux"))]
pub(crate) use unsupported::{host, split};

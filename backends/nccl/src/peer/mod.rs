//! Peer memory and oxccl's own kernels (all-reduce, all-gather, reduce-scatter) for the ranks
//! of a communicator that share a node (what they run and when: [`oxccl_core::peer_kernels`]).
//! A group whose ranks cannot map each other's memory (more than one host, no peer access, a
//! driver without descriptor export) never makes any, and NCCL runs every call.

mod fd_pass;
mod host_flags;
mod kernels;
mod memory;
mod setup;
mod vmm;

pub(crate) use memory::PeerMemory;
pub(crate) use setup::{setup, Member};

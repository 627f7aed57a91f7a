//! Key-value stores the ranks of a job rendezvous through: the [`Store`] trait, a TCP store
//! that speaks PyTorch's TCPStore wire protocol ([`tcp`]: client and server, so a Rust program
//! and a PyTorch one share a store), a file store, a memory store and a prefix view.
//!
//! The package needs no CUDA and no NCCL: it is usable alone, and the process group of `oxccl`
//! builds on it.
//!
//! Keys are UTF-8 strings, values are bytes. Every call that can wait takes (or uses) a timeout,
//! and a store that cannot answer says so with [`crate::Error::Timeout`] (waited in vain) or
//! [`crate::Error::Remote`] (the server is gone), never a hang.

mod file;
mod mem;
mod prefix;
mod store;

pub use file::FileStore;
pub use mem::{MemStore, DEFAULT_STORE_TIMEOUT};
pub use prefix::PrefixStore;
pub use store::Store;

pub use oxccl_core::{Error, Result};

pub mod tcp;
pub use tcp::{TcpServer, TcpStore, TcpStoreOptions};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

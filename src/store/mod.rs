//! Key-value stores the ranks of a job rendezvous through: the [`Store`] trait, a TCP store
//! that speaks PyTorch's TCPStore wire protocol (`tcp/`), a file store and a prefix view.
//!
//! Keys are UTF-8 strings, values are bytes. Every call that can wait takes (or uses) a timeout,
//! and a store that cannot answer says so with [`crate::Error::Timeout`] (waited in vain) or
//! [`crate::Error::Remote`] (the server is gone), never a hang.

mod file;
mod mem;
mod prefix;

pub use file::FileStore;
pub use mem::{MemStore, DEFAULT_STORE_TIMEOUT};
pub use prefix::PrefixStore;

use oxccl_core::Result;
use std::time::Duration;

pub mod tcp;
pub use tcp::{TcpServer, TcpStore, TcpStoreOptions};

/// The store operations the bootstrap and the process group need (c10d's `Store`).
///
/// Implementations are shared between threads (`Send + Sync`); every method may be called
/// concurrently.
pub trait Store: Send + Sync {
    /// Sets `key` to `value`, replacing any value (wakes waiters on `key`).
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;

    /// The value of `key`, waiting up to `timeout` for it to be set. Waiting in vain is
    /// [`crate::Error::Timeout`] naming the key.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;

    /// Adds `delta` to the integer at `key` (a missing key counts as 0) and returns the new
    /// value. Values are stored as decimal text, as PyTorch's stores keep them.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;

    /// Waits up to `timeout` until every key of `keys` is set.
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()>;

    /// Whether every key of `keys` is set now (never waits).
    fn check(&self, keys: &[&str]) -> Result<bool>;

    /// Sets `key` to `desired` if its value is `expected` (a missing key matches an empty
    /// `expected`); returns the value after the call (c10d's `compare_set`).
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>>;

    /// Deletes `key`; whether it existed.
    fn delete(&self, key: &str) -> Result<bool>;

    /// How many keys the store holds.
    fn num_keys(&self) -> Result<u64>;

    /// The timeout this store uses when the caller has none of its own.
    fn timeout(&self) -> Duration;

    /// `key` as the store underneath holds it, for texts a person reads (an error naming the
    /// key to look at with another client): the key itself, or with the prefixes of the
    /// [`PrefixStore`]s it goes through.
    fn full_key(&self, key: &str) -> String {
        key.to_owned()
    }
}

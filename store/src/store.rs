//! The [`Store`] trait: what the bootstrap and the process group ask of a key-value store.

use oxccl_core::Result;
use std::time::Duration;

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

    /// Whether `key` is set now, for a caller that asks again and again (a signal every
    /// rank looks for): a store that can have its server say when the key is set answers
    /// from that, sending nothing while it is not ([`crate::TcpStore`] watches up to four such
    /// keys per client, a connection each while unset, a key seen set making room for
    /// another); any other store, or key, is asked as [`Store::check`] asks.
    fn check_watched(&self, key: &str) -> Result<bool> {
        self.check(&[key])
    }

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
    /// [`PrefixStore`](crate::PrefixStore)s it goes through.
    fn full_key(&self, key: &str) -> String {
        key.to_owned()
    }
}

//! [`PrefixStore`]: a view of another store in which every key becomes `prefix/key`, so
//! process groups sharing one store keep apart (c10d's `PrefixStore`, same separator).

use crate::store::Store;
use oxccl_core::Result;
use std::sync::Arc;
use std::time::Duration;

/// A store whose keys all live under `prefix/` in the store it wraps. Prefix stores nest:
/// `PrefixStore::new("b", Arc::new(PrefixStore::new("a", s)))` uses `a/b/key` in `s`.
#[derive(Clone)]
pub struct PrefixStore {
    prefix: String,
    inner: Arc<dyn Store>,
}

impl std::fmt::Debug for PrefixStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl PrefixStore {
    /// A view of `inner` under `prefix`.
    pub fn new(prefix: impl Into<String>, inner: Arc<dyn Store>) -> PrefixStore {
        PrefixStore {
            prefix: prefix.into(),
            inner,
        }
    }

    /// The prefix, without the separator.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The store this one is a view of.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// `key` as the wrapped store sees it: `prefix/key`.
    pub fn key(&self, key: &str) -> String {
        format!("{}/{}", self.prefix, key)
    }
}

impl Store for PrefixStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(&self.key(key), value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.inner.get(&self.key(key), timeout)
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner.add(&self.key(key), delta)
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let keys: Vec<String> = keys.iter().map(|k| self.key(k)).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.inner.wait(&keys, timeout)
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let keys: Vec<String> = keys.iter().map(|k| self.key(k)).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.inner.check(&keys)
    }

    fn check_watched(&self, key: &str) -> Result<bool> {
        self.inner.check_watched(&self.key(key))
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.inner.compare_set(&self.key(key), expected, desired)
    }

    fn delete(&self, key: &str) -> Result<bool> {
        self.inner.delete(&self.key(key))
    }

    /// Every key of the wrapped store, as c10d's `PrefixStore` counts (not only this prefix's).
    fn num_keys(&self) -> Result<u64> {
        self.inner.num_keys()
    }

    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }

    fn full_key(&self, key: &str) -> String {
        self.inner.full_key(&self.key(key))
    }
}

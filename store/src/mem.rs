//! [`MemStore`]: a [`Store`] inside one process, for ranks run as threads (tests, the mock
//! world, single-process jobs). Waiters sleep on a condition variable, so a `set` wakes them at
//! once instead of after a poll interval.
//!
//! Also the value rules every oxccl store shares (counters as decimal text, c10d's
//! `compare_set`), so the file store and this one cannot drift apart.

use crate::store::Store;
use oxccl_core::text::{Escaped, EscapedBytes};
use oxccl_core::{text, Error, Result};
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// c10d's default store timeout (`Store::kDefaultTimeout`), used when a store is made without
/// one.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(300);

/// An in-process key-value store shared by threads (wrap it in an `Arc`).
///
/// ```
/// use oxccl_store::{MemStore, Store};
/// use std::time::Duration;
/// let store = MemStore::new();
/// store.set("id", b"abc")?;
/// assert_eq!(store.get("id", Duration::from_secs(1))?, b"abc");
/// assert_eq!(store.add("n", 2)?, 2);
/// # Ok::<(), oxccl_store::Error>(())
/// ```
#[derive(Debug)]
pub struct MemStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    timeout: Duration,
}

impl Default for MemStore {
    fn default() -> MemStore {
        MemStore::new()
    }
}

impl MemStore {
    /// An empty store with [`DEFAULT_STORE_TIMEOUT`].
    pub fn new() -> MemStore {
        MemStore::with_timeout(DEFAULT_STORE_TIMEOUT)
    }

    /// An empty store whose [`Store::timeout`] is `timeout`.
    pub fn with_timeout(timeout: Duration) -> MemStore {
        MemStore {
            map: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            timeout,
        }
    }

    /// The map, even if a thread panicked while holding it: every update is a single map
    /// operation, so the map is never left half-changed.
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `ready` holds on the map, or `timeout` passes (then the error names `what`).
    fn wait_until<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut ready: impl FnMut(&HashMap<String, Vec<u8>>) -> Option<T>,
    ) -> Result<T> {
        let start = Instant::now();
        let mut map = self.lock();
        loop {
            if let Some(v) = ready(&map) {
                return Ok(v);
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(timeout_error(what, timeout));
            }
            map = self
                .changed
                .wait_timeout(map, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Store for MemStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.lock().insert(key.to_owned(), value.to_vec());
        self.changed.notify_all();
        Ok(())
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.wait_until(timeout, key, |m| m.get(key).cloned())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut map = self.lock();
        let now = add_value(key, map.get(key).map(Vec::as_slice), delta)?;
        map.insert(key.to_owned(), now.to_string().into_bytes());
        drop(map);
        self.changed.notify_all();
        Ok(now)
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let what = keys.join(", ");
        self.wait_until(timeout, &what, |m| {
            keys.iter().all(|k| m.contains_key(*k)).then_some(())
        })
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let map = self.lock();
        Ok(keys.iter().all(|k| map.contains_key(*k)))
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let mut map = self.lock();
        let (set, result) = compare_set_value(map.get(key).map(Vec::as_slice), expected, desired);
        if set {
            map.insert(key.to_owned(), desired.to_vec());
            drop(map);
            self.changed.notify_all();
        }
        Ok(result)
    }

    fn delete(&self, key: &str) -> Result<bool> {
        Ok(self.lock().remove(key).is_some())
    }

    fn num_keys(&self) -> Result<u64> {
        Ok(self.lock().len() as u64)
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The [`Error::Timeout`] of a store wait on `what` (a key, or keys joined by commas).
pub(crate) fn timeout_error(what: &str, after: Duration) -> Error {
    Error::Timeout {
        what: text!("store keys [{}] to be set", Escaped(what)),
        after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
    }
}

/// The counter at `key` (`current`, decimal text; missing is 0) plus `delta`. A value that is
/// not an integer, or a sum that overflows, is an error rather than a wrapped count.
pub(crate) fn add_value(key: &str, current: Option<&[u8]>, delta: i64) -> Result<i64> {
    let old = match current {
        None => 0,
        Some(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| {
                Error::invalid(
                    "key",
                    format_args!(
                        "`{}` to hold a decimal integer to add to, got \"{}\"",
                        Escaped(key),
                        EscapedBytes(bytes)
                    ),
                )
            })?,
    };
    old.checked_add(delta).ok_or_else(|| {
        Error::invalid(
            "delta",
            format_args!(
                "a delta that keeps `{}` in i64, got {old} + {delta}",
                Escaped(key)
            ),
        )
    })
}

/// c10d's `compare_set` on the current value: whether to store `desired`, and the value to
/// return. A missing key matches an empty `expected` (then `desired` is stored); a missing key
/// with a non-empty `expected` returns `expected` and stores nothing, as c10d's stores do.
pub(crate) fn compare_set_value(
    current: Option<&[u8]>,
    expected: &[u8],
    desired: &[u8],
) -> (bool, Vec<u8>) {
    match current {
        None if expected.is_empty() => (true, desired.to_vec()),
        None => (false, expected.to_vec()),
        Some(v) if v == expected => (true, desired.to_vec()),
        Some(v) => (false, v.to_vec()),
    }
}

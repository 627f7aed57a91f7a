//! [`FileStore`]: a [`Store`] over one file that processes on a shared file system open
//! together (c10d's `FileStore`, the store behind `file://` init).
//!
//! The file is an append-only log of records (`set` and `delete`), replayed into a map each
//! instance keeps. Every operation takes the file's lock (`flock`: shared to read, exclusive
//! to append), so a read-modify-write (`add`, `compare_set`, `delete`) sees every record
//! before it and appends its own atomically. `get` and `wait` poll with a short, growing
//! sleep until their timeout.
//!
//! Record: `op` (1 set, 2 delete), key length (u32 LE), key, value length (u32 LE), value.
//!
//! With a world size, each instance counts itself out when dropped and the last one removes
//! the file, as c10d does, so a finished job leaves nothing behind for the next.

use crate::mem::{add_value, compare_set_value, timeout_error, DEFAULT_STORE_TIMEOUT};
use crate::store::Store;
use oxccl_core::text::EscapedBytes;
use oxccl_core::{text, Error, Result};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const OP_SET: u8 = 1;
const OP_DELETE: u8 = 2;

/// Internal key counting the instances that finished (never seen by users: the NUL byte).
const CLEANUP_KEY: &str = "\0oxccl/cleanup";

/// Longest poll sleep: bounds how late a waiter sees a key another process set.
const MAX_POLL: Duration = Duration::from_millis(20);

/// A store shared through one file (see the module documentation).
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    world_size: Option<u32>,
    timeout: Duration,
    inner: Mutex<Inner>,
}

/// The open file, how far it has been replayed, and the replayed map.
#[derive(Debug)]
struct Inner {
    file: File,
    offset: u64,
    map: HashMap<String, Vec<u8>>,
}

/// What an update appends: a key and its new value (`None`: delete), or nothing.
type Change = Option<(String, Option<Vec<u8>>)>;

/// Holds the file's `flock`; unlocks when dropped, whatever path the operation took.
struct Locked<'a>(&'a File);

impl<'a> Locked<'a> {
    /// Waits for the lock on `file` (exclusive to write, shared to read): `flock` on Linux,
    /// which also works across NFSv4 clients, where a `file://` store usually lives.
    fn take(file: &'a File, exclusive: bool) -> std::io::Result<Locked<'a>> {
        loop {
            let taken = if exclusive {
                file.lock()
            } else {
                file.lock_shared()
            };
            match taken {
                Ok(()) => return Ok(Locked(file)),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // Closing the file would release the lock too; an error here leaves nothing to undo.
        let _ = self.0.unlock();
    }
}

impl FileStore {
    /// Opens (creating if needed) the store at `path`. `world_size`: how many instances will
    /// open it; the last of them to be dropped removes the file (`None`: never removed).
    /// Its [`Store::timeout`] is 300 s until [`FileStore::with_timeout`].
    pub fn new(path: impl AsRef<Path>, world_size: Option<u32>) -> Result<FileStore> {
        let path = path.as_ref().to_path_buf();
        if world_size == Some(0) {
            return Err(Error::invalid(
                "world_size",
                format_args!("at least 1 instance of file store {}, got 0", shown(&path)),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| {
                Error::invalid(
                    "path",
                    format_args!("a file the store can open: {}: {e}", shown(&path)),
                )
            })?;
        Ok(FileStore {
            path,
            world_size,
            timeout: DEFAULT_STORE_TIMEOUT,
            inner: Mutex::new(Inner {
                file,
                offset: 0,
                map: HashMap::new(),
            }),
        })
    }

    /// The same store with `timeout` as its [`Store::timeout`].
    pub fn with_timeout(mut self, timeout: Duration) -> FileStore {
        self.timeout = timeout;
        self
    }

    /// The file behind the store.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Every change to `Inner` is complete before it is visible (offset moves last), so a
        // panic elsewhere cannot leave it inconsistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn io_error(&self, what: &str, e: std::io::Error) -> Error {
        Error::Remote {
            detail: text!("file store {}: {what}: {e}", shown(&self.path)),
        }
    }

    /// Takes the file's lock (exclusive to write) and replays what others appended; the lock
    /// is held until the returned guard drops.
    fn sync<'a>(
        &self,
        file: &'a File,
        offset: &mut u64,
        map: &mut HashMap<String, Vec<u8>>,
        exclusive: bool,
    ) -> Result<Locked<'a>> {
        let guard = Locked::take(file, exclusive).map_err(|e| self.io_error("lock", e))?;
        let mut fresh = Vec::new();
        let mut reader = file;
        reader
            .seek(SeekFrom::Start(*offset))
            .and_then(|_| reader.read_to_end(&mut fresh))
            .map_err(|e| self.io_error("read", e))?;
        if let Err(at) = replay(&fresh, map) {
            return Err(Error::Remote {
                detail: text!(
                    "file store {} is corrupt at byte {}",
                    shown(&self.path),
                    *offset + at as u64
                ),
            });
        }
        *offset += fresh.len() as u64;
        Ok(guard)
    }

    /// Runs `f` on the replayed map under the shared lock.
    fn read<T>(&self, f: impl FnOnce(&HashMap<String, Vec<u8>>) -> T) -> Result<T> {
        let mut guard = self.inner();
        let Inner { file, offset, map } = &mut *guard;
        drop(self.sync(file, offset, map, false)?);
        Ok(f(map))
    }

    /// Under the exclusive lock: `f` decides from the map what to append (`Some((key,
    /// Some(value)))` sets, `Some((key, None))` deletes), and what to return.
    fn update<T>(
        &self,
        f: impl FnOnce(&HashMap<String, Vec<u8>>) -> Result<(Change, T)>,
    ) -> Result<T> {
        let mut guard = self.inner();
        let Inner { file, offset, map } = &mut *guard;
        let lock = self.sync(file, offset, map, true)?;
        let (change, out) = f(map)?;
        if let Some((key, value)) = change {
            let record = encode(&key, value.as_deref()).ok_or_else(|| {
                Error::invalid("value", format_args!("a key and a value below 4 GiB each"))
            })?;
            let mut writer: &File = file;
            writer
                .write_all(&record)
                .map_err(|e| self.io_error("append", e))?;
            drop(lock);
            *offset += record.len() as u64;
            match value {
                Some(v) => map.insert(key, v),
                None => map.remove(&key),
            };
        }
        Ok(out)
    }

    /// Polls `ready` on the replayed map until it gives a value or `timeout` passes.
    fn poll<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut ready: impl FnMut(&HashMap<String, Vec<u8>>) -> Option<T>,
    ) -> Result<T> {
        let start = Instant::now();
        let mut nap = Duration::from_millis(1);
        loop {
            if let Some(v) = self.read(&mut ready)? {
                return Ok(v);
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(timeout_error(what, timeout));
            }
            std::thread::sleep(nap.min(left));
            nap = (nap * 2).min(MAX_POLL);
        }
    }
}

impl Drop for FileStore {
    fn drop(&mut self) {
        let Some(world) = self.world_size else { return };
        match self.add(CLEANUP_KEY, 1) {
            Ok(done) if done >= i64::from(world) => {
                let _ = std::fs::remove_file(&self.path);
            }
            Ok(_) => {}
            Err(e) => log::warn!("file store {}: not counted out: {e}", shown(&self.path)),
        }
    }
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.update(|_| Ok((Some((key.to_owned(), Some(value.to_vec()))), ())))
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.poll(timeout, key, |m| m.get(key).cloned())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.update(|m| {
            let now = add_value(key, m.get(key).map(Vec::as_slice), delta)?;
            Ok((
                Some((key.to_owned(), Some(now.to_string().into_bytes()))),
                now,
            ))
        })
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.poll(timeout, &keys.join(", "), |m| {
            keys.iter().all(|k| m.contains_key(*k)).then_some(())
        })
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        self.read(|m| keys.iter().all(|k| m.contains_key(*k)))
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.update(|m| {
            let (set, out) = compare_set_value(m.get(key).map(Vec::as_slice), expected, desired);
            Ok((set.then(|| (key.to_owned(), Some(desired.to_vec()))), out))
        })
    }

    fn delete(&self, key: &str) -> Result<bool> {
        self.update(|m| {
            let existed = m.contains_key(key);
            Ok((existed.then(|| (key.to_owned(), None)), existed))
        })
    }

    fn num_keys(&self) -> Result<u64> {
        self.read(|m| m.keys().filter(|k| *k != CLEANUP_KEY).count() as u64)
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// One record; `None` when the key or value does not fit a u32 length.
fn encode(key: &str, value: Option<&[u8]>) -> Option<Vec<u8>> {
    let v = value.unwrap_or_default();
    let klen = u32::try_from(key.len()).ok()?;
    let vlen = u32::try_from(v.len()).ok()?;
    let mut out = Vec::with_capacity(9 + key.len() + v.len());
    out.push(if value.is_some() { OP_SET } else { OP_DELETE });
    out.extend_from_slice(&klen.to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&vlen.to_le_bytes());
    out.extend_from_slice(v);
    Some(out)
}

/// Applies the records of `bytes` to `map`; `Err(offset)` of the first malformed or cut one.
fn replay(bytes: &[u8], map: &mut HashMap<String, Vec<u8>>) -> std::result::Result<(), usize> {
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        let op = bytes[at];
        at += 1;
        let mut field = || -> Option<&[u8]> {
            let len = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
            let data = bytes.get(at + 4..(at + 4).checked_add(len)?)?;
            at += 4 + len;
            Some(data)
        };
        let key = field().and_then(|k| std::str::from_utf8(k).ok());
        let value = field();
        match (op, key, value) {
            (OP_SET, Some(k), Some(v)) => {
                map.insert(k.to_owned(), v.to_vec());
            }
            (OP_DELETE, Some(k), Some(_)) => {
                map.remove(k);
            }
            _ => return Err(start),
        }
    }
    Ok(())
}

/// A path as messages show it: control characters and bytes that are not UTF-8 escaped.
fn shown(path: &Path) -> EscapedBytes<'_> {
    EscapedBytes(path.as_os_str().as_encoded_bytes())
}

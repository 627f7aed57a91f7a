//! The on-request dump trigger: a file named `dump_request` appearing (or being touched again)
//! in the dump directory. Whoever owns the recorder (the watchdog) polls
//! [`DumpTrigger::requested`] and dumps when it says so.
//!
//! ```sh
//! touch "$OXCCL_TRACE_DIR/dump_request"    # every rank using that directory dumps once
//! ```
//!
//! Why a file, rather than PyTorch's per-rank named pipe, a signal or a store key:
//! - one `touch` reaches every rank that shares the directory (all ranks of a node, and all
//!   nodes on a shared filesystem), where a pipe or a signal must be sent to each process;
//! - no signal handler is installed behind the application's back (a library taking SIGUSR1
//!   would clash with the application's own use of it);
//! - no store connection is needed: a hang is often the moment the store or a peer is gone;
//! - a poll is one `stat`, cheap at the watchdog's cadence, and nothing runs between polls.
//!
//! Every rank sees the request: the file is never removed by a rank (that would hide it from
//! the others). Each trigger remembers the version of the file (inode, size, change time) it
//! has served, and fires again only when the file is created anew or touched again. A request
//! already present when the trigger is made is taken as stale and does not fire.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The name of the request file in the dump directory.
pub const DUMP_REQUEST_FILE: &str = "dump_request";

/// One version of the request file.
type Stamp = (u64, u64, i64, i64);

/// Polled by the recorder's owner: `true` once per new request.
#[derive(Debug)]
pub struct DumpTrigger {
    path: PathBuf,
    // The version last served (or seen stale at creation); polls come from one thread, the
    // lock only makes `&self` enough.
    seen: Mutex<Option<Stamp>>,
}

impl DumpTrigger {
    /// A trigger watching `dir/dump_request`.
    pub fn new(dir: impl AsRef<Path>) -> DumpTrigger {
        let path = dir.as_ref().join(DUMP_REQUEST_FILE);
        let seen = stamp(&path);
        DumpTrigger {
            path,
            seen: Mutex::new(seen),
        }
    }

    /// The file it watches.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a dump was requested since the last `true` (the file appeared or was touched).
    /// Never blocks beyond one `stat`; an unreadable directory reads as no request.
    pub fn requested(&self) -> bool {
        let now = stamp(&self.path);
        let mut seen = match self.seen.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        match now {
            Some(s) if *seen != Some(s) => {
                *seen = Some(s);
                true
            }
            Some(_) => false,
            None => {
                // Removed: the next creation is a new request even if it reuses the inode.
                *seen = None;
                false
            }
        }
    }

    /// Requests a dump from every trigger watching `dir` (creates or rewrites the file with
    /// this process's id and the time, so its version changes).
    pub fn request(dir: impl AsRef<Path>) -> std::io::Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir)?;
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        std::fs::write(
            dir.join(DUMP_REQUEST_FILE),
            format!("{} {nonce}\n", std::process::id()),
        )
    }
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.size(), m.ctime(), m.ctime_nsec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("oxccl-trigger-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn fires_once_per_request_for_every_trigger() {
        let dir = tmp_dir("once");
        let a = DumpTrigger::new(&dir);
        let b = DumpTrigger::new(&dir);
        assert!(!a.requested());
        DumpTrigger::request(&dir).unwrap();
        assert!(a.requested());
        assert!(!a.requested());
        // The other rank sees the same request: nobody removed the file.
        assert!(b.requested());
        assert!(!b.requested());
        // A second request (the content changes) fires again.
        std::thread::sleep(std::time::Duration::from_millis(20));
        DumpTrigger::request(&dir).unwrap();
        assert!(a.requested());
        assert!(b.requested());
        // Removal is no request; re-creation is.
        std::fs::remove_file(a.path()).unwrap();
        assert!(!a.requested());
        DumpTrigger::request(&dir).unwrap();
        assert!(a.requested());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_request_does_not_fire_and_a_missing_dir_is_quiet() {
        let dir = tmp_dir("stale");
        DumpTrigger::request(&dir).unwrap();
        let t = DumpTrigger::new(&dir);
        assert!(!t.requested());
        let gone = DumpTrigger::new(dir.join("no/such/dir"));
        assert!(!gone.requested());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

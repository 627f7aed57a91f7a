//! One rank's connection to the host of its communicator: the join, the reader thread that
//! collects the host's answers, and the pool of shared-memory segments batches travel in.

use super::chan::{Rx, Segment, Tx};
use super::child_spec::ChildSpec;
use super::proc_id::ProcId;
use super::wire::Msg;
use crate::sync::{lock, wait_for};
use oxccl_core::text::Text;
use oxccl_core::{text, Error, Result};
use std::collections::HashMap;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Segments kept for reuse per connection.
const POOL: usize = 4;
/// The smallest segment made (small ops share one mapping).
const MIN_SEGMENT: usize = 1 << 20;
/// How much longer than its limit a joining rank waits for the host's answer: the host times
/// the join out first and says which ranks are missing.
const ANSWER_SLACK: Duration = Duration::from_secs(2);

/// What the reader thread fills in: batch outcomes, and why the connection ended.
#[derive(Default)]
pub(crate) struct Replies {
    pub(crate) done: HashMap<u64, Result<()>>,
    /// Answers to this rank's split calls, by split sequence number.
    splits: HashMap<u64, Result<Option<ChildSpec>>>,
    /// Answers to this rank's one-sided calls, by call id.
    pub(crate) one_sided: HashMap<u64, Result<Vec<crate::delivery::Delivery>>>,
    pub(crate) broken: Option<Text>,
}

/// One rank's connection to the host.
pub(crate) struct Link {
    pub(crate) tx: Tx,
    pub(crate) replies: Arc<(Mutex<Replies>, Condvar)>,
    pub(crate) next_batch: AtomicU64,
    next_seg: AtomicU64,
    /// Free segments, by id.
    segs: Mutex<Vec<(u64, Segment)>>,
    dead_sent: AtomicBool,
    /// The process of every rank, as the host answered the join.
    pub(crate) pids: Vec<u32>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.tx.shutdown();
    }
}

fn clamp(d: Duration) -> Duration {
    d.clamp(Duration::from_millis(1), Duration::from_secs(86_400))
}

impl Link {
    /// Connects to the host of `pid` as `rank` of `size` and waits until every rank joined.
    pub(crate) fn connect(pid: &ProcId, rank: u32, size: u32, limit: Duration) -> Result<Link> {
        let name = pid.socket_name();
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| Error::Remote {
            detail: text!("abstract socket name {name}: {e}"),
        })?;
        let start = Instant::now();
        let timeout = |what: &str| Error::Timeout {
            what: text!(
                "rank {rank} {what} the mock host (process {}, socket @{name})",
                pid.pid
            ),
            after_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        let sock = loop {
            match UnixStream::connect_addr(&addr) {
                Ok(s) => break s,
                Err(_) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return Err(timeout("connecting to")),
            }
        };
        let w = sock.try_clone().map_err(|e| Error::Remote {
            detail: text!("socket: {e}"),
        })?;
        let tx = Tx::new(w);
        tx.send(
            &Msg::Hello {
                token: pid.token,
                rank,
                size,
                pid: std::process::id(),
                limit_ms: u64::try_from(limit.saturating_sub(start.elapsed()).as_millis())
                    .unwrap_or(u64::MAX),
            },
            None,
        )?;
        let left = limit
            .saturating_sub(start.elapsed())
            .saturating_add(ANSWER_SLACK);
        let _ = sock.set_read_timeout(Some(clamp(left)));
        let mut rx = Rx::new(sock);
        let pids;
        match rx.recv() {
            Ok(Some(Msg::Welcome(r))) => pids = r?,
            Ok(Some(_)) => {
                return Err(Error::Remote {
                    detail: text!("the mock host answered the join with another message"),
                })
            }
            Ok(None) if start.elapsed() >= limit.saturating_add(ANSWER_SLACK) => {
                return Err(timeout("waiting for the other ranks through"))
            }
            Ok(None) => {
                return Err(Error::Remote {
                    detail: text!(
                        "the mock host (process {}) closed the connection during init",
                        pid.pid
                    ),
                })
            }
            Err(e) => return Err(e),
        }
        rx.clear_timeout();
        let replies: Arc<(Mutex<Replies>, Condvar)> = Arc::default();
        let r2 = replies.clone();
        let host = pid.pid;
        std::thread::Builder::new()
            .name("oxccl-mock-link".into())
            .spawn(move || read_loop(rx, r2, host))
            .map_err(|e| Error::Remote {
                detail: text!("starting the link thread: {e}"),
            })?;
        Ok(Link {
            tx,
            replies,
            next_batch: AtomicU64::new(0),
            next_seg: AtomicU64::new(0),
            segs: Mutex::new(Vec::new()),
            dead_sent: AtomicBool::new(false),
            pids,
        })
    }

    /// Tells the host (once) that this rank is gone, so its peers stop waiting for it.
    pub(crate) fn tell_dead(&self, why: &str) {
        if !self.dead_sent.swap(true, Ordering::AcqRel) {
            self.tx.send_now(&Msg::Dead {
                why: why.to_string(),
            });
        }
    }

    /// Sends this rank's call of split `seq` to the host (which matches it with the others').
    pub(crate) fn split_call(&self, seq: u64, color: Option<u32>, key: u32) -> Result<()> {
        self.tx
            .send(&Msg::Split { seq, color, key }, None)
            .map_err(|e| self.broken().map_or(e, |detail| Error::Remote { detail }))
    }

    /// The host's answer to split `seq` once it came, or why it cannot come (the host is
    /// gone); `None` while neither.
    pub(crate) fn split_answer(&self, seq: u64) -> Option<Result<Option<ChildSpec>>> {
        let mut g = lock(&self.replies.0);
        if let Some(r) = g.splits.remove(&seq) {
            return Some(r);
        }
        g.broken.clone().map(|detail| Err(Error::Remote { detail }))
    }

    /// Waits up to `d` for a reply of the host (or its end).
    pub(crate) fn wait_reply(&self, d: Duration) {
        let g = lock(&self.replies.0);
        drop(wait_for(&self.replies.1, g, d));
    }

    /// Why the connection ended, once it did.
    fn broken(&self) -> Option<Text> {
        lock(&self.replies.0).broken.clone()
    }

    /// A free segment of at least `len` bytes, and whether the host has not seen it yet.
    pub(crate) fn segment(&self, len: usize) -> Result<(u64, Segment, bool)> {
        let mut free = lock(&self.segs);
        if let Some(i) = free.iter().position(|(_, s)| s.len >= len) {
            let (id, s) = free.swap_remove(i);
            return Ok((id, s, false));
        }
        drop(free);
        let size = len
            .max(MIN_SEGMENT)
            .checked_next_power_of_two()
            .unwrap_or(len);
        let id = self.next_seg.fetch_add(1, Ordering::Relaxed);
        Ok((id, Segment::create(size)?, true))
    }

    /// Returns a segment to the pool (or lets it go, telling the host).
    pub(crate) fn give_back(&self, id: u64, s: Segment) {
        let mut free = lock(&self.segs);
        if free.len() < POOL {
            free.push((id, s));
            return;
        }
        drop(free);
        drop(s);
        let _ = self.tx.send(&Msg::Forget { seg: id }, None);
    }
}

fn read_loop(mut rx: Rx, replies: Arc<(Mutex<Replies>, Condvar)>, host: u32) {
    let why = loop {
        match rx.recv() {
            Ok(Some(Msg::Done { id, result })) => {
                lock(&replies.0).done.insert(id, result);
                replies.1.notify_all();
            }
            Ok(Some(Msg::SplitDone { seq, result })) => {
                lock(&replies.0).splits.insert(seq, result);
                replies.1.notify_all();
            }
            Ok(Some(Msg::OneSidedDone { id, result })) => {
                lock(&replies.0).one_sided.insert(id, result);
                replies.1.notify_all();
            }
            Ok(Some(_)) => {}
            Ok(None) => break text!("rank 0's process {host}, which hosts the mock communicator, exited or closed the connection"),
            Err(e) => break text!("the mock host sent a malformed message: {e}"),
        }
    };
    lock(&replies.0).broken = Some(why);
    replies.1.notify_all();
}

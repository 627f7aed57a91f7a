//! The rank side: a connection to the host per communicator rank, and the run of a stream's
//! batch through it (copy in, send, wait, copy out).

use super::chan::{Rx, Segment, Tx};
use super::wire::{Msg, WireJob};
use super::{ChildSpec, ProcId};
use crate::job::Job;
use crate::shared::CommShared;
use crate::sync::{lock, wait_for};
use oxccl_core::text::Text;
use oxccl_core::{text, Error, OpKind, ReduceOp, Result, Scalar};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often a rank waiting for the host re-checks whether it was aborted.
const TICK: Duration = Duration::from_millis(5);
/// Segments kept for reuse per connection.
const POOL: usize = 4;
/// The smallest segment made (small ops share one mapping).
const MIN_SEGMENT: usize = 1 << 20;
/// How much longer than its limit a joining rank waits for the host's answer: the host times
/// the join out first and says which ranks are missing.
const ANSWER_SLACK: Duration = Duration::from_secs(2);

/// What the reader thread fills in: batch outcomes, and why the connection ended.
#[derive(Default)]
struct Replies {
    done: HashMap<u64, Result<()>>,
    /// Answers to this rank's split calls, by split sequence number.
    splits: HashMap<u64, Result<Option<ChildSpec>>>,
    broken: Option<Text>,
}

/// One rank's connection to the host.
pub(crate) struct Link {
    tx: Tx,
    replies: Arc<(Mutex<Replies>, Condvar)>,
    next_batch: AtomicU64,
    next_seg: AtomicU64,
    /// Free segments, by id.
    segs: Mutex<Vec<(u64, Segment)>>,
    dead_sent: AtomicBool,
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
        match rx.recv() {
            Ok(Some(Msg::Welcome(r))) => r?,
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
    fn segment(&self, len: usize) -> Result<(u64, Segment, bool)> {
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
    fn give_back(&self, id: u64, s: Segment) {
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
            Ok(Some(_)) => {}
            Ok(None) => break text!("rank 0's process {host}, which hosts the mock communicator, exited or closed the connection"),
            Err(e) => break text!("the mock host sent a malformed message: {e}"),
        }
    };
    lock(&replies.0).broken = Some(why);
    replies.1.notify_all();
}

/// A copy between the caller's memory and the segment.
struct Copy {
    user: usize,
    off: usize,
    bytes: usize,
}

/// What `post` sent and `finish` completes.
struct Posted {
    link: Arc<super::remote::Link>,
    id: u64,
    seg: (u64, Segment),
    outs: Vec<Copy>,
    jobs: Vec<Job>,
}

/// Whether the op writes the whole of `recv` on this rank (else its recv span is copied in
/// first, so the parts it leaves alone come back unchanged).
fn writes_all(kind: OpKind) -> bool {
    matches!(kind, OpKind::AllReduce | OpKind::Broadcast | OpKind::Recv)
}

/// Whether the op writes `recv` at all on `rank`.
fn writes(kind: OpKind, rank: u32, root: Option<u32>) -> bool {
    match kind {
        OpKind::Send | OpKind::Barrier => false,
        OpKind::Reduce | OpKind::Gather => root == Some(rank),
        _ => true,
    }
}

fn align(x: usize) -> usize {
    x.saturating_add(63) & !63
}

/// Runs the jobs whose communicators span processes (all of `jobs`): posts every batch (one
/// per connection), then waits for each, as the in-process executor posts then waits.
pub(crate) fn run_batch(jobs: Vec<Job>) {
    let mut groups: Vec<(Arc<Link>, Vec<Job>)> = Vec::new();
    for job in jobs {
        let Some(link) = job.comm.link.get().cloned() else {
            job.comm.job_done(job.rank);
            continue;
        };
        if !job.comm.alive(job.rank) {
            job.comm.job_done(job.rank);
            continue;
        }
        match groups.iter_mut().find(|(l, _)| Arc::ptr_eq(l, &link)) {
            Some((_, v)) => v.push(job),
            None => groups.push((link, vec![job])),
        }
    }
    let mut posted = Vec::new();
    for (link, jobs) in groups {
        match post(link, jobs) {
            Ok(p) => posted.push(p),
            Err((jobs, e)) => end(jobs, Err(e)),
        }
    }
    for p in posted {
        finish(p);
    }
}

/// Fails each job's rank with `res`'s error (first error wins), and counts the jobs done.
fn end(jobs: Vec<Job>, res: Result<()>) {
    for j in jobs {
        if let Err(e) = &res {
            j.comm.fail(j.rank, e.clone());
        }
        j.comm.job_done(j.rank);
    }
}

thread_local! {
    /// This stream thread's key on the host (its own host stream keeps the order).
    static STREAM: u64 = {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    };
}

fn post(link: Arc<Link>, jobs: Vec<Job>) -> std::result::Result<Posted, (Vec<Job>, Error)> {
    // Lay out every span: (user address, bytes, copy in?) per region, offsets in the segment.
    let mut total = 0usize;
    let mut ins: Vec<Copy> = Vec::new();
    let mut outs: Vec<Copy> = Vec::new();
    let mut wire = Vec::with_capacity(jobs.len());
    for j in &jobs {
        let mut d = j.desc.clone();
        let es = d.elem();
        let sb = d.send.len.saturating_mul(es);
        let rb = d.recv.len.saturating_mul(es);
        let overlap = sb > 0
            && rb > 0
            && d.send.addr < d.recv.addr.saturating_add(rb)
            && d.recv.addr < d.send.addr.saturating_add(sb);
        if overlap {
            // In place (or overlapping): one region for both, so the op sees the same aliasing.
            let lo = d.send.addr.min(d.recv.addr);
            let hi = d
                .send
                .addr
                .saturating_add(sb)
                .max(d.recv.addr.saturating_add(rb));
            ins.push(Copy {
                user: lo,
                off: total,
                bytes: hi - lo,
            });
            d.send.addr = total + (d.send.addr - lo);
            d.recv.addr = total + (d.recv.addr - lo);
            total = align(total + (hi - lo));
        } else {
            if sb > 0 {
                ins.push(Copy {
                    user: d.send.addr,
                    off: total,
                    bytes: sb,
                });
                d.send.addr = total;
                total = align(total + sb);
            }
            if rb > 0 {
                if !writes_all(d.kind) {
                    ins.push(Copy {
                        user: d.recv.addr,
                        off: total,
                        bytes: rb,
                    });
                }
                d.recv.addr = total;
                total = align(total + rb);
            }
        }
        if rb > 0 && writes(d.kind, j.rank, d.root) {
            outs.push(Copy {
                user: j.desc.recv.addr,
                off: d.recv.addr,
                bytes: rb,
            });
        }
        if let Some(ReduceOp::PreMulSum(Scalar::Device { addr })) = d.op {
            ins.push(Copy {
                user: addr,
                off: total,
                bytes: es,
            });
            d.op = Some(ReduceOp::PreMulSum(Scalar::Device { addr: total }));
            total = align(total + es);
        }
        wire.push(WireJob {
            desc: d,
            seq: j.seq,
            index: j.index,
            fault: j.fault,
        });
    }
    let (seg_id, seg, new) = match link.segment(total.max(64)) {
        Ok(s) => s,
        Err(e) => return Err((jobs, e)),
    };
    for c in &ins {
        // SAFETY: `c.user..+bytes` is a span of the caller's buffers, validated by
        // `check::op` at issue and kept valid until the stream passes the op (the contract of
        // `issue`); the segment span lies inside the mapping (the layout above sized it).
        unsafe {
            std::ptr::copy_nonoverlapping(
                c.user as *const u8,
                (seg.base() + c.off) as *mut u8,
                c.bytes,
            )
        };
    }
    let id = link.next_batch.fetch_add(1, Ordering::Relaxed);
    let msg = Msg::Batch {
        id,
        stream: STREAM.with(|s| *s),
        seg: seg_id,
        seg_len: seg.len as u64,
        jobs: wire,
    };
    let fd = new.then(|| seg.fd.as_raw_fd());
    if let Err(e) = link.tx.send(&msg, fd) {
        let why = lock(&link.replies.0).broken.clone();
        let e = why.map_or(e, |detail| Error::Remote { detail });
        return Err((jobs, e));
    }
    Ok(Posted {
        link,
        id,
        seg: (seg_id, seg),
        outs,
        jobs,
    })
}

/// The first of `jobs` whose own rank is dead (aborted meanwhile), as (comm, rank).
fn aborted(jobs: &[Job]) -> Option<(Arc<CommShared>, u32)> {
    jobs.iter()
        .find(|j| {
            lock(&j.comm.hub)
                .dead
                .get(j.rank as usize)
                .is_some_and(|d| d.is_some())
        })
        .map(|j| (j.comm.clone(), j.rank))
}

fn finish(p: Posted) {
    let Posted {
        link,
        id,
        seg,
        outs,
        jobs,
    } = p;
    let outcome = {
        let (m, cv) = &*link.replies;
        let mut g = lock(m);
        loop {
            if let Some(r) = g.done.remove(&id) {
                break Some(r);
            }
            if let Some(why) = &g.broken {
                break Some(Err(Error::Remote {
                    detail: why.clone(),
                }));
            }
            if aborted(&jobs).is_some() {
                break None;
            }
            g = wait_for(cv, g, TICK);
        }
    };
    match outcome {
        Some(Ok(())) => {
            for c in &outs {
                // SAFETY: the host finished with the segment (its Done came); `c.user` is the
                // caller's validated recv span, untouched by anyone until the stream moves on.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (seg.1.base() + c.off) as *const u8,
                        c.user as *mut u8,
                        c.bytes,
                    )
                };
            }
            link.give_back(seg.0, seg.1);
            end(jobs, Ok(()));
        }
        Some(Err(e)) => {
            link.give_back(seg.0, seg.1);
            end(jobs, Err(e));
        }
        None => {
            // Aborted while the host still runs the batch: the segment is not reused (the host
            // may write it yet); the jobs end with the rank's own error.
            link.tx.send_now(&Msg::Forget { seg: seg.0 });
            drop(seg);
            for j in jobs {
                j.comm.job_done(j.rank);
            }
        }
    }
}

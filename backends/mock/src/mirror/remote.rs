//! The rank side: the run of a stream's batch through the rank's [`Link`] to the host (copy
//! in, send, wait, copy out).

use crate::job::Job;
use crate::lobby::Lobby;
use crate::shared::CommShared;
use crate::sync::{lock, wait_for};
use crate::transport::chan::Segment;
use crate::transport::link::Link;
use crate::transport::proc_id::ProcId;
use crate::transport::wire::{Msg, WireJob};
use oxccl_core::{Error, OpKind, ReduceOp, Result, Scalar};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a rank waiting for the host re-checks whether it was aborted.
const TICK: Duration = Duration::from_millis(5);

/// A copy between the caller's memory and the segment.
struct Copy {
    user: usize,
    off: usize,
    bytes: usize,
}

/// What `post` sent and `finish` completes.
struct Posted {
    link: Arc<Link>,
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

/// Joins the communicator `pid` hosts as `rank` of `size`, from this process: a mirror of the
/// rank with `lobby`'s settings whose cross-rank steps run on the host (see [`crate::procs`]).
/// Returns once every rank joined (or `limit` passed).
pub(crate) fn join(
    lobby: &Lobby,
    pid: &ProcId,
    rank: u32,
    size: u32,
    nonblocking: bool,
    limit: Duration,
) -> Result<Arc<CommShared>> {
    let link = Link::connect(pid, rank, size, limit)?;
    let mirror = lobby.mirror(rank, size, nonblocking);
    if link.pids.len() == size as usize {
        *lock(&mirror.pids) = link.pids.clone();
    }
    let _ = mirror.token.set(pid.token);
    let _ = mirror.link.set(Arc::new(link));
    Ok(mirror)
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

//! What a stream does with a batch of jobs (one op, or one stream's share of a group): first
//! post every op (joining collectives, sending eagerly), then wait for each. Posting before
//! waiting is what makes grouped p2p rings and one thread driving every rank free of deadlock.

use crate::fault::FaultKind;
use crate::job::Job;
use crate::stream::StreamShared;
use oxccl_core::{OpKind, Result};
use std::sync::Arc;

/// Hands `jobs` to `stream` as one task.
/// A capturing stream records them instead (see `capture`).
pub(crate) fn submit(stream: &Arc<StreamShared>, jobs: Vec<Job>) -> Result<()> {
    let Some(jobs) = crate::capture::intercept(&stream.rec, jobs) else {
        return Ok(());
    };
    for j in &jobs {
        j.comm.job_started(j.rank);
    }
    let counted: Vec<_> = jobs.iter().map(|j| (j.comm.clone(), j.rank)).collect();
    stream
        .push(Box::new(move || run_batch(jobs)))
        .inspect_err(|_| {
            for (c, r) in counted {
                c.job_done(r);
            }
        })
}

fn run_batch(jobs: Vec<Job>) {
    // Communicators spanning processes run their share through the host (see `procs`).
    let (remote, jobs): (Vec<Job>, Vec<Job>) =
        jobs.into_iter().partition(|j| j.comm.link.get().is_some());
    if !remote.is_empty() {
        crate::mirror::remote::run_batch(remote);
    }
    let mut posted = Vec::with_capacity(jobs.len());
    for job in jobs {
        if !job.comm.alive(job.rank) {
            // A dead communicator's queued work is dropped (its error is already recorded).
            job.comm.job_done(job.rank);
            continue;
        }
        match job.fault {
            Some(FaultKind::Delay(d)) => {
                job.comm.sleep_unless_dead(job.rank, d);
                if !job.comm.alive(job.rank) {
                    // Aborted during the delay: the op never joins (peers see the rank gone).
                    job.comm.job_done(job.rank);
                    continue;
                }
            }
            Some(FaultKind::Hang) => {
                job.comm.block_until_dead(job.rank);
                job.comm.job_done(job.rank);
                continue;
            }
            Some(FaultKind::Lose) => {
                job.comm.lose(job.rank, job.index);
                job.comm.job_done(job.rank);
                continue;
            }
            Some(FaultKind::Fail(_)) | None => {}
        }
        if let Err(e) = post(&job) {
            // The op could not be posted (the mock could not copy a send): the rank fails.
            job.comm.fail(job.rank, e);
            job.comm.job_done(job.rank);
            continue;
        }
        posted.push(job);
    }
    for job in posted {
        if let Err(e) = wait(&job) {
            job.comm.fail(job.rank, e);
        }
        job.comm.job_done(job.rank);
    }
}

fn post(job: &Job) -> Result<()> {
    let d = &job.desc;
    match d.kind {
        // SAFETY: `issue`'s caller promised the buffers stay valid until the stream is past
        // the op, which it is not before `wait` returns.
        OpKind::Send => unsafe {
            job.comm
                .p2p_send(job.rank, d.peer.unwrap_or(0), job.seq, d.clone())
        },
        OpKind::Recv => Ok(()),
        _ => {
            // SAFETY: as above.
            unsafe { job.comm.coll_post(job.rank, job.seq, d.clone()) };
            Ok(())
        }
    }
}

fn wait(job: &Job) -> Result<()> {
    let d = &job.desc;
    match d.kind {
        OpKind::Send => Ok(()),
        // SAFETY: as in `post`.
        OpKind::Recv => unsafe { job.comm.p2p_recv(job.rank, d.peer.unwrap_or(0), job.seq, d) },
        _ => job.comm.coll_wait(job.rank, job.seq),
    }
}

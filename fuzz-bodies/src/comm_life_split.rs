//! `comm_life`'s split event: every rank still held splits into one color (blocking ranks on
//! threads of their own, since each waits for the others; nonblocking ranks one after the other,
//! their children completed by polling). A parent whose ranks are all ready gives every rank a
//! ready child of the same size and order, on which an all-reduce runs; a parent with a dead
//! rank (failed, aborted, finalized, destroyed) gives no child: its dead ranks are refused with
//! their first cause, and its ready ranks end with a remote error (blocking: the rank fails
//! too; nonblocking: the child's poll reports it), never a hang.

use super::comm_life_model::{assert_refused, AsyncErr, Life, Model};
use super::comm_life_world::{all_reduce_bufs, all_reduce_op, all_reduce_sum, Slot, BOUND};
use oxccl_core::{CommConfig, Communicator, Error, Progress, Result};
use oxccl_mock::{MockComm, MockStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Every rank held calls split (color 0, key = its rank); checked against the model.
pub(crate) fn split(w: &mut [Slot], m: &mut Model) {
    // A rank still initializing or finalizing refuses while alive: the others would wait for
    // it forever (as NCCL's would). Not an event this target makes.
    if m.ranks
        .iter()
        .any(|r| matches!(r.life, Life::Init(_) | Life::Finalizing))
    {
        return;
    }
    let n = w.len();
    let nonblocking = m.nonblocking.is_some();
    let cfg = CommConfig::new().blocking(!nonblocking);
    let all_ready = m.ranks.iter().all(|r| r.life == Life::Ready);
    let results = if nonblocking {
        w.iter()
            .map(|s| s.comm.as_ref().map(|c| c.split(Some(0), rank_key(s), &cfg)))
            .collect()
    } else {
        blocking_splits(w, &cfg)
    };
    let mut children = Vec::new();
    for (r, res) in results.into_iter().enumerate() {
        let Some(res) = res else { continue };
        let rk = m.ranks[r].clone();
        if rk.life != Life::Ready {
            match res {
                Err(e) => assert_refused(&e, &rk, "split"),
                Ok(_) => panic!("split accepted on rank {r}, {:?}", rk.life),
            }
            continue;
        }
        match (all_ready, nonblocking, res) {
            (true, _, Ok(Some(child))) => children.push((r, child)),
            (false, false, Err(Error::Remote { .. })) => {
                m.fail(r, AsyncErr::Remote, "remote failure")
            }
            (false, true, Ok(Some(child))) => {
                // The rendezvous cannot complete: the child's first poll says why.
                let got = child.poll();
                assert!(
                    matches!(got, Err(Error::Remote { .. })),
                    "the child of a parent with a dead rank polled: {got:?}"
                );
            }
            (_, _, res) => panic!(
                "split of rank {r} (every rank ready: {all_ready}, nonblocking: {nonblocking}): {:?}",
                res.map(|c| c.map(|c| c.state()))
            ),
        }
    }
    if all_ready {
        assert_eq!(children.len(), n, "a child for every rank");
        check_children(children, n);
    }
}

fn rank_key(s: &Slot) -> u32 {
    s.comm.as_ref().map_or(0, |c| c.rank())
}

/// Blocking splits, one thread per rank held (each waits for the others); bounded.
fn blocking_splits(w: &mut [Slot], cfg: &CommConfig) -> Vec<Option<Result<Option<MockComm>>>> {
    let (tx, rx) = mpsc::channel();
    let mut out: Vec<Option<Result<Option<MockComm>>>> = w.iter().map(|_| None).collect();
    let mut waiting = 0;
    for (r, s) in w.iter_mut().enumerate() {
        let Some(comm) = s.comm.take() else { continue };
        let (tx, cfg) = (tx.clone(), cfg.clone());
        waiting += 1;
        std::thread::spawn(move || {
            let got = comm.split(Some(0), r as u32, &cfg);
            let _ = tx.send((r, comm, got));
        });
    }
    let start = Instant::now();
    for _ in 0..waiting {
        let left = BOUND.saturating_sub(start.elapsed());
        let Ok((r, comm, got)) = rx.recv_timeout(left) else {
            panic!("hang: a blocking split did not return within {BOUND:?}");
        };
        w[r].comm = Some(comm);
        out[r] = Some(got);
    }
    out
}

/// Every child is (or becomes, polled) ready with its parent's rank and size, and an
/// all-reduce on them gives the sum.
fn check_children(children: Vec<(usize, MockComm)>, n: usize) {
    let start = Instant::now();
    for (r, c) in &children {
        while c.poll().expect("a child of a ready parent") == Progress::InProgress {
            assert!(start.elapsed() < BOUND, "hang: child {r} stays in progress");
            std::thread::yield_now();
        }
        assert_eq!(
            (c.rank(), c.size()),
            (*r as u32, n as u32),
            "child of rank {r}"
        );
    }
    let mut bufs: Vec<_> = children.iter().map(|(r, _)| all_reduce_bufs(*r)).collect();
    let streams: Vec<MockStream> = children
        .iter()
        .map(|_| MockStream::new().expect("a stream"))
        .collect();
    for (((_, c), b), s) in children.iter().zip(bufs.iter_mut()).zip(&streams) {
        // SAFETY: the buffers outlive the streams' work (waited for below, else leaked).
        let got = unsafe { c.issue(&all_reduce_op(b), s) };
        assert!(got.is_ok(), "all-reduce on a child: {got:?}");
    }
    for s in &streams {
        while !s.query() {
            if start.elapsed() >= BOUND {
                std::mem::forget(bufs);
                panic!("hang: an all-reduce on the children never ends");
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    for (b, (r, _)) in bufs.iter().zip(&children) {
        assert_eq!(*b.1, all_reduce_sum(n), "all-reduce on child {r}");
    }
    drop(children);
    drop(streams);
}

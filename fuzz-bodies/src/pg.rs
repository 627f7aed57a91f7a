//! Differential: arbitrary programs of collectives and point-to-point shifts (every rank sends
//! to the rank `d` ahead and receives from the rank `d` behind), single or in coalescing blocks, with
//! subgroups split off on the way, run by the process group (`ProcessGroup<MockBackend>`,
//! ranks as threads, a `MemStore`) on 1–8 ranks, against a host reference computed here. A step may be mismatched (one rank gives another
//! count): then every rank must fail that step with `Error::Mismatch`, and nothing may hang
//! (every wait is bounded; the harness gives up after a deadline and reports a hang).

use arbitrary::{Arbitrary, Unstructured};
use oxccl::mock::MockBackend;
use oxccl::pg::{P2pOp, PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl_core::{Device, Error, ReduceOp};
use oxccl_rules::env::ErrorHandling;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// The bound on any wait inside the group, and the harness's deadline for a whole program.
const WAIT: Duration = Duration::from_secs(10);
const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Op {
    AllReduce {
        len: u8,
    },
    Broadcast {
        root: u8,
        len: u8,
    },
    AllGather {
        len: u8,
    },
    ReduceScatter {
        len: u8,
    },
    /// Send to the rank `d` ahead, receive from the rank `d` behind (`d` from `by`, never 0).
    Shift {
        by: u8,
        len: u8,
    },
}

/// The distance of a shift among `n > 1` ranks: 1 to n - 1.
fn distance(by: u8, n: u32) -> u32 {
    1 + u32::from(by) % (n - 1)
}

#[derive(Debug, Clone, Arbitrary)]
struct Step {
    ops: Vec<Op>,
    /// Run `ops` in one coalescing block (else one by one, each waited).
    coalesced: bool,
    /// A rank that gives a count one larger for the step's first operation.
    mismatch: Option<u8>,
    /// First split off a subgroup of the ranks whose bit is set (every rank calls
    /// `new_group`), and all-reduce each member's rank + 1 in it.
    split: Option<u8>,
}

#[derive(Debug, Arbitrary)]
struct Input {
    ranks: u8,
    steps: Vec<Step>,
}

/// Element `i` of rank `r`'s input for operation `k` of step `s`: small integers, so f32
/// sums are exact.
fn value(r: u32, s: usize, k: usize, i: usize) -> f32 {
    ((r as usize * 7 + s * 3 + k * 5 + i) % 17) as f32
}

fn len_of(l: u8) -> usize {
    usize::from(l % 6) + 1
}

/// The reference: what rank `r` of `n` holds after operation `op` (`k` of step `s`).
fn expected(op: Op, n: u32, r: u32, s: usize, k: usize) -> Vec<f32> {
    match op {
        Op::AllReduce { len } => (0..len_of(len))
            .map(|i| (0..n).map(|q| value(q, s, k, i)).sum())
            .collect(),
        Op::Broadcast { root, len } => {
            let root = u32::from(root) % n;
            (0..len_of(len)).map(|i| value(root, s, k, i)).collect()
        }
        Op::AllGather { len } => (0..n)
            .flat_map(|q| (0..len_of(len)).map(move |i| value(q, s, k, i)))
            .collect(),
        Op::ReduceScatter { len } => {
            let m = len_of(len);
            (0..m)
                .map(|i| (0..n).map(|q| value(q, s, k, r as usize * m + i)).sum())
                .collect()
        }
        // One rank keeps its own input (nothing is sent).
        Op::Shift { len, .. } if n == 1 => (0..len_of(len)).map(|i| value(r, s, k, i)).collect(),
        Op::Shift { by, len } => {
            let from = (r + n - distance(by, n)) % n;
            (0..len_of(len)).map(|i| value(from, s, k, i)).collect()
        }
    }
}

/// What one rank saw of one step: each operation's result, or the step's error.
type Seen = Result<Vec<Vec<f32>>, Error>;

fn run_rank(pg: &ProcessGroup<MockBackend>, steps: &[Step], r: u32) -> Vec<Seen> {
    let n = pg.size();
    let mut seen = Vec::new();
    for (s, step) in steps.iter().enumerate() {
        let res = run_step(pg, step, n, r, s);
        let failed = res.is_err();
        seen.push(res);
        if failed {
            break;
        }
    }
    seen
}

/// The members of a split by `mask` among `n` ranks.
fn members(mask: u8, n: u32) -> Vec<u32> {
    (0..n).filter(|q| mask & (1 << q) != 0).collect()
}

/// The split phase of a step: `Ok(Some(sum))` for a member, `Ok(None)` otherwise.
fn run_split(
    pg: &ProcessGroup<MockBackend>,
    mask: u8,
    n: u32,
    r: u32,
) -> oxccl_core::Result<Option<f32>> {
    let ranks = members(mask, n);
    let sub = pg.new_group(&ranks, None)?;
    if sub.rank().is_none() {
        return Ok(None);
    }
    let mut b = pg.upload(&[r as f32 + 1.0])?;
    sub.all_reduce(&mut b, ReduceOp::Sum)?.wait_timeout(WAIT)?;
    Ok(pg.download(&b)?.first().copied())
}

fn run_step(pg: &ProcessGroup<MockBackend>, step: &Step, n: u32, r: u32, s: usize) -> Seen {
    if let Some(mask) = step.split {
        let got = run_split(pg, mask, n, r)?;
        let ranks = members(mask, n);
        if ranks.contains(&r) {
            let want: f32 = ranks.iter().map(|&q| q as f32 + 1.0).sum();
            assert_eq!(
                got,
                Some(want),
                "rank {r}: the all-reduce in subgroup {ranks:?}"
            );
        } else {
            assert_eq!(got, None, "rank {r} is no member of {ranks:?}");
        }
    }
    // Inputs and outputs of every operation, made first.
    let mut bufs = Vec::new();
    for (k, op) in step.ops.iter().enumerate() {
        let extra = usize::from(k == 0 && step.mismatch.map(|m| u32::from(m) % n) == Some(r));
        // A mismatched rank is consistent in itself (its own checks pass): only the ranks
        // disagree.
        let (in_len, out_len) = match *op {
            Op::AllReduce { len } | Op::Broadcast { len, .. } => (len_of(len) + extra, 0),
            Op::AllGather { len } => {
                let m = len_of(len) + extra;
                (m, m * n as usize)
            }
            Op::ReduceScatter { len } => {
                let m = len_of(len) + extra;
                (m * n as usize, m)
            }
            Op::Shift { len, .. } => (len_of(len), len_of(len)),
        };
        let data: Vec<f32> = (0..in_len).map(|i| value(r, s, k, i)).collect();
        let send = pg.upload(&data)?;
        let recv = pg.alloc_zeros::<f32>(out_len.max(1))?;
        bufs.push((send, recv));
    }
    if step.coalesced {
        let work = pg.coalesced(|c| {
            for (op, (send, recv)) in step.ops.iter().zip(bufs.iter_mut()) {
                match *op {
                    Op::AllReduce { .. } => c.all_reduce(send, ReduceOp::Sum)?,
                    Op::Broadcast { root, .. } => c.broadcast(send, u32::from(root) % n)?,
                    Op::AllGather { .. } => c.all_gather(send, recv)?,
                    Op::ReduceScatter { .. } => c.reduce_scatter(send, recv, ReduceOp::Sum)?,
                    Op::Shift { .. } if n == 1 => {}
                    Op::Shift { by, .. } => {
                        let d = distance(by, n);
                        c.send(send, (r + d) % n)?;
                        c.recv(recv, (r + n - d) % n)?;
                    }
                }
            }
            Ok(())
        })?;
        work.wait_timeout(WAIT)?;
    } else {
        for (op, (send, recv)) in step.ops.iter().zip(bufs.iter_mut()) {
            let work = match *op {
                Op::AllReduce { .. } => pg.all_reduce(send, ReduceOp::Sum)?,
                Op::Broadcast { root, .. } => pg.broadcast(send, u32::from(root) % n)?,
                Op::AllGather { .. } => pg.all_gather(send, recv)?,
                Op::ReduceScatter { .. } => pg.reduce_scatter(send, recv, ReduceOp::Sum)?,
                Op::Shift { .. } if n == 1 => continue,
                Op::Shift { by, .. } => {
                    let d = distance(by, n);
                    pg.batch_isend_irecv(&mut [
                        P2pOp::Send(send, (r + d) % n),
                        P2pOp::Recv(recv, (r + n - d) % n),
                    ])?
                }
            };
            work.wait_timeout(WAIT)?;
        }
    }
    let mut out = Vec::new();
    for (op, (send, recv)) in step.ops.iter().zip(&bufs) {
        out.push(match op {
            Op::AllReduce { .. } | Op::Broadcast { .. } => pg.download(send)?,
            Op::Shift { .. } if n == 1 => pg.download(send)?,
            Op::AllGather { .. } | Op::ReduceScatter { .. } | Op::Shift { .. } => {
                pg.download(recv)?
            }
        });
    }
    Ok(out)
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let Ok(mut input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let n = u32::from(input.ranks % 8) + 1;
    // Bounded work per input: a few steps of a few operations.
    input.steps.truncate(4);
    for st in &mut input.steps {
        st.ops.truncate(4);
        // A mismatch is made on the step's first operation, and only a collective's is seen
        // by every rank (a shift's sizes are the pair's business).
        if n == 1 || !matches!(st.ops.first(), Some(op) if !matches!(op, Op::Shift { .. })) {
            st.mismatch = None;
        }
        // A subgroup of at least one rank.
        if st.split.is_some_and(|m| members(m, n).is_empty()) {
            st.split = None;
        }
    }
    let steps = Arc::new(input.steps);
    let backend = MockBackend::new();
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let (tx, rx) = mpsc::channel();
    for r in 0..n {
        let (backend, store, steps, tx) =
            (backend.clone(), store.clone(), steps.clone(), tx.clone());
        std::thread::spawn(move || {
            let opts = PgOptions {
                timeout: WAIT,
                device: Device(r),
                error_handling: ErrorHandling::CleanUpOnly,
                watchdog: false,
                ..PgOptions::default()
            };
            // A failed check inside a rank is reported, not mistaken for a hang.
            let seen =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match ProcessGroup::new(
                    backend, store, r, n, opts,
                ) {
                    Ok(pg) => run_rank(&pg, &steps, r),
                    Err(e) => vec![Err(e)],
                }))
                .map_err(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                });
            let _ = tx.send((r, seen));
        });
    }
    drop(tx);
    let mut all: Vec<Option<Vec<Seen>>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let (r, seen) = rx
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("a rank hung: {n} ranks, {steps:?}"));
        match seen {
            Ok(seen) => all[r as usize] = Some(seen),
            Err(why) => panic!("rank {r}: {why}"),
        }
    }
    for (r, seen) in all.into_iter().enumerate() {
        let seen = seen.expect("every rank reported");
        let r = r as u32;
        for (s, got) in seen.iter().enumerate() {
            let step = &steps[s];
            match (step.mismatch, got) {
                (Some(_), Err(Error::Mismatch { .. })) => {}
                (Some(_), other) => panic!("rank {r} step {s} mismatched, got {other:?}: {step:?}"),
                (None, Ok(values)) => {
                    for (k, (op, v)) in step.ops.iter().zip(values).enumerate() {
                        assert_eq!(
                            v,
                            &expected(*op, n, r, s, k),
                            "rank {r} step {s} op {k} {op:?}"
                        );
                    }
                }
                (None, Err(e)) => panic!("rank {r} step {s} failed: {e:?}: {step:?}"),
            }
        }
        // A rank stops at the first failed step, and only there.
        let stop = steps.iter().position(|st| st.mismatch.is_some());
        assert_eq!(seen.len(), stop.map_or(steps.len(), |i| i + 1), "rank {r}");
    }
}

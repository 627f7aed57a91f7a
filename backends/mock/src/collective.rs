//! The semantics of every collective on host memory, given all ranks' calls at once.

use crate::arith::{reduce, Red};
use crate::memory::{read, view, write};
use crate::mismatch;
use crate::op_desc::OpDesc;
use oxccl_core::{OpKind, ReduceOp, Result, Scalar};

fn red_of(op: Option<ReduceOp>) -> Red {
    match op {
        Some(ReduceOp::Prod) => Red::Prod,
        Some(ReduceOp::Min) => Red::Min,
        Some(ReduceOp::Max) => Red::Max,
        Some(ReduceOp::Avg) => Red::Avg,
        Some(ReduceOp::PreMulSum(_)) => Red::PreMulSum,
        _ => Red::Sum,
    }
}

/// Each rank's premul-sum factor as one element of the buffer's type.
///
/// # Safety
/// A device-scalar address must be readable for one element (the caller's promise at issue).
unsafe fn factors(arr: &[OpDesc], es: usize) -> Result<Vec<Vec<u8>>> {
    arr.iter()
        .map(|d| match d.op {
            Some(ReduceOp::PreMulSum(Scalar::Host(s))) => {
                let (b, n) = s.to_ne_bytes();
                Ok(b.get(..n).unwrap_or(&b[..]).to_vec())
            }
            // SAFETY: the device scalar is read when the op runs, as NCCL does; the caller
            // promised it stays valid until the op completes; `issue` refused a null, misaligned
            // or wrapping address, so `addr..addr + es` is a valid span.
            Some(ReduceOp::PreMulSum(Scalar::Device { addr })) => unsafe {
                read(addr, es, "premul-sum factor")
            },
            _ => Ok(Vec::new()),
        })
        .collect()
}

/// Start offsets of consecutive parts of the given lengths.
fn offsets(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0usize, |acc, c| {
            let o = *acc;
            *acc = acc.saturating_add(*c);
            Some(o)
        })
        .collect()
}

/// `v[from..from+len]` (element units of `es` bytes) or empty when out of range (never: the
/// checks made every part fit its buffer; checked arithmetic keeps it panic-free regardless).
fn part(v: &[u8], from: usize, len: usize, es: usize) -> &[u8] {
    let range = from
        .checked_mul(es)
        .zip(from.checked_add(len).and_then(|e| e.checked_mul(es)));
    range.and_then(|(a, b)| v.get(a..b)).unwrap_or(&[])
}

/// Checks that the ranks agree, then computes the collective and writes every output.
///
/// Errors: a mismatch between the ranks, or `Backend { SystemError }` when the mock cannot
/// allocate its copies (nothing is written then).
///
/// # Safety
/// Every buffer of `arr` must be valid host memory as described (the contract of `issue`), and
/// no rank may touch its buffers until this returns (each rank's stream is blocked in the op).
pub(crate) unsafe fn run(arr: &[OpDesc], size: u32) -> Result<()> {
    mismatch::check(arr)?;
    let Some(first) = arr.first() else {
        return Ok(());
    };
    let Some(dt) = first.dtype else { return Ok(()) };
    let es = dt.size();
    let n = size as usize;
    // SAFETY (for the closure's callers): every read is of a rank's own `send` span, which
    // `check::op` validated on that rank (non-null, at most isize::MAX bytes, not wrapping), so
    // the product does not saturate.
    let snap = |d: &OpDesc| {
        // SAFETY: as said above: a span `check::op` validated on its rank.
        unsafe { read(d.send.addr, d.send.len.saturating_mul(es), "send") }
    };
    let snap_all = || arr.iter().map(snap).collect::<Result<Vec<Vec<u8>>>>();
    // What each rank receives: one result for all, or a part per rank (borrowed from `owned`).
    let owned: Vec<Vec<u8>>;
    let mut outs: Vec<Option<&[u8]>> = vec![None; n];
    match first.kind {
        OpKind::AllReduce if crate::fused::applies(arr, es) => {
            // SAFETY: as for `run`; `applies` holds.
            let f = unsafe { factors(arr, es) }?;
            // SAFETY: as for `run`; `applies` holds.
            return unsafe { crate::fused::all_reduce(arr, red_of(first.op), &f, size) };
        }
        OpKind::AllReduce | OpKind::Reduce | OpKind::ReduceScatter | OpKind::ReduceScatterV => {
            // SAFETY: each rank's validated `send` span; no buffer is written before the
            // views end with this statement (the outputs are written below, after the match).
            let inputs: Vec<&[u8]> = arr
                .iter()
                .map(|d| unsafe { view(d.send.addr, d.send.len.saturating_mul(es)) })
                .collect();
            // SAFETY: as for `run`.
            let f = unsafe { factors(arr, es) }?;
            owned = vec![reduce(dt, red_of(first.op), &f, &inputs, size)?];
            drop(inputs);
            let res = owned.first().map_or(&[][..], Vec::as_slice);
            match first.kind {
                OpKind::AllReduce => outs.iter_mut().for_each(|o| *o = Some(res)),
                OpKind::Reduce => {
                    let root = first.root.unwrap_or(0) as usize;
                    if let Some(o) = outs.get_mut(root) {
                        *o = Some(res);
                    }
                }
                OpKind::ReduceScatter => {
                    let l = first.recv.len;
                    for (r, o) in outs.iter_mut().enumerate() {
                        *o = Some(part(res, r.saturating_mul(l), l, es));
                    }
                }
                _ => {
                    let offs = offsets(&first.counts);
                    for (r, o) in outs.iter_mut().enumerate() {
                        let c = first.counts.get(r).copied().unwrap_or(0);
                        *o = Some(part(res, offs.get(r).copied().unwrap_or(0), c, es));
                    }
                }
            }
        }
        OpKind::Broadcast | OpKind::Scatter => {
            let root = first.root.unwrap_or(0) as usize;
            owned = vec![arr.get(root).map(snap).transpose()?.unwrap_or_default()];
            let data = owned.first().map_or(&[][..], Vec::as_slice);
            let l = first.recv.len;
            for (r, o) in outs.iter_mut().enumerate() {
                *o = Some(if first.kind == OpKind::Broadcast {
                    data
                } else {
                    part(data, r.saturating_mul(l), l, es)
                });
            }
        }
        OpKind::AllGather | OpKind::AllGatherV | OpKind::Gather => {
            owned = vec![snap_all()?.concat()];
            let all = owned.first().map_or(&[][..], Vec::as_slice);
            if first.kind == OpKind::Gather {
                if let Some(o) = outs.get_mut(first.root.unwrap_or(0) as usize) {
                    *o = Some(all);
                }
            } else {
                outs.iter_mut().for_each(|o| *o = Some(all));
            }
        }
        OpKind::AllToAll | OpKind::AllToAllV => {
            let inputs = snap_all()?;
            let c = first.send.len / n.max(1);
            owned = (0..n)
                .map(|q| {
                    let mut v = Vec::new();
                    for (s, dp) in inputs.iter().zip(arr) {
                        if first.kind == OpKind::AllToAll {
                            v.extend_from_slice(part(s, q.saturating_mul(c), c, es));
                        } else {
                            let offs = offsets(&dp.counts);
                            let len = dp.counts.get(q).copied().unwrap_or(0);
                            v.extend_from_slice(part(
                                s,
                                offs.get(q).copied().unwrap_or(0),
                                len,
                                es,
                            ));
                        }
                    }
                    v
                })
                .collect();
            for (o, v) in outs.iter_mut().zip(&owned) {
                *o = Some(v);
            }
        }
        OpKind::Send | OpKind::Recv | OpKind::Barrier => owned = Vec::new(),
    }
    let reduced = matches!(
        first.kind,
        OpKind::AllReduce | OpKind::Reduce | OpKind::ReduceScatter | OpKind::ReduceScatterV
    );
    for (d, o) in arr.iter().zip(outs) {
        if let Some(o) = o {
            // Never more than the rank's validated `recv` span (the product does not saturate:
            // `check::op` bounded it to isize::MAX bytes).
            let bytes = d.recv.len.saturating_mul(es);
            // SAFETY: `recv` is this rank's validated output buffer; its owner waits in the op;
            // the slice is cut to the buffer's span.
            unsafe { write(d.recv.addr, o.get(..bytes).unwrap_or(o)) };
        }
    }
    if reduced {
        owned.into_iter().for_each(crate::arith::recycle);
    }
    Ok(())
}

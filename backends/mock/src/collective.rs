//! The semantics of every collective on host memory, given all ranks' calls at once.

use crate::arith::{reduce, Red};
use crate::job::OpDesc;
use crate::memory::{read, write};
use crate::mismatch;
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
unsafe fn factors(arr: &[OpDesc], es: usize) -> Vec<Vec<u8>> {
    arr.iter()
        .map(|d| match d.op {
            Some(ReduceOp::PreMulSum(Scalar::Host(s))) => {
                let (b, n) = s.to_ne_bytes();
                b[..n.min(8)].to_vec()
            }
            // SAFETY: the device scalar is read when the op runs, as NCCL does; the caller
            // promised it stays valid until the op completes.
            Some(ReduceOp::PreMulSum(Scalar::Device { addr })) => unsafe { read(addr, es) },
            _ => Vec::new(),
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

/// `v[from..from+len]` (element units of `es` bytes) or empty when out of range.
fn part(v: &[u8], from: usize, len: usize, es: usize) -> &[u8] {
    v.get(from * es..(from + len) * es).unwrap_or(&[])
}

/// Checks that the ranks agree, then computes the collective and writes every output.
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
    // SAFETY (for the closure's callers): every read is of a buffer the checks validated and
    // the semantics reads on that rank.
    let snap = |d: &OpDesc| unsafe { read(d.send.addr, d.send.len * es) };
    let mut outs: Vec<Option<Vec<u8>>> = vec![None; n];
    match first.kind {
        OpKind::AllReduce | OpKind::Reduce | OpKind::ReduceScatter | OpKind::ReduceScatterV => {
            let inputs: Vec<Vec<u8>> = arr.iter().map(snap).collect();
            // SAFETY: as for `run`.
            let f = unsafe { factors(arr, es) };
            let res = reduce(dt, red_of(first.op), &f, &inputs, size);
            match first.kind {
                OpKind::AllReduce => outs.iter_mut().for_each(|o| *o = Some(res.clone())),
                OpKind::Reduce => {
                    let root = first.root.unwrap_or(0) as usize;
                    if let Some(o) = outs.get_mut(root) {
                        *o = Some(res);
                    }
                }
                OpKind::ReduceScatter => {
                    let l = first.recv.len;
                    for (r, o) in outs.iter_mut().enumerate() {
                        *o = Some(part(&res, r * l, l, es).to_vec());
                    }
                }
                _ => {
                    let offs = offsets(&first.counts);
                    for (r, o) in outs.iter_mut().enumerate() {
                        let c = first.counts.get(r).copied().unwrap_or(0);
                        *o = Some(part(&res, offs.get(r).copied().unwrap_or(0), c, es).to_vec());
                    }
                }
            }
        }
        OpKind::Broadcast => {
            let root = first.root.unwrap_or(0) as usize;
            let data = arr.get(root).map(snap).unwrap_or_default();
            outs.iter_mut().for_each(|o| *o = Some(data.clone()));
        }
        OpKind::AllGather | OpKind::AllGatherV => {
            let all: Vec<u8> = arr.iter().flat_map(snap).collect();
            outs.iter_mut().for_each(|o| *o = Some(all.clone()));
        }
        OpKind::Gather => {
            let all: Vec<u8> = arr.iter().flat_map(snap).collect();
            if let Some(o) = outs.get_mut(first.root.unwrap_or(0) as usize) {
                *o = Some(all);
            }
        }
        OpKind::Scatter => {
            let root = first.root.unwrap_or(0) as usize;
            let data = arr.get(root).map(snap).unwrap_or_default();
            let l = first.recv.len;
            for (r, o) in outs.iter_mut().enumerate() {
                *o = Some(part(&data, r * l, l, es).to_vec());
            }
        }
        OpKind::AllToAll => {
            let inputs: Vec<Vec<u8>> = arr.iter().map(snap).collect();
            let c = first.send.len / n.max(1);
            for (q, o) in outs.iter_mut().enumerate() {
                *o = Some(
                    inputs
                        .iter()
                        .flat_map(|s| part(s, q * c, c, es).iter().copied())
                        .collect(),
                );
            }
        }
        OpKind::AllToAllV => {
            let inputs: Vec<Vec<u8>> = arr.iter().map(snap).collect();
            for (q, o) in outs.iter_mut().enumerate() {
                let mut v = Vec::new();
                for (p, dp) in arr.iter().enumerate() {
                    let offs = offsets(&dp.counts);
                    let len = dp.counts.get(q).copied().unwrap_or(0);
                    v.extend_from_slice(part(
                        &inputs[p],
                        offs.get(q).copied().unwrap_or(0),
                        len,
                        es,
                    ));
                }
                *o = Some(v);
            }
        }
        OpKind::Send | OpKind::Recv | OpKind::Barrier => {}
    }
    for (d, o) in arr.iter().zip(outs) {
        if let Some(o) = o {
            let bytes = d.recv.len * es;
            // SAFETY: `recv` is this rank's validated output buffer; its owner waits in the op.
            unsafe { write(d.recv.addr, &o[..o.len().min(bytes)]) };
        }
    }
    Ok(())
}

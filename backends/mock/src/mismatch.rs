//! Cross-rank agreement: where NCCL would hang or corrupt memory on calls that do not match,
//! the mock names what differs and every rank's value.

use crate::op_desc::OpDesc;
use oxccl_core::text::{Text, TEXT_CAPACITY};
use oxccl_core::{Error, OpKind, Result};
use std::fmt::Write;

/// "rank 0: a, rank 1: b, …", cut to fit an error's text.
fn per_rank<T: std::fmt::Display>(vals: &[T]) -> Text {
    let mut s = String::new();
    for (r, v) in vals.iter().enumerate() {
        let _ = write!(s, "{}rank {r}: {v}", if r == 0 { "" } else { ", " });
        if s.len() > TEXT_CAPACITY {
            break;
        }
    }
    oxccl_core::text::text_str(&s)
}

fn agree<T: PartialEq + std::fmt::Display>(what: &'static str, vals: Vec<T>) -> Result<()> {
    if vals.windows(2).all(|w| matches!(w, [a, b] if a == b)) {
        return Ok(());
    }
    Err(Error::Mismatch {
        what,
        detail: per_rank(&vals),
    })
}

/// A list of counts, as `[1, 2, 3]`.
struct List<'a>(&'a [usize]);

impl std::fmt::Display for List<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl PartialEq for List<'_> {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}

/// The element count every rank must agree on, per kind.
fn count(d: &OpDesc) -> usize {
    match d.kind {
        OpKind::AllReduce
        | OpKind::Reduce
        | OpKind::AllGather
        | OpKind::Gather
        | OpKind::AllToAll => d.send.len,
        OpKind::Broadcast | OpKind::ReduceScatter | OpKind::Scatter => d.recv.len,
        _ => 0,
    }
}

/// `Ok` when the ranks' descriptions of one collective (in rank order) agree.
pub(crate) fn check(arr: &[OpDesc]) -> Result<()> {
    agree("operation", arr.iter().map(|d| d.kind.name()).collect())?;
    agree(
        "dtype",
        arr.iter()
            .map(|d| d.dtype.map_or("none", |t| t.name()))
            .collect(),
    )?;
    agree(
        "op",
        arr.iter()
            .map(|d| d.op.map_or("none", |o| o.name()))
            .collect(),
    )?;
    agree(
        "root",
        arr.iter().map(|d| d.root.map_or(-1, i64::from)).collect(),
    )?;
    match arr.first().map(|d| d.kind) {
        Some(OpKind::AllGatherV | OpKind::ReduceScatterV) => {
            agree("counts", arr.iter().map(|d| List(&d.counts)).collect())
        }
        Some(OpKind::AllToAllV) => {
            for (p, dp) in arr.iter().enumerate() {
                for (q, dq) in arr.iter().enumerate() {
                    let sends = dp.counts.get(q).copied().unwrap_or(0);
                    let expects = dq.recv_counts.get(p).copied().unwrap_or(0);
                    if sends != expects {
                        return Err(Error::Mismatch {
                            what: "count",
                            detail: oxccl_core::text!("rank {p} sends {sends} to rank {q}, rank {q} expects {expects} from rank {p}"),
                        });
                    }
                }
            }
            Ok(())
        }
        _ => agree("count", arr.iter().map(count).collect()),
    }
}

/// `Ok` when a message matches the recv waiting for it.
pub(crate) fn check_p2p(send: &OpDesc, src: u32, recv: &OpDesc, dst: u32) -> Result<()> {
    if send.dtype != recv.dtype {
        return Err(Error::Mismatch {
            what: "dtype",
            detail: oxccl_core::text!(
                "send on rank {src}: {}, recv on rank {dst}: {}",
                send.dtype.map_or("none", |t| t.name()),
                recv.dtype.map_or("none", |t| t.name())
            ),
        });
    }
    if send.send.len != recv.recv.len {
        return Err(Error::Mismatch {
            what: "count",
            detail: oxccl_core::text!(
                "send on rank {src}: {}, recv on rank {dst}: {}",
                send.send.len,
                recv.recv.len
            ),
        });
    }
    Ok(())
}

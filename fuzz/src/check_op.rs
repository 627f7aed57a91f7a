//! Any operation, any communicator shape, any loaded version: the checks answer, never panic;
//! for all-reduce, broadcast, all-gather, send, recv and barrier an independent model of the
//! rules says an accepted call is valid and a refused one names an argument at fault.

use arbitrary::{Result, Unstructured};
use oxccl_core::check::{self, CheckCtx};
use oxccl_core::feature::{Feature, FeatureSet};
use oxccl_core::state::group::OpSummary;
use oxccl_core::{
    CommOp, DataType, Error, HostScalar, RawBuf, RawBufMut, ReduceOp, Scalar, Version,
};

fn dtype(u: &mut Unstructured<'_>) -> Result<DataType> {
    // Codes past NCCL's also reach from_code: they must be None, not a panic.
    let code = u.int_in_range(-2..=14)?;
    Ok(DataType::from_code(code).unwrap_or(DataType::Float32))
}

fn reduce_op(u: &mut Unstructured<'_>) -> Result<ReduceOp> {
    Ok(match u.int_in_range(0..=9u8)? {
        0 => ReduceOp::Sum,
        1 => ReduceOp::Prod,
        2 => ReduceOp::Min,
        3 => ReduceOp::Max,
        4 => ReduceOp::Avg,
        5 => ReduceOp::PreMulSum(Scalar::Host(HostScalar::F16(u.arbitrary()?))),
        6 => ReduceOp::PreMulSum(Scalar::Host(HostScalar::Bf16(u.arbitrary()?))),
        7 => ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(u.arbitrary()?))),
        8 => ReduceOp::PreMulSum(Scalar::Host(HostScalar::F64(u.arbitrary()?))),
        _ => ReduceOp::PreMulSum(Scalar::Device {
            addr: u.arbitrary()?,
        }),
    })
}

/// Small lengths most of the time (where the rules bite), any `usize` sometimes.
fn len(u: &mut Unstructured<'_>) -> Result<usize> {
    if u.ratio(1, 4)? {
        u.arbitrary()
    } else {
        Ok(usize::from(u.int_in_range(0..=64u8)?))
    }
}

fn buf(u: &mut Unstructured<'_>) -> Result<RawBuf> {
    let addr = if u.arbitrary()? { 0 } else { u.arbitrary()? };
    Ok(RawBuf::new(addr, len(u)?))
}

fn buf_mut(u: &mut Unstructured<'_>) -> Result<RawBufMut> {
    let addr = if u.arbitrary()? { 0 } else { u.arbitrary()? };
    Ok(RawBufMut::new(addr, len(u)?))
}

fn counts(u: &mut Unstructured<'_>) -> Result<Vec<usize>> {
    let n = u.int_in_range(0..=9usize)?;
    (0..n).map(|_| len(u)).collect()
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let version = Version::new(2, u.int_in_range(0..=40)?, u.int_in_range(0..=9)?);
    let features = FeatureSet::for_version(version);
    let size = if u.ratio(1, 8)? {
        u.arbitrary()?
    } else {
        u.int_in_range(0..=9)?
    };
    let rank = if u.ratio(1, 8)? {
        u.arbitrary()?
    } else {
        u.int_in_range(0..=9)?
    };
    let ctx = CheckCtx {
        rank,
        size,
        features: &features,
    };
    let (c1, c2) = (counts(u)?, counts(u)?);
    let root_or_peer = if u.ratio(1, 8)? {
        u.arbitrary()?
    } else {
        u.int_in_range(0..=9)?
    };
    let op = match u.int_in_range(0..=13u8)? {
        0 => CommOp::AllReduce {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
            op: reduce_op(u)?,
        },
        1 => CommOp::Broadcast {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
            root: root_or_peer,
        },
        2 => CommOp::Reduce {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
            op: reduce_op(u)?,
            root: root_or_peer,
        },
        3 => CommOp::AllGather {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
        },
        4 => CommOp::ReduceScatter {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
            op: reduce_op(u)?,
        },
        5 => CommOp::AllToAll {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
        },
        6 => CommOp::AllToAllV {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
            send_counts: &c1,
            recv_counts: &c2,
        },
        7 => CommOp::Gather {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
            root: root_or_peer,
        },
        8 => CommOp::Scatter {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
            root: root_or_peer,
        },
        9 => CommOp::AllGatherV {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
            counts: &c1,
        },
        10 => CommOp::ReduceScatterV {
            send: buf(u)?,
            recv: buf_mut(u)?,
            dtype: dtype(u)?,
            op: reduce_op(u)?,
            counts: &c1,
        },
        11 => CommOp::Send {
            buf: buf(u)?,
            dtype: dtype(u)?,
            peer: root_or_peer,
        },
        12 => CommOp::Recv {
            buf: buf_mut(u)?,
            dtype: dtype(u)?,
            peer: root_or_peer,
        },
        _ => CommOp::Barrier,
    };
    let verdict = check::op(&op, &ctx);
    judge(&op, &ctx, &verdict);
    // The error's text is formatted too: Display must not panic either.
    if let Err(e) = &verdict {
        let _ = std::format!("{e}");
    }
    let s = OpSummary::of(&op);
    assert_eq!(
        (s.kind, s.numel_in, s.numel_out),
        (op.kind(), op.numel_in(), op.numel_out())
    );
    Ok(())
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let _ = run(&mut Unstructured::new(data));
}

/// An independent model of the rules for the operations it covers: the arguments a call
/// violates (as a set, so the order the checks run in does not matter) and whether it needs
/// a feature the library lacks. `None`: an operation the model does not cover.
fn violations(op: &CommOp<'_>, ctx: &CheckCtx<'_>) -> Option<(Vec<&'static str>, bool)> {
    let mut bad: Vec<&'static str> = Vec::new();
    let mut unsupported = false;
    let n = ctx.size as usize;
    if ctx.size == 0 || ctx.size > i32::MAX as u32 {
        bad.push("size");
    }
    if ctx.rank >= ctx.size {
        bad.push("rank");
    }
    let has = |f: Feature| ctx.features.require(f).is_ok();
    let dtype_ok = |dt: DataType, unsupported: &mut bool| match dt {
        DataType::Bfloat16 if !has(Feature::Bfloat16) => *unsupported = true,
        DataType::Float8E4M3 | DataType::Float8E5M2 if !has(Feature::Float8) => *unsupported = true,
        _ => {}
    };
    // A buffer: no more than isize::MAX bytes, non-null unless empty, not wrapping, aligned.
    let buf_ok = |addr: usize, len: usize, dt: DataType| {
        let sz = dt.size();
        len.checked_mul(sz)
            .filter(|b| *b <= isize::MAX as usize)
            .is_some_and(|b| (addr != 0 || len == 0) && addr.checked_add(b).is_some())
            && addr % sz == 0
    };
    // Overlapping memory is allowed only as the exact in-place layout.
    let overlaps = |a: usize, al: usize, b: usize, bl: usize, dt: DataType| {
        let sz = dt.size() as u128;
        let (a, al, b, bl) = (a as u128, al as u128 * sz, b as u128, bl as u128 * sz);
        al > 0 && bl > 0 && a < b + bl && b < a + al
    };
    let reduce_ok =
        |dt: DataType, r: &ReduceOp, bad: &mut Vec<&'static str>, unsupported: &mut bool| {
            match r {
                ReduceOp::Avg if !has(Feature::Avg) => *unsupported = true,
                ReduceOp::PreMulSum(_) if !has(Feature::PreMulSum) => *unsupported = true,
                _ => {}
            }
            // NCCL has no single-rank fp8 average.
            if matches!(r, ReduceOp::Avg) && dt.is_fp8() && ctx.size == 1 {
                bad.push("op");
            }
            if let ReduceOp::PreMulSum(s) = r {
                let float = matches!(
                    dt,
                    DataType::Float16 | DataType::Bfloat16 | DataType::Float32 | DataType::Float64
                );
                if !float {
                    bad.push("op");
                }
                match s {
                    Scalar::Host(h) if h.dtype() != dt => bad.push("scalar"),
                    Scalar::Device { addr }
                        if *addr == 0
                            || *addr % dt.size() != 0
                            || addr.checked_add(dt.size()).is_none() =>
                    {
                        bad.push("scalar")
                    }
                    _ => {}
                }
            }
        };
    match *op {
        CommOp::AllReduce {
            send,
            recv,
            dtype,
            op,
        } => {
            dtype_ok(dtype, &mut unsupported);
            reduce_ok(dtype, &op, &mut bad, &mut unsupported);
            if !buf_ok(send.addr, send.len, dtype) {
                bad.push("send");
            }
            if !buf_ok(recv.addr, recv.len, dtype) {
                bad.push("recv");
            }
            if recv.len != send.len
                || (send.addr != recv.addr
                    && overlaps(send.addr, send.len, recv.addr, recv.len, dtype))
            {
                bad.push("recv");
            }
        }
        CommOp::Broadcast {
            send,
            recv,
            dtype,
            root,
        } => {
            dtype_ok(dtype, &mut unsupported);
            if root >= ctx.size {
                bad.push("root");
            }
            if !buf_ok(recv.addr, recv.len, dtype) {
                bad.push("recv");
            }
            if ctx.rank == root {
                if !buf_ok(send.addr, send.len, dtype) || send.len != recv.len {
                    bad.push("send");
                }
                if send.addr != recv.addr
                    && overlaps(send.addr, send.len, recv.addr, recv.len, dtype)
                {
                    bad.push("recv");
                }
            }
        }
        CommOp::AllGather { send, recv, dtype } => {
            dtype_ok(dtype, &mut unsupported);
            if !buf_ok(send.addr, send.len, dtype) {
                bad.push("send");
            }
            if !buf_ok(recv.addr, recv.len, dtype) {
                bad.push("recv");
            }
            match send.len.checked_mul(n) {
                None => bad.push("send"),
                Some(whole) if whole != recv.len => bad.push("recv"),
                Some(_) => {
                    let at = (ctx.rank as u128) * (send.len as u128) * (dtype.size() as u128)
                        + recv.addr as u128;
                    if at != send.addr as u128
                        && overlaps(send.addr, send.len, recv.addr, recv.len, dtype)
                    {
                        bad.push("recv");
                    }
                }
            }
        }
        CommOp::Send { buf, dtype, peer } => {
            dtype_ok(dtype, &mut unsupported);
            if peer >= ctx.size {
                bad.push("peer");
            }
            if !buf_ok(buf.addr, buf.len, dtype) {
                bad.push("buf");
            }
        }
        CommOp::Recv { buf, dtype, peer } => {
            dtype_ok(dtype, &mut unsupported);
            if peer >= ctx.size {
                bad.push("peer");
            }
            if !buf_ok(buf.addr, buf.len, dtype) {
                bad.push("buf");
            }
        }
        CommOp::Barrier => {}
        _ => return None,
    }
    Some((bad, unsupported))
}

/// The verdict of the checks against the model's: an accepted call violates nothing, a
/// refused one names an argument the model finds at fault (or a missing feature).
fn judge(op: &CommOp<'_>, ctx: &CheckCtx<'_>, verdict: &oxccl_core::Result<()>) {
    let Some((bad, unsupported)) = violations(op, ctx) else {
        return;
    };
    match verdict {
        Ok(()) => assert!(
            bad.is_empty() && !unsupported,
            "accepted {op:?} (rank {}, size {}) though {bad:?} are wrong (unsupported: {unsupported})",
            ctx.rank,
            ctx.size
        ),
        Err(Error::InvalidArgument { arg, .. }) => assert!(
            bad.contains(arg),
            "refused {op:?} naming `{arg}`, the model finds {bad:?} at fault"
        ),
        Err(Error::Unsupported { .. }) => assert!(unsupported, "{op:?}: unsupported?"),
        Err(e) => panic!("{op:?}: refused with {e:?}"),
    }
}

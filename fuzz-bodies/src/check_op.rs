//! Any operation, any communicator shape, any loaded version: the checks answer, never panic,
//! and an independent model of the rules (`check_model`) says an accepted call is valid and a
//! refused one names an argument at fault, for every operation. The builders from NCCL's counts
//! (`build`) agree with the checks: what one returns is the operation NCCL's count means and
//! passes the check; what one refuses, the check refuses with the same error.

use super::check_model::faults;
use arbitrary::{Result, Unstructured};
use oxccl_core::build;
use oxccl_core::check::{self, CheckCtx};
use oxccl_core::feature::{Feature, FeatureSet};
use oxccl_core::state::group_call::OpSummary;
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

/// Where buffers of one call sit: near each other most of the time, so that they overlap, nest
/// and line up in place often; null or anywhere sometimes.
const BASE: usize = 0x7f00_0000_0000;

fn addr(u: &mut Unstructured<'_>) -> Result<usize> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => 0,
        1 => u.arbitrary()?,
        _ => BASE + usize::from(u.int_in_range(0..=2048u16)?),
    })
}

fn buf(u: &mut Unstructured<'_>) -> Result<RawBuf> {
    Ok(RawBuf::new(addr(u)?, len(u)?))
}

fn buf_mut(u: &mut Unstructured<'_>) -> Result<RawBufMut> {
    Ok(RawBufMut::new(addr(u)?, len(u)?))
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
    if verdict.is_ok() {
        on_the_wire(&op, &ctx);
    }
    // The error's text is formatted too: Display must not panic either.
    if let Err(e) = &verdict {
        let _ = std::format!("{e}");
    }
    let s = OpSummary::of(&op);
    assert_eq!(
        (s.kind, s.numel_in, s.numel_out),
        (op.kind(), op.numel_in(), op.numel_out())
    );
    builders(u, &ctx, &c1, &c2, root_or_peer)
}

/// One builder from NCCL's counts on the same communicator, against the operation the count
/// means (derived here, independently) and the check's verdict on it.
fn builders(
    u: &mut Unstructured<'_>,
    ctx: &CheckCtx<'_>,
    c1: &[usize],
    c2: &[usize],
    root: u32,
) -> Result<()> {
    let (dt, red) = (dtype(u)?, reduce_op(u)?);
    let (s, r, n) = (addr(u)?, addr(u)?, len(u)?);
    let at_root = ctx.rank == root;
    // `None`: a length NCCL's count implies does not fit in usize.
    let whole = n.checked_mul(ctx.size as usize);
    let sum = |c: &[usize]| c.iter().try_fold(0usize, |a, x| a.checked_add(*x));
    let mine = |c: &[usize]| c.get(ctx.rank as usize).copied().unwrap_or(0);
    let part = |base: usize| {
        (ctx.rank as usize)
            .checked_mul(n)
            .and_then(|e| e.checked_mul(dt.size()))
            .and_then(|o| base.checked_add(o))
            .unwrap_or(0)
    };
    let bufs = |(sa, sl): (usize, usize), (ra, rl): (usize, usize)| {
        (RawBuf::new(sa, sl), RawBufMut::new(ra, rl))
    };
    let (built, want) = match u.int_in_range(0..=15u8)? {
        0 => {
            let (send, recv) = bufs((s, n), (r, n));
            (
                build::all_reduce(ctx, s, r, n, dt, red),
                Some(CommOp::all_reduce(send, recv, dt, red)),
            )
        }
        1 => {
            let (send, recv) = bufs((s, n), (r, n));
            (
                build::broadcast(ctx, s, r, n, dt, root),
                Some(CommOp::broadcast(send, recv, dt, root)),
            )
        }
        2 => {
            let rl = if !at_root && r == 0 { 0 } else { n };
            let (send, recv) = bufs((s, n), (r, rl));
            (
                build::reduce(ctx, s, r, n, dt, red, root),
                Some(CommOp::reduce(send, recv, dt, red, root)),
            )
        }
        3 => (
            build::all_gather(ctx, s, r, n, dt),
            whole.map(|w| {
                let (send, recv) = bufs((s, n), (r, w));
                CommOp::all_gather(send, recv, dt)
            }),
        ),
        4 => (
            build::reduce_scatter(ctx, s, r, n, dt, red),
            whole.map(|w| {
                let (send, recv) = bufs((s, w), (r, n));
                CommOp::reduce_scatter(send, recv, dt, red)
            }),
        ),
        5 => (
            build::all_to_all(ctx, s, r, n, dt),
            whole.map(|w| {
                let (send, recv) = bufs((s, w), (r, w));
                CommOp::all_to_all(send, recv, dt)
            }),
        ),
        6 => (
            build::all_to_all_v(ctx, s, r, c1, c2, dt),
            sum(c1).zip(sum(c2)).map(|(sl, rl)| {
                let (send, recv) = bufs((s, sl), (r, rl));
                CommOp::all_to_all_v(send, recv, dt, c1, c2)
            }),
        ),
        7 => (
            build::gather(ctx, s, r, n, dt, root),
            (if at_root { whole } else { Some(0) }).map(|w| {
                let (send, recv) = bufs((s, n), (r, w));
                CommOp::gather(send, recv, dt, root)
            }),
        ),
        8 => (
            build::scatter(ctx, s, r, n, dt, root),
            (if at_root { whole } else { Some(0) }).map(|w| {
                let (send, recv) = bufs((s, w), (r, n));
                CommOp::scatter(send, recv, dt, root)
            }),
        ),
        9 => (
            build::all_gather_v(ctx, s, r, c1, dt),
            sum(c1).map(|total| {
                let (send, recv) = bufs((s, mine(c1)), (r, total));
                CommOp::all_gather_v(send, recv, dt, c1)
            }),
        ),
        10 => (
            build::reduce_scatter_v(ctx, s, r, c1, dt, red),
            sum(c1).map(|total| {
                let (send, recv) = bufs((s, total), (r, mine(c1)));
                CommOp::reduce_scatter_v(send, recv, dt, red, c1)
            }),
        ),
        11 => (
            build::send(ctx, s, n, dt, root),
            Some(CommOp::send(RawBuf::new(s, n), dt, root)),
        ),
        12 => (
            build::recv(ctx, r, n, dt, root),
            Some(CommOp::recv(RawBufMut::new(r, n), dt, root)),
        ),
        13 => (
            build::all_gather_in_place(ctx, r, n, dt),
            whole.map(|w| {
                let (send, recv) = bufs((part(r), n), (r, w));
                CommOp::all_gather(send, recv, dt)
            }),
        ),
        14 => (
            build::reduce_scatter_in_place(ctx, s, n, dt, red),
            whole.map(|w| {
                let (send, recv) = bufs((s, w), (part(s), n));
                CommOp::reduce_scatter(send, recv, dt, red)
            }),
        ),
        _ => (build::barrier(ctx), Some(CommOp::Barrier)),
    };
    let Some(want) = want else {
        // A length past usize: refused (by the communicator's or the type's rules first, or
        // naming the buffer that cannot hold it).
        assert!(built.is_err(), "built {built:?} from an overflowing count");
        return Ok(());
    };
    let verdict = check::op(&want, ctx);
    match (&built, &verdict) {
        // Compared as text: a premul-sum factor may be NaN, which `==` never equals.
        (Ok(op), Ok(())) => assert_eq!(std::format!("{op:?}"), std::format!("{want:?}")),
        (Err(b), Err(c)) => assert_eq!(
            std::format!("{b:?}"),
            std::format!("{c:?}"),
            "the builder and the check refuse {want:?} alike"
        ),
        _ => panic!("built {built:?}, but the check says {verdict:?} of {want:?}"),
    }
    judge(&want, ctx, &verdict);
    Ok(())
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let _ = run(&mut Unstructured::new(data));
}

/// An accepted call goes to the library as the same call with a type the library has: its
/// own, or uint8 for fp8 that is only moved on a library without fp8 (the same count: both are
/// one byte).
fn on_the_wire(op: &CommOp<'_>, ctx: &CheckCtx<'_>) {
    let wire = check::wire_op(op, ctx.features);
    let reduces = op.reduce_op().is_some();
    let has_fp8 = ctx.features.has(Feature::Float8);
    let want = op.dtype().map(|dt| match dt {
        DataType::Float8E4M3 | DataType::Float8E5M2 if !reduces && !has_fp8 => DataType::Uint8,
        dt => dt,
    });
    assert_eq!(wire.dtype(), want, "{op:?}");
    if let Some(dt) = op.dtype() {
        // Compared as text: a premul-sum factor may be NaN, which `==` never equals.
        assert_eq!(
            std::format!("{:?}", wire.with_dtype(dt)),
            std::format!("{op:?}"),
            "only the type changes"
        );
        // The library is handed a type it has, even to reduce.
        let on_wire = faults(&wire, ctx);
        assert!(
            !on_wire.unsupported,
            "{op:?} goes as {wire:?}, which the library lacks"
        );
    }
}

/// The verdict of the checks against the model's: an accepted call violates nothing, a
/// refused one names an argument the model finds at fault (or a missing feature).
fn judge(op: &CommOp<'_>, ctx: &CheckCtx<'_>, verdict: &oxccl_core::Result<()>) {
    let f = faults(op, ctx);
    match verdict {
        Ok(()) => assert!(
            f.none(),
            "accepted {op:?} (rank {}, size {}) though {:?} are wrong (unsupported: {})",
            ctx.rank,
            ctx.size,
            f.bad,
            f.unsupported
        ),
        Err(Error::InvalidArgument { arg, .. }) => assert!(
            f.bad.contains(arg),
            "refused {op:?} (rank {}, size {}) naming `{arg}`, the model finds {:?} at fault",
            ctx.rank,
            ctx.size,
            f.bad
        ),
        Err(Error::Unsupported { .. }) => assert!(f.unsupported, "{op:?}: unsupported?"),
        Err(e) => panic!("{op:?}: refused with {e:?}"),
    }
}

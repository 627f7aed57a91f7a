//! Tests of each rule of each check: every refusal asserts the exact error variant and the
//! argument (or feature) it names, beside the valid case it borders. One file per family.

use super::*;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::feature::{Feature, FeatureSet};
use crate::op::CommOp;
use crate::reduce::{ReduceOp, Scalar};
use crate::version::Version;
use crate::{HostScalar, Missing, OpKind, RawBuf, RawBufMut};

mod all_to_all;
mod communicator;
mod elementwise;
mod gates;
mod parts;
mod peers;
mod spans;

/// The features of the release the tests assume unless they say otherwise.
fn fs() -> FeatureSet {
    fs_at(2, 28, 3)
}

fn fs_at(major: u32, minor: u32, patch: u32) -> FeatureSet {
    FeatureSet::for_version(Version::new(major, minor, patch))
}

fn ctx(rank: u32, size: u32, f: &FeatureSet) -> CheckCtx<'_> {
    CheckCtx {
        rank,
        size,
        features: f,
    }
}

const A: usize = 0x10000;
const B: usize = 0x90000;

/// An input buffer of `len` elements at `addr`.
fn s(addr: usize, len: usize) -> RawBuf {
    RawBuf::new(addr, len)
}

/// An output buffer of `len` elements at `addr`.
fn r(addr: usize, len: usize) -> RawBufMut {
    RawBufMut::new(addr, len)
}

fn arg_of(r: Result<()>) -> &'static str {
    match r {
        Err(Error::InvalidArgument { arg, .. }) => arg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// `res` is `InvalidArgument` naming `arg`.
#[track_caller]
fn refused(res: Result<()>, arg: &str) {
    assert_eq!(arg_of(res), arg);
}

/// `res` is `InvalidArgument` naming `arg`, and its text says `says`.
#[track_caller]
fn refused_saying(res: Result<()>, arg: &str, says: &str) {
    match res {
        Err(Error::InvalidArgument { arg: a, expected }) => {
            assert_eq!(a, arg);
            assert!(expected.contains(says), "{expected:?} lacks {says:?}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// `res` is `Unsupported` for `feature`; returns why.
#[track_caller]
fn missing(res: Result<()>, feature: Feature) -> Missing {
    match res {
        Err(Error::Unsupported {
            feature: f,
            missing,
        }) if f == feature => missing,
        other => panic!("expected Unsupported {{ feature: {feature}, .. }}, got {other:?}"),
    }
}

fn too_old(need: (u32, u32, u32), have: (u32, u32, u32)) -> Missing {
    Missing::TooOld {
        need: Version::new(need.0, need.1, need.2),
        have: Version::new(have.0, have.1, have.2),
    }
}

/// One valid call of every operation on rank 0 of 2 (root 0), reductions with `red`.
fn every_op(dt: DataType, red: ReduceOp) -> [CommOp<'static>; 14] {
    [
        CommOp::AllReduce {
            send: s(A, 4),
            recv: r(B, 4),
            dtype: dt,
            op: red,
        },
        CommOp::Broadcast {
            send: s(A, 4),
            recv: r(B, 4),
            dtype: dt,
            root: 0,
        },
        CommOp::Reduce {
            send: s(A, 4),
            recv: r(B, 4),
            dtype: dt,
            op: red,
            root: 0,
        },
        CommOp::AllGather {
            send: s(A, 2),
            recv: r(B, 4),
            dtype: dt,
        },
        CommOp::ReduceScatter {
            send: s(A, 4),
            recv: r(B, 2),
            dtype: dt,
            op: red,
        },
        CommOp::AllToAll {
            send: s(A, 4),
            recv: r(B, 4),
            dtype: dt,
        },
        CommOp::AllToAllV {
            send: s(A, 4),
            recv: r(B, 4),
            dtype: dt,
            send_counts: &[2, 2],
            recv_counts: &[1, 3],
        },
        CommOp::Gather {
            send: s(A, 2),
            recv: r(B, 4),
            dtype: dt,
            root: 0,
        },
        CommOp::Scatter {
            send: s(A, 4),
            recv: r(B, 2),
            dtype: dt,
            root: 0,
        },
        CommOp::AllGatherV {
            send: s(A, 1),
            recv: r(B, 4),
            dtype: dt,
            counts: &[1, 3],
        },
        CommOp::ReduceScatterV {
            send: s(A, 4),
            recv: r(B, 1),
            dtype: dt,
            op: red,
            counts: &[1, 3],
        },
        CommOp::Send {
            buf: s(A, 4),
            dtype: dt,
            peer: 1,
        },
        CommOp::Recv {
            buf: r(B, 4),
            dtype: dt,
            peer: 1,
        },
        CommOp::Barrier,
    ]
}

/// Every operation's buffers as `buffers` lists them, and the window rule over them: on rank
/// 0 (the root), an input in a window beside a plain output is refused, naming the output;
/// a send, a receive and a barrier have one buffer or none, so nothing to mix.
#[test]
fn every_op_lists_its_buffers_and_the_window_rule_reads_them() {
    for op in every_op(DataType::Float32, ReduceOp::Sum) {
        let (send, recv) = op.buffers();
        let kind = op.kind();
        let (has_send, has_recv) = match kind {
            OpKind::Send => (true, false),
            OpKind::Recv => (false, true),
            OpKind::Barrier => (false, false),
            _ => (true, true),
        };
        assert_eq!(send.addr == A, has_send, "{kind:?}: {send:?}");
        assert_eq!(recv.addr == B, has_recv, "{kind:?}: {recv:?}");
        let mixed = super::windows::one_kind(&op, 0, |addr, _| addr == A);
        match (has_send && has_recv, mixed) {
            (true, Err(Error::InvalidArgument { arg, .. })) => assert_eq!(arg, "recv", "{kind:?}"),
            (false, Ok(())) => {}
            (_, other) => panic!("{kind:?}: {other:?}"),
        }
    }
}

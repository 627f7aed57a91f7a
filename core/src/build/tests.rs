//! The builders: every kind from buffers and from NCCL's counts, in place and out of place, the
//! derived lengths, and refusals naming the argument the check names.

use super::*;
use crate::error::Error;
use crate::feature::FeatureSet;
use crate::version::Version;
use crate::OpKind;

const A: usize = 0x10000;
const B: usize = 0x90000;
const F32: DataType = DataType::Float32;
const SUM: ReduceOp = ReduceOp::Sum;

fn fs() -> FeatureSet {
    FeatureSet::for_version(Version::new(2, 28, 3))
}

fn ctx(rank: u32, size: u32, f: &FeatureSet) -> CheckCtx<'_> {
    CheckCtx {
        rank,
        size,
        features: f,
    }
}

/// The lengths an operation's buffers have (send, recv).
fn lens(op: &CommOp<'_>) -> (usize, usize) {
    let (s, r) = op.buffers();
    (s.len, r.len)
}

/// `res` is refused naming `arg`.
#[track_caller]
fn refused(res: Result<CommOp<'_>>, arg: &str) {
    match res {
        Err(Error::InvalidArgument { arg: a, .. }) => assert_eq!(a, arg),
        other => panic!("expected InvalidArgument naming {arg}, got {other:?}"),
    }
}

#[test]
fn buffer_constructors_build_their_variant() {
    let (s, r) = (RawBuf::new(A, 4), RawBufMut::new(B, 4));
    let c = [2usize, 2];
    let ops = [
        CommOp::all_reduce(s, r, F32, SUM),
        CommOp::broadcast(s, r, F32, 1),
        CommOp::reduce(s, r, F32, SUM, 1),
        CommOp::all_gather(s, r, F32),
        CommOp::reduce_scatter(s, r, F32, SUM),
        CommOp::all_to_all(s, r, F32),
        CommOp::all_to_all_v(s, r, F32, &c, &c),
        CommOp::gather(s, r, F32, 1),
        CommOp::scatter(s, r, F32, 1),
        CommOp::all_gather_v(s, r, F32, &c),
        CommOp::reduce_scatter_v(s, r, F32, SUM, &c),
        CommOp::send(s, F32, 1),
        CommOp::recv(r, F32, 1),
        CommOp::Barrier,
    ];
    for (op, kind) in ops.iter().zip(OpKind::ALL) {
        assert_eq!(op.kind(), kind);
        assert_eq!(op.dtype().is_some(), kind != OpKind::Barrier);
        if kind.reduces() {
            assert_eq!(op.reduce_op(), Some(&SUM));
        }
    }
    assert_eq!(ops[1].root(), Some(1));
    assert_eq!(ops[11].peer(), Some(1));
    assert_eq!(ops[11].buffers(), (s, RawBufMut::EMPTY));
    assert_eq!(ops[12].buffers(), (RawBuf::EMPTY, r));
    assert_eq!(ops[0].buffers(), (s, r));
}

#[test]
fn in_place_constructors_read_what_they_write() {
    let buf = RawBufMut::new(B, 8);
    let f = fs();
    for op in [
        CommOp::all_reduce_in_place(buf, F32, SUM),
        CommOp::broadcast_in_place(buf, F32, 1),
        CommOp::reduce_in_place(buf, F32, SUM, 1),
    ] {
        assert_eq!(op.buffers(), (buf.as_read(), buf));
        for rank in 0..2 {
            assert_eq!(check::op(&op, &ctx(rank, 2, &f)), Ok(()), "{op:?}");
        }
    }
}

#[test]
fn counts_give_nccls_lengths() {
    let f = fs();
    let (root, off) = (ctx(1, 4, &f), ctx(2, 4, &f));
    let c = &root;
    assert_eq!(lens(&all_reduce(c, A, B, 5, F32, SUM).unwrap()), (5, 5));
    assert_eq!(lens(&broadcast(c, A, B, 5, F32, 1).unwrap()), (5, 5));
    assert_eq!(lens(&reduce(c, A, B, 5, F32, SUM, 1).unwrap()), (5, 5));
    assert_eq!(lens(&reduce(&off, A, B, 5, F32, SUM, 1).unwrap()), (5, 5));
    // Off the root a null output is no output.
    assert_eq!(lens(&reduce(&off, A, 0, 5, F32, SUM, 1).unwrap()), (5, 0));
    refused(reduce(c, A, 0, 5, F32, SUM, 1), "recv");
    assert_eq!(lens(&all_gather(c, A, B, 5, F32).unwrap()), (5, 20));
    assert_eq!(
        lens(&reduce_scatter(c, A, B, 5, F32, SUM).unwrap()),
        (20, 5)
    );
    assert_eq!(lens(&all_to_all(c, A, B, 5, F32).unwrap()), (20, 20));
    assert_eq!(lens(&gather(c, A, B, 5, F32, 1).unwrap()), (5, 20));
    assert_eq!(lens(&gather(&off, A, B, 5, F32, 1).unwrap()), (5, 0));
    assert_eq!(lens(&scatter(c, A, B, 5, F32, 1).unwrap()), (20, 5));
    assert_eq!(lens(&scatter(&off, A, B, 5, F32, 1).unwrap()), (0, 5));
    let counts = [1, 2, 3, 4];
    assert_eq!(lens(&all_gather_v(c, A, B, &counts, F32).unwrap()), (2, 10));
    assert_eq!(
        lens(&all_gather_v(&off, A, B, &counts, F32).unwrap()),
        (3, 10)
    );
    let rsv = reduce_scatter_v(c, A, B, &counts, F32, SUM).unwrap();
    assert_eq!(lens(&rsv), (10, 2));
    assert_eq!(rsv.reduce_op(), Some(&SUM));
    let a2av = all_to_all_v(c, A, B, &counts, &[4, 4, 4, 4], F32).unwrap();
    assert_eq!(lens(&a2av), (10, 16));
    assert_eq!(
        send(c, A, 5, F32, 3).unwrap(),
        CommOp::send(RawBuf::new(A, 5), F32, 3)
    );
    assert_eq!(
        recv(c, B, 5, F32, 0).unwrap(),
        CommOp::recv(RawBufMut::new(B, 5), F32, 0)
    );
    assert_eq!(barrier(c).unwrap(), CommOp::Barrier);
}

#[test]
fn in_place_by_address() {
    let f = fs();
    let c = ctx(2, 4, &f);
    // The same address: in place for the elementwise kinds.
    assert!(all_reduce(&c, B, B, 8, F32, SUM).is_ok());
    assert!(broadcast(&c, B, B, 8, F32, 0).is_ok());
    assert!(reduce(&c, B, B, 8, F32, SUM, 2).is_ok());
    // Overlapping otherwise: refused as the check refuses it.
    refused(all_reduce(&c, B, B + 4, 8, F32, SUM), "recv");
    // all_gather: this rank's part at element 2 × 3 of the whole.
    let ag = all_gather_in_place(&c, B, 3, F32).unwrap();
    assert_eq!(
        ag.buffers(),
        (RawBuf::new(B + 24, 3), RawBufMut::new(B, 12))
    );
    assert_eq!(ag, all_gather(&c, B + 24, B, 3, F32).unwrap());
    refused(all_gather(&c, B + 12, B, 3, F32), "recv");
    // reduce_scatter: this rank's result at element 2 × 3 of the whole.
    let rs = reduce_scatter_in_place(&c, A, 3, F32, SUM).unwrap();
    assert_eq!(
        rs.buffers(),
        (RawBuf::new(A, 12), RawBufMut::new(A + 24, 3))
    );
    refused(reduce_scatter(&c, A, A + 4, 3, F32, SUM), "recv");
    // Kinds that cannot run in place refuse the same address.
    refused(all_to_all(&c, A, A, 2, F32), "recv");
    refused(gather(&ctx(0, 4, &f), A, A, 2, F32, 0), "recv");
}

#[test]
fn roots_and_peers_out_of_range_are_named() {
    let f = fs();
    let c = ctx(0, 4, &f);
    refused(broadcast(&c, A, B, 1, F32, 4), "root");
    refused(reduce(&c, A, B, 1, F32, SUM, 4), "root");
    refused(gather(&c, A, B, 1, F32, u32::MAX), "root");
    refused(scatter(&c, A, B, 1, F32, 9), "root");
    refused(send(&c, A, 1, F32, 4), "peer");
    refused(recv(&c, B, 1, F32, 4), "peer");
    assert!(broadcast(&c, A, B, 1, F32, 3).is_ok());
}

#[test]
fn bad_counts_are_named() {
    let f = fs();
    let c = ctx(1, 4, &f);
    // One count per rank, summing without overflow.
    refused(all_gather_v(&c, A, B, &[1, 2, 3], F32), "counts");
    refused(
        reduce_scatter_v(&c, A, B, &[1, 2, 3, 4, 5], F32, SUM),
        "counts",
    );
    // A sum that overflows makes a whole buffer no address space holds.
    refused(
        reduce_scatter_v(&c, A, B, &[usize::MAX, 1, 0, 0], F32, SUM),
        "send",
    );
    refused(all_to_all_v(&c, A, B, &[1; 3], &[1; 4], F32), "send_counts");
    refused(all_to_all_v(&c, A, B, &[1; 4], &[1; 5], F32), "recv_counts");
    // A count whose world-size multiple overflows: the whole buffer is refused.
    refused(all_gather(&c, A, B, usize::MAX / 2, DataType::Int8), "recv");
    refused(reduce_scatter(&c, A, B, usize::MAX / 2, F32, SUM), "send");
    refused(all_to_all(&c, A, B, usize::MAX / 3, F32), "send");
    // A count beyond the address space, or a null buffer holding elements.
    refused(all_reduce(&c, A, B, usize::MAX, F32, SUM), "send");
    refused(all_reduce(&c, 0, B, 1, F32, SUM), "send");
    refused(send(&c, 0, 1, F32, 0), "buf");
    // Empty is fine anywhere.
    assert!(all_gather(&c, 0, 0, 0, F32).is_ok());
    // An in-place part past the end of the address space.
    refused(all_gather_in_place(&c, usize::MAX - 8, 4, F32), "send");
}

#[test]
fn the_communicator_and_the_type_are_checked_too() {
    let f = fs();
    refused(barrier(&ctx(0, 0, &f)), "size");
    refused(all_reduce(&ctx(4, 4, &f), A, B, 1, F32, SUM), "rank");
    refused(all_gather_v(&ctx(4, 4, &f), A, B, &[1; 4], F32), "rank");
    // Averages of bool-like integers exist; premul-sum on an integer does not.
    let premul = ReduceOp::PreMulSum(crate::Scalar::Host(crate::HostScalar::F32(2.0)));
    refused(
        all_reduce(&ctx(0, 2, &f), A, B, 1, DataType::Int32, premul),
        "op",
    );
    refused(
        all_reduce(&ctx(0, 2, &f), A, B, 1, DataType::Float16, premul),
        "scalar",
    );
    let old = FeatureSet::for_version(Version::new(2, 9, 0));
    assert!(matches!(
        all_reduce(&ctx(0, 2, &old), A, B, 1, F32, ReduceOp::Avg),
        Err(Error::Unsupported { .. })
    ));
}

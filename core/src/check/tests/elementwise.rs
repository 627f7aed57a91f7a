//! all_reduce, broadcast and reduce: buffers of one length, in place as the same memory.

use super::*;

#[test]
fn all_reduce_rules() {
    let f = fs();
    let c = ctx(0, 2, &f);
    let dt = DataType::Float32;
    let sum = &ReduceOp::Sum;
    assert!(all_reduce(&c, s(A, 4), r(B, 4), dt, sum).is_ok());
    // in place
    assert!(all_reduce(&c, s(A, 4), r(A, 4), dt, sum).is_ok());
    refused(all_reduce(&c, s(A, 4), r(B, 5), dt, sum), "recv");
    refused(all_reduce(&c, s(A, 5), r(B, 4), dt, sum), "recv");
    // overlapping but not the same memory
    refused_saying(
        all_reduce(&c, s(A, 4), r(A + 4, 4), dt, sum),
        "recv",
        "(send at element 0 of recv)",
    );
    refused(all_reduce(&c, s(A + 4, 4), r(A, 4), dt, sum), "recv");
    // touching is not overlapping
    assert!(all_reduce(&c, s(A, 4), r(A + 16, 4), dt, sum).is_ok());
    refused(all_reduce(&c, s(0, 4), r(B, 4), dt, sum), "send");
    refused(all_reduce(&c, s(A, 4), r(0, 4), dt, sum), "recv");
    assert!(all_reduce(&c, s(0, 0), r(0, 0), dt, sum).is_ok());
    refused(all_reduce(&c, s(A + 1, 4), r(B, 4), dt, sum), "send");
    refused(all_reduce(&c, s(A, 4), r(B + 2, 4), dt, sum), "recv");
}

#[test]
fn broadcast_and_reduce_buffers() {
    let f = fs();
    let root = ctx(0, 2, &f);
    let other = ctx(1, 2, &f);
    let dt = DataType::Uint8;
    assert!(broadcast(&root, s(A, 5), r(A, 5), dt, 0).is_ok());
    refused(broadcast(&root, s(A, 4), r(B, 5), dt, 0), "send");
    assert!(broadcast(&other, RawBuf::EMPTY, r(B, 5), dt, 0).is_ok());
    assert!(reduce(&other, s(A, 5), RawBufMut::EMPTY, dt, &ReduceOp::Sum, 0).is_ok());
    refused(
        reduce(&root, s(A, 5), RawBufMut::EMPTY, dt, &ReduceOp::Sum, 0),
        "recv",
    );
}

#[test]
fn broadcast_reads_send_on_the_root_only() {
    let f = fs();
    let root = ctx(1, 3, &f);
    let other = ctx(2, 3, &f);
    let dt = DataType::Float32;
    assert!(broadcast(&root, s(A, 8), r(B, 8), dt, 1).is_ok());
    refused(broadcast(&root, s(A, 8), r(B, 7), dt, 1), "send");
    refused(broadcast(&root, s(0, 8), r(B, 8), dt, 1), "send");
    refused(broadcast(&root, s(A + 2, 8), r(B, 8), dt, 1), "send");
    refused(broadcast(&root, s(A, 8), r(A + 4, 8), dt, 1), "recv");
    // off the root `send` is not looked at, whatever it is
    assert!(broadcast(&other, s(A + 1, 3), r(B, 8), dt, 1).is_ok());
    assert!(broadcast(&other, s(B, 8), r(B, 8), dt, 1).is_ok());
    // `recv` is checked everywhere
    refused(broadcast(&other, RawBuf::EMPTY, r(0, 8), dt, 1), "recv");
    refused(broadcast(&other, RawBuf::EMPTY, r(B + 1, 8), dt, 1), "recv");
}

#[test]
fn reduce_recv_on_and_off_the_root() {
    let f = fs();
    let root = ctx(0, 2, &f);
    let other = ctx(1, 2, &f);
    let dt = DataType::Int64;
    let max = &ReduceOp::Max;
    assert!(reduce(&root, s(A, 4), r(B, 4), dt, max, 0).is_ok());
    assert!(reduce(&root, s(A, 4), r(A, 4), dt, max, 0).is_ok());
    refused(reduce(&root, s(A, 4), r(B, 3), dt, max, 0), "recv");
    refused(reduce(&root, s(A, 4), r(A + 8, 4), dt, max, 0), "recv");
    // off the root: empty, or as long as send (and then the same or distinct memory)
    assert!(reduce(&other, s(A, 4), r(B, 4), dt, max, 0).is_ok());
    assert!(reduce(&other, s(A, 4), r(A, 4), dt, max, 0).is_ok());
    refused(reduce(&other, s(A, 4), r(B, 3), dt, max, 0), "recv");
    refused(reduce(&other, s(A, 4), r(A + 8, 4), dt, max, 0), "recv");
    // `send` is read on every rank
    refused(
        reduce(&other, s(0, 4), RawBufMut::EMPTY, dt, max, 0),
        "send",
    );
    refused(
        reduce(&other, s(A + 4, 4), RawBufMut::EMPTY, dt, max, 0),
        "send",
    );
}

#[test]
fn one_rank_has_no_fp8_avg() {
    let f = fs();
    for dt in [DataType::Float8E4M3, DataType::Float8E5M2] {
        let e = reduce_op(&ctx(0, 1, &f), dt, &ReduceOp::Avg).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "op", .. }),
            "{e:?}"
        );
        // Two ranks average fp8; one rank sums it.
        assert!(reduce_op(&ctx(0, 2, &f), dt, &ReduceOp::Avg).is_ok());
        assert!(reduce_op(&ctx(0, 1, &f), dt, &ReduceOp::Sum).is_ok());
    }
    assert!(reduce_op(&ctx(0, 1, &f), DataType::Float16, &ReduceOp::Avg).is_ok());
}

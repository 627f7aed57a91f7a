//! Roots and peers, and the buffers of send and recv.

use super::*;

#[test]
fn rooted_ops_reject_roots_out_of_range() {
    let f = fs();
    let c = ctx(1, 4, &f);
    let dt = DataType::Int8;
    for root in [4u32, 5, u32::MAX] {
        refused(broadcast(&c, s(A, 1), r(B, 1), dt, root), "root");
        refused(
            reduce(&c, s(A, 1), r(B, 1), dt, &ReduceOp::Max, root),
            "root",
        );
        refused(gather(&c, s(A, 1), RawBufMut::EMPTY, dt, root), "root");
        refused(scatter(&c, RawBuf::EMPTY, r(B, 1), dt, root), "root");
        refused(send(&c, s(A, 1), dt, root), "peer");
        refused(recv(&c, r(A, 1), dt, root), "peer");
    }
}

#[test]
fn every_rank_is_a_root_and_a_peer() {
    let f = fs();
    let c = ctx(1, 4, &f);
    let dt = DataType::Int8;
    for q in 0..4 {
        assert!(broadcast(&c, s(A, 1), r(B, 1), dt, q).is_ok());
        assert!(reduce(&c, s(A, 1), r(B, 1), dt, &ReduceOp::Max, q).is_ok());
        let (gs, gr) = if q == 1 { (4, 1) } else { (0, 1) };
        assert!(gather(&c, s(A, 1), r(B, gs), dt, q).is_ok());
        assert!(scatter(&c, s(A, gs), r(B, gr), dt, q).is_ok());
        // itself included (legal inside a group)
        assert!(send(&c, s(A, 1), dt, q).is_ok());
        assert!(recv(&c, r(A, 1), dt, q).is_ok());
    }
}

#[test]
fn send_and_recv_buffers() {
    let f = fs();
    let c = ctx(0, 2, &f);
    let dt = DataType::Float64;
    assert!(send(&c, RawBuf::EMPTY, dt, 1).is_ok());
    assert!(recv(&c, RawBufMut::EMPTY, dt, 1).is_ok());
    refused(send(&c, s(0, 1), dt, 1), "buf");
    refused(recv(&c, r(0, 1), dt, 1), "buf");
    refused(send(&c, s(A + 4, 1), dt, 1), "buf");
    refused(recv(&c, r(A + 4, 1), dt, 1), "buf");
    let huge = isize::MAX as usize / 8 + 1;
    refused(send(&c, s(A, huge), dt, 1), "buf");
    refused(recv(&c, r(A, huge), dt, 1), "buf");
}

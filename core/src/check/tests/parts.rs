//! all_gather, reduce_scatter, gather, scatter and the v-variants: one buffer holds every
//! rank's part, the other one part.

use super::*;

#[test]
fn gathers_and_scatters_multiply_by_world_size() {
    let f = fs();
    let c = ctx(1, 4, &f);
    let dt = DataType::Float16;
    let sum = &ReduceOp::Sum;
    assert!(all_gather(&c, s(A, 3), r(B, 12), dt).is_ok());
    refused(all_gather(&c, s(A, 3), r(B, 11), dt), "recv");
    // in place: send is part `rank` of recv
    assert!(all_gather(&c, s(B + 6, 3), r(B, 12), dt).is_ok());
    refused(all_gather(&c, s(B, 3), r(B, 12), dt), "recv");
    assert!(reduce_scatter(&c, s(A, 12), r(B, 3), dt, sum).is_ok());
    assert!(reduce_scatter(&c, s(A, 12), r(A + 6, 3), dt, sum).is_ok());
    refused(reduce_scatter(&c, s(A, 11), r(B, 3), dt, sum), "send");
    refused(
        all_gather(&c, s(A, usize::MAX), r(B, 1), DataType::Int8),
        "send",
    );
}

#[test]
fn in_place_layouts_are_part_rank() {
    let f = fs();
    let c = ctx(2, 4, &f);
    let dt = DataType::Float32;
    let sum = &ReduceOp::Sum;
    // all_gather: send at element 2 × 3 of recv, every other overlap refused
    assert!(all_gather(&c, s(B + 24, 3), r(B, 12), dt).is_ok());
    refused_saying(
        all_gather(&c, s(B + 12, 3), r(B, 12), dt),
        "recv",
        "(send at element 6 of recv)",
    );
    refused(all_gather(&c, s(B + 28, 3), r(B, 12), dt), "recv");
    // reduce_scatter: recv at element 2 × 3 of send
    assert!(reduce_scatter(&c, s(A, 12), r(A + 24, 3), dt, sum).is_ok());
    refused_saying(
        reduce_scatter(&c, s(A, 12), r(A + 12, 3), dt, sum),
        "recv",
        "(recv at element 6 of send)",
    );
    refused(reduce_scatter(&c, s(A, 12), r(A, 3), dt, sum), "recv");
    // recv starting before send and running into it
    refused(reduce_scatter(&c, s(A + 8, 12), r(A, 3), dt, sum), "recv");
    // empty buffers never overlap
    assert!(all_gather(&c, s(B, 0), r(B, 0), dt).is_ok());
}

#[test]
fn world_size_multiples_that_overflow() {
    let f = fs();
    let c = ctx(0, 4, &f);
    let dt = DataType::Int8;
    // the part is addressable (isize::MAX bytes) but four of them are not
    let big = isize::MAX as usize;
    refused(all_gather(&c, s(A, big), r(B, 1), dt), "send");
    refused(
        reduce_scatter(&c, s(A, 1), r(B, big), dt, &ReduceOp::Sum),
        "recv",
    );
    refused(gather(&c, s(A, big), r(B, 1), dt, 0), "send");
    refused(scatter(&c, s(A, 1), r(B, big), dt, 0), "recv");
    // off the root nothing is multiplied
    assert!(gather(&ctx(1, 4, &f), s(A, big), RawBufMut::EMPTY, dt, 0).is_ok());
}

#[test]
fn gather_scatter_root_and_non_root_buffers() {
    let f = fs();
    let dt = DataType::Float64;
    let root = ctx(0, 3, &f);
    let other = ctx(2, 3, &f);
    assert!(gather(&root, s(A, 2), r(B, 6), dt, 0).is_ok());
    refused(gather(&root, s(A, 2), r(B, 5), dt, 0), "recv");
    assert!(gather(&other, s(A, 2), RawBufMut::EMPTY, dt, 0).is_ok());
    refused(gather(&other, s(A, 2), r(B, 6), dt, 0), "recv");
    assert!(scatter(&root, s(A, 6), r(B, 2), dt, 0).is_ok());
    refused(scatter(&other, s(A, 6), r(B, 2), dt, 0), "send");
}

#[test]
fn gather_scatter_more_rules() {
    let f = fs();
    let dt = DataType::Float64;
    let root = ctx(1, 3, &f);
    let other = ctx(0, 3, &f);
    refused_saying(
        gather(&other, s(A, 2), r(B, 1), dt, 1),
        "recv",
        "an empty output off the root",
    );
    refused_saying(
        scatter(&root, s(A, 5), r(B, 2), dt, 1),
        "send",
        "world size times the recv length on the root",
    );
    refused_saying(
        scatter(&other, s(A, 1), r(B, 2), dt, 1),
        "send",
        "an empty input off the root",
    );
    assert!(scatter(&other, RawBuf::EMPTY, r(B, 2), dt, 1).is_ok());
    // neither runs in place: on the root the buffers are distinct
    refused(gather(&root, s(B + 16, 2), r(B, 6), dt, 1), "recv");
    refused(scatter(&root, s(A, 6), r(A + 16, 2), dt, 1), "recv");
    // off the root they are not compared
    assert!(gather(&other, s(B, 2), r(B, 0), dt, 1).is_ok());
    // both buffers are checked on every rank
    refused(gather(&other, s(0, 2), RawBufMut::EMPTY, dt, 1), "send");
    refused(scatter(&other, RawBuf::EMPTY, r(B + 1, 2), dt, 1), "recv");
}

#[test]
fn v_variants() {
    let f = fs();
    let c = ctx(1, 3, &f);
    let dt = DataType::Uint64;
    let min = &ReduceOp::Min;
    assert!(all_gather_v(&c, s(A, 2), r(B, 6), dt, &[1, 2, 3]).is_ok());
    refused(all_gather_v(&c, s(A, 1), r(B, 6), dt, &[1, 2, 3]), "send");
    refused(all_gather_v(&c, s(A, 2), r(B, 5), dt, &[1, 2, 3]), "recv");
    refused(all_gather_v(&c, s(A, 2), r(B, 6), dt, &[]), "counts");
    assert!(reduce_scatter_v(&c, s(A, 6), r(B, 2), dt, min, &[1, 2, 3]).is_ok());
    refused(
        reduce_scatter_v(&c, s(A, 6), r(B, 3), dt, min, &[1, 2, 3]),
        "recv",
    );
}

#[test]
fn v_variants_more_rules() {
    let f = fs();
    let c = ctx(1, 3, &f);
    let dt = DataType::Float32;
    let min = &ReduceOp::Min;
    let huge = [usize::MAX, 1, 0];
    // counts: one per rank, summing without overflow
    refused(all_gather_v(&c, s(A, 1), r(B, 3), dt, &huge), "counts");
    refused(
        all_gather_v(&c, s(A, 1), r(B, 4), dt, &[1, 1, 1, 1]),
        "counts",
    );
    refused(
        reduce_scatter_v(&c, s(A, 1), r(B, 1), dt, min, &huge),
        "counts",
    );
    refused(
        reduce_scatter_v(&c, s(A, 6), r(B, 2), dt, min, &[4, 2]),
        "counts",
    );
    // reduce_scatter_v: send is the sum
    refused_saying(
        reduce_scatter_v(&c, s(A, 5), r(B, 2), dt, min, &[1, 2, 3]),
        "send",
        "the sum of the counts",
    );
    // when both lengths are wrong, send is named first
    refused(
        reduce_scatter_v(&c, s(A, 5), r(B, 3), dt, min, &[1, 2, 3]),
        "send",
    );
    refused(all_gather_v(&c, s(A, 1), r(B, 5), dt, &[1, 2, 3]), "send");
    // a rank with nothing to give
    assert!(all_gather_v(&c, RawBuf::EMPTY, r(B, 4), dt, &[1, 0, 3]).is_ok());
    assert!(reduce_scatter_v(&c, s(A, 4), RawBufMut::EMPTY, dt, min, &[1, 0, 3]).is_ok());
    // never in place
    refused(
        all_gather_v(&c, s(B + 4, 2), r(B, 6), dt, &[1, 2, 3]),
        "recv",
    );
    refused(
        reduce_scatter_v(&c, s(A, 6), r(A + 4, 2), dt, min, &[1, 2, 3]),
        "recv",
    );
}

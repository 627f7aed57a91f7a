//! all_to_all and its uneven variant.

use super::*;

#[test]
fn all_to_all_rules() {
    let f = fs();
    let c = ctx(0, 3, &f);
    let dt = DataType::Int32;
    assert!(all_to_all(&c, s(A, 6), r(B, 6), dt).is_ok());
    refused(all_to_all(&c, s(A, 7), r(B, 7), dt), "send");
    refused(all_to_all(&c, s(A, 6), r(B, 3), dt), "recv");
    refused(all_to_all(&c, s(A, 6), r(A, 6), dt), "recv");
    let (two, three) = (&[1usize, 2, 3][..], &[0usize, 4, 0][..]);
    assert!(all_to_all_v(&c, s(A, 6), r(B, 4), dt, two, three).is_ok());
    refused(
        all_to_all_v(&c, s(A, 6), r(B, 4), dt, &[1, 2], three),
        "send_counts",
    );
    refused(
        all_to_all_v(&c, s(A, 6), r(B, 4), dt, &[1, 2, 2], three),
        "send_counts",
    );
    refused(
        all_to_all_v(&c, s(A, 6), r(B, 4), dt, two, &[1, 4, 0]),
        "recv_counts",
    );
    refused(
        all_to_all_v(&c, s(A, 6), r(B, 4), dt, &[usize::MAX, 2, 3], three),
        "send_counts",
    );
}

#[test]
fn all_to_all_more_rules() {
    let f = fs();
    let c = ctx(2, 3, &f);
    let dt = DataType::Float32;
    assert!(all_to_all(&c, RawBuf::EMPTY, RawBufMut::EMPTY, dt).is_ok());
    // lengths first, then divisibility
    refused_saying(
        all_to_all(&c, s(A, 7), r(B, 6), dt),
        "recv",
        "as long as send",
    );
    refused_saying(
        all_to_all(&c, s(A, 4), r(B, 4), dt),
        "send",
        "divisible by the world size 3",
    );
    // any overlap is refused, the same memory included
    refused(all_to_all(&c, s(A, 6), r(A + 20, 6), dt), "recv");
    assert!(all_to_all(&c, s(A, 6), r(A + 24, 6), dt).is_ok());
    refused(all_to_all(&c, s(A, 6), r(B + 1, 6), dt), "recv");
}

#[test]
fn all_to_all_v_more_rules() {
    let f = fs();
    let c = ctx(1, 2, &f);
    let dt = DataType::Float32;
    let even = &[2usize, 2][..];
    assert!(all_to_all_v(&c, s(A, 4), r(B, 4), dt, even, even).is_ok());
    refused(
        all_to_all_v(&c, s(A, 4), r(B, 4), dt, even, &[4]),
        "recv_counts",
    );
    refused(
        all_to_all_v(&c, s(A, 4), r(B, 4), dt, even, &[usize::MAX, 5]),
        "recv_counts",
    );
    // send counts are checked before recv counts
    refused(
        all_to_all_v(&c, s(A, 4), r(B, 4), dt, &[1, 1], &[1, 1]),
        "send_counts",
    );
    refused(all_to_all_v(&c, s(A, 4), r(A, 4), dt, even, even), "recv");
    assert!(all_to_all_v(&c, s(A, 4), RawBufMut::EMPTY, dt, even, &[0, 0]).is_ok());
}

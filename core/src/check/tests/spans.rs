//! The buffer rules every operation shares: addressable, non-null, not wrapping, aligned;
//! lengths, multiples and counts; in place or disjoint.

use super::buffers::{disjoint, in_place_or_disjoint, times, InPlace};
use super::*;

#[test]
fn null_addresses() {
    for dt in DataType::ALL {
        assert!(buffer("send", RawBuf::EMPTY, dt).is_ok());
        assert!(buffer_mut("recv", RawBufMut::EMPTY, dt).is_ok());
        refused_saying(buffer("send", s(0, 1), dt), "send", "non-null");
        refused_saying(buffer_mut("recv", r(0, 3), dt), "recv", "non-null");
    }
}

#[test]
fn sizes_past_isize_max() {
    let top = isize::MAX as usize;
    // exactly isize::MAX bytes is addressable
    assert!(buffer("send", s(A, top), DataType::Int8).is_ok());
    refused_saying(
        buffer("send", s(A, top + 1), DataType::Int8),
        "send",
        "at most",
    );
    for dt in DataType::ALL {
        let n = top / dt.size();
        assert!(buffer("send", s(A, n), dt).is_ok(), "{dt}");
        refused(buffer("send", s(A, n + 1), dt), "send");
        // a byte count that overflows usize itself
        refused(buffer_mut("recv", r(B, usize::MAX), dt), "recv");
    }
    // the size is refused before the null address
    refused_saying(
        buffer("buf", s(0, usize::MAX), DataType::Int8),
        "buf",
        "at most",
    );
}

#[test]
fn buffers_that_wrap() {
    let dt = DataType::Float64;
    let end = usize::MAX - 7;
    assert!(buffer("send", s(end - 8, 1), dt).is_ok());
    refused_saying(buffer("send", s(end, 1), dt), "send", "does not wrap");
    refused_saying(
        buffer_mut("recv", r(end - 8, 2), dt),
        "recv",
        "does not wrap",
    );
    assert!(buffer_mut("recv", r(end, 0), dt).is_ok());
}

#[test]
fn misaligned_addresses() {
    for dt in DataType::ALL {
        let n = dt.size();
        assert!(buffer("send", s(A + n, 1), dt).is_ok(), "{dt}");
        if n > 1 {
            refused_saying(buffer("send", s(A + n / 2, 1), dt), "send", "aligned");
            refused_saying(buffer_mut("recv", r(B + 1, 1), dt), "recv", "aligned");
        } else {
            assert!(buffer("send", s(A + 1, 1), dt).is_ok());
        }
    }
}

#[test]
fn lengths_multiples_and_counts() {
    assert!(exact_len("recv", 4, 4, "as long as send").is_ok());
    refused_saying(
        exact_len("recv", 3, 4, "as long as send"),
        "recv",
        "as long as send: 4 elements, got 3",
    );
    assert_eq!(times("send", 3, 4), Ok(12));
    assert_eq!(times("send", usize::MAX, 1), Ok(usize::MAX));
    assert_eq!(times("send", 7, 0), Ok(0));
    refused(times("send", usize::MAX / 2 + 1, 2).map(|_| ()), "send");
    assert_eq!(parts_sum("counts", &[1, 2, 3], 3), Ok(6));
    assert_eq!(parts_sum("counts", &[], 0), Ok(0));
    refused_saying(
        parts_sum("counts", &[1, 2], 3).map(|_| ()),
        "counts",
        "one count per rank (3), got 2",
    );
    refused_saying(
        parts_sum("send_counts", &[usize::MAX, 1], 2).map(|_| ()),
        "send_counts",
        "sum fits",
    );
    assert_eq!(parts_sum("counts", &[usize::MAX, 0], 2), Ok(usize::MAX));
}

#[test]
fn in_place_or_disjoint_layouts() {
    let dt = DataType::Float32;
    // send inside recv
    assert!(in_place_or_disjoint(s(B, 4), r(B, 4), dt, InPlace::SendAt(0)).is_ok());
    assert!(in_place_or_disjoint(s(B + 8, 2), r(B, 6), dt, InPlace::SendAt(2)).is_ok());
    refused_saying(
        in_place_or_disjoint(s(B + 4, 2), r(B, 6), dt, InPlace::SendAt(2)),
        "recv",
        "(send at element 2 of recv)",
    );
    // recv inside send
    assert!(in_place_or_disjoint(s(A, 6), r(A + 8, 2), dt, InPlace::RecvAt(2)).is_ok());
    refused_saying(
        in_place_or_disjoint(s(A, 6), r(A + 4, 2), dt, InPlace::RecvAt(2)),
        "recv",
        "(recv at element 2 of send)",
    );
    // the layouts are not interchangeable
    refused(
        in_place_or_disjoint(s(A, 6), r(A + 8, 2), dt, InPlace::SendAt(2)),
        "recv",
    );
    refused(
        in_place_or_disjoint(s(B + 8, 2), r(B, 6), dt, InPlace::RecvAt(2)),
        "recv",
    );
    for layout in [InPlace::SendAt(0), InPlace::RecvAt(0), InPlace::SendAt(5)] {
        // disjoint, touching, or empty: always accepted
        assert!(in_place_or_disjoint(s(A, 4), r(B, 4), dt, layout).is_ok());
        assert!(in_place_or_disjoint(s(A, 4), r(A + 16, 4), dt, layout).is_ok());
        assert!(in_place_or_disjoint(s(A, 0), r(A, 4), dt, layout).is_ok());
        // overlapping elsewhere than the layout says
        refused(
            in_place_or_disjoint(s(A, 4), r(A + 4, 4), dt, layout),
            "recv",
        );
    }
    // an offset past the address space is not in place, and does not panic
    refused(
        in_place_or_disjoint(s(A, 4), r(A + 4, 4), dt, InPlace::SendAt(usize::MAX)),
        "recv",
    );
    refused(
        in_place_or_disjoint(s(A, 4), r(A + 4, 4), dt, InPlace::RecvAt(usize::MAX / 2)),
        "recv",
    );
}

#[test]
fn disjoint_buffers() {
    let dt = DataType::Int64;
    assert!(disjoint(s(A, 2), r(A + 16, 2), dt).is_ok());
    assert!(disjoint(s(A + 16, 2), r(A, 2), dt).is_ok());
    assert!(disjoint(s(A, 0), r(A, 2), dt).is_ok());
    refused_saying(
        disjoint(s(A, 2), r(A + 8, 2), dt),
        "recv",
        "cannot run in place",
    );
    refused(disjoint(s(A, 2), r(A, 2), dt), "recv");
    refused(disjoint(s(A + 8, 1), r(A, 4), dt), "recv");
}

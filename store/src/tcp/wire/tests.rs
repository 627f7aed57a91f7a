//! Unit tests of the wire encoding: PyTorch's numbering, partial buffers, bounds.

use super::*;

fn set_query(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut q = Vec::new();
    put_query(&mut q, QueryType::Set);
    put_bytes(&mut q, key);
    put_bytes(&mut q, value);
    q
}

#[test]
fn numbering_matches_pytorch() {
    assert_eq!(QueryType::from_byte(0), Some(QueryType::Validate));
    assert_eq!(QueryType::from_byte(6), Some(QueryType::Wait));
    assert_eq!(QueryType::from_byte(12), Some(QueryType::CancelWait));
    assert_eq!(QueryType::from_byte(13), Some(QueryType::Ping));
    assert_eq!(QueryType::from_byte(18), Some(QueryType::Barrier));
    assert_eq!(QueryType::from_byte(19), None);
    for b in 0..19u8 {
        assert_eq!(QueryType::from_byte(b).map(|q| q as u8), Some(b));
    }
}

#[test]
fn set_round_trips_and_reports_its_length() {
    let mut q = set_query(b"/k", b"value");
    q.extend_from_slice(&[QueryType::GetNumKeys as u8]);
    let (req, used) = decode_request(&q).unwrap().unwrap();
    assert_eq!(req, Request::Set(b"/k", b"value"));
    assert_eq!(used, 1 + 8 + 2 + 8 + 5);
    let (next, n) = decode_request(&q[used..]).unwrap().unwrap();
    assert_eq!((next, n), (Request::GetNumKeys, 1));
}

#[test]
fn every_prefix_of_a_query_is_incomplete() {
    let mut q = Vec::new();
    put_query(&mut q, QueryType::MultiSet);
    put_u64(&mut q, 2);
    for (k, v) in [(&b"a"[..], &b"1"[..]), (b"bb", b"22")] {
        put_bytes(&mut q, k);
        put_bytes(&mut q, v);
    }
    for end in 0..q.len() {
        assert_eq!(decode_request(&q[..end]), Ok(None), "prefix of {end} bytes");
    }
    let (req, used) = decode_request(&q).unwrap().unwrap();
    assert_eq!(used, q.len());
    assert_eq!(req, Request::MultiSet(vec![(b"a", b"1"), (b"bb", b"22")]));
}

#[test]
fn keys_values_and_counts_are_bounded_before_reading_them() {
    let mut q = vec![QueryType::Get as u8];
    put_u64(&mut q, MAX_KEY_LEN as u64 + 1);
    assert_eq!(
        decode_request(&q),
        Err(WireError::KeyTooLong(MAX_KEY_LEN as u64 + 1))
    );

    let mut q = vec![QueryType::Set as u8];
    put_bytes(&mut q, b"k");
    put_u64(&mut q, u64::MAX);
    assert_eq!(decode_request(&q), Err(WireError::ValueTooLong(u64::MAX)));

    let mut q = vec![QueryType::Wait as u8];
    put_u64(&mut q, u64::MAX);
    assert_eq!(decode_request(&q), Err(WireError::TooManyKeys(u64::MAX)));

    assert_eq!(decode_request(&[200]), Err(WireError::UnknownQuery(200)));
}

#[test]
fn every_query_type_decodes() {
    let mut q = Vec::new();
    put_query(&mut q, QueryType::Validate);
    put_u32(&mut q, VALIDATION_MAGIC);
    put_query(&mut q, QueryType::CompareSet);
    put_bytes(&mut q, b"k");
    put_bytes(&mut q, b"");
    put_bytes(&mut q, b"new");
    put_query(&mut q, QueryType::Add);
    put_bytes(&mut q, b"c");
    put_i64(&mut q, -7);
    put_query(&mut q, QueryType::Check);
    put_keys(&mut q, &["a", "b"]);
    put_query(&mut q, QueryType::Ping);
    put_u32(&mut q, 42);
    put_query(&mut q, QueryType::Barrier);
    put_bytes(&mut q, b"bar");
    put_i64(&mut q, 4);
    put_query(&mut q, QueryType::CancelWait);
    let want = [
        Request::Validate(VALIDATION_MAGIC),
        Request::CompareSet(b"k", b"", b"new"),
        Request::Add(b"c", -7),
        Request::Check(vec![b"a", b"b"]),
        Request::Ping(42),
        Request::Barrier(b"bar", 4),
        Request::CancelWait,
    ];
    let mut at = 0;
    for w in want {
        let (req, used) = decode_request(&q[at..]).unwrap().unwrap();
        assert_eq!(req.query_type() as u8, q[at]);
        assert_eq!(req, w);
        at += used;
    }
    assert_eq!(at, q.len());
}

#[test]
fn replies_read_back() {
    let mut r = Vec::new();
    put_bytes(&mut r, b"hello");
    put_i64(&mut r, -3);
    put_u32(&mut r, 99);
    put_u8(&mut r, WAIT_CANCELED);
    let mut s = &r[..];
    assert_eq!(read_bytes(&mut s, 10).unwrap(), b"hello");
    assert_eq!(read_i64(&mut s).unwrap(), -3);
    assert_eq!(read_u32(&mut s).unwrap(), 99);
    assert_eq!(read_u8(&mut s).unwrap(), WAIT_CANCELED);
    assert!(read_u8(&mut s).is_err());
}

#[test]
fn a_lying_reply_length_is_refused_or_cut_short() {
    let mut r = Vec::new();
    put_u64(&mut r, 1 << 40);
    let e = read_bytes(&mut &r[..], MAX_VALUE_LEN).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    let mut r = Vec::new();
    put_u64(&mut r, 100);
    r.extend_from_slice(b"short");
    let e = read_bytes(&mut &r[..], MAX_VALUE_LEN).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}

#[test]
fn counters_parse_as_pytorch_writes_them() {
    assert_eq!(parse_counter(b"42"), Some(42));
    assert_eq!(parse_counter(b"-5"), Some(-5));
    assert_eq!(parse_counter(b" 7 "), Some(7));
    assert_eq!(parse_counter(b"x"), None);
    assert_eq!(parse_counter(b""), None);
}

//! The TCP store's query decoder (server side) on arbitrary bytes, against an encoder written
//! here from the protocol's description: a decoded query re-encodes to exactly the bytes it
//! used, every shorter prefix asks for more bytes, bytes after it change nothing, and a
//! refusal is the one the limits call for.

use oxccl::store::tcp::wire::{
    decode_request, QueryType, Request, WireError, MAX_KEY_COUNT, MAX_KEY_LEN, MAX_VALUE_LEN,
};

/// The model's encoding of a query: type byte, then native-endian integers, `u64`-length
/// prefixed strings, `u64`-count prefixed lists.
fn encode(req: &Request<'_>) -> Vec<u8> {
    let mut out = vec![req.query_type() as u8];
    let bytes = |out: &mut Vec<u8>, b: &[u8]| {
        out.extend_from_slice(&(b.len() as u64).to_ne_bytes());
        out.extend_from_slice(b);
    };
    let keys = |out: &mut Vec<u8>, ks: &[&[u8]]| {
        out.extend_from_slice(&(ks.len() as u64).to_ne_bytes());
        for k in ks {
            bytes(out, k);
        }
    };
    match req {
        Request::Validate(n) | Request::Ping(n) => out.extend_from_slice(&n.to_ne_bytes()),
        Request::Set(k, v) | Request::Append(k, v) | Request::QueuePush(k, v) => {
            bytes(&mut out, k);
            bytes(&mut out, v);
        }
        Request::CompareSet(k, a, b) => {
            bytes(&mut out, k);
            bytes(&mut out, a);
            bytes(&mut out, b);
        }
        Request::Get(k) | Request::DeleteKey(k) | Request::QueuePop(k) | Request::QueueLen(k) => {
            bytes(&mut out, k)
        }
        Request::Add(k, n) | Request::Barrier(k, n) => {
            bytes(&mut out, k);
            out.extend_from_slice(&n.to_ne_bytes());
        }
        Request::Check(ks) | Request::Wait(ks) | Request::MultiGet(ks) => keys(&mut out, ks),
        Request::MultiSet(pairs) => {
            out.extend_from_slice(&(pairs.len() as u64).to_ne_bytes());
            for (k, v) in pairs {
                bytes(&mut out, k);
                bytes(&mut out, v);
            }
        }
        Request::GetNumKeys | Request::CancelWait | Request::ListKeys => {}
    }
    out
}

/// Every key, value and count of a decoded query is within the limits.
fn within_limits(req: &Request<'_>) -> bool {
    let key = |k: &[u8]| k.len() <= MAX_KEY_LEN;
    let val = |v: &[u8]| v.len() <= MAX_VALUE_LEN;
    match req {
        Request::Set(k, v) | Request::Append(k, v) | Request::QueuePush(k, v) => key(k) && val(v),
        Request::CompareSet(k, a, b) => key(k) && val(a) && val(b),
        Request::Get(k)
        | Request::DeleteKey(k)
        | Request::QueuePop(k)
        | Request::QueueLen(k)
        | Request::Add(k, _)
        | Request::Barrier(k, _) => key(k),
        Request::Check(ks) | Request::Wait(ks) | Request::MultiGet(ks) => {
            ks.len() <= MAX_KEY_COUNT && ks.iter().all(|k| key(k))
        }
        Request::MultiSet(p) => p.len() <= MAX_KEY_COUNT && p.iter().all(|(k, v)| key(k) && val(v)),
        Request::Validate(_)
        | Request::Ping(_)
        | Request::GetNumKeys
        | Request::CancelWait
        | Request::ListKeys => true,
    }
}

/// Whether `bytes` (native-endian u64s, 8 at a time) holds the length a refusal names: the
/// decoder must not invent numbers.
fn mentions(buf: &[u8], n: u64) -> bool {
    let want = n.to_ne_bytes();
    buf.windows(8).any(|w| w == want)
}

/// One fuzz input: any bytes, decoded as queries one after the other like the server does.
pub fn fuzz(data: &[u8]) {
    let mut rest = data;
    // A handful of queries per input is plenty; bounds the prefix checks' cost.
    for _ in 0..8 {
        match decode_request(rest) {
            Ok(None) => {
                // Incomplete: every prefix is incomplete too (or refused by a limit already
                // visible in it, which the full buffer would have refused as well).
                for cut in 0..rest.len().min(64) {
                    assert!(matches!(decode_request(&rest[..cut]), Ok(None)));
                }
                return;
            }
            Err(e) => {
                match e {
                    WireError::UnknownQuery(b) => {
                        assert_eq!(rest.first(), Some(&b));
                        assert!(QueryType::from_byte(b).is_none());
                    }
                    WireError::KeyTooLong(n) => {
                        assert!(n > MAX_KEY_LEN as u64 && mentions(rest, n))
                    }
                    WireError::ValueTooLong(n) => {
                        assert!(n > MAX_VALUE_LEN as u64 && mentions(rest, n))
                    }
                    WireError::TooManyKeys(n) => {
                        assert!(n > MAX_KEY_COUNT as u64 && mentions(rest, n))
                    }
                }
                assert!(!e.to_string().is_empty());
                return;
            }
            Ok(Some((req, used))) => {
                assert!(used >= 1 && used <= rest.len());
                assert!(within_limits(&req));
                assert_eq!(encode(&req), &rest[..used], "re-encoding {req:?}");
                for cut in (0..used).rev().take(64) {
                    assert_eq!(
                        decode_request(&rest[..cut]),
                        Ok(None),
                        "prefix {cut}/{used}"
                    );
                }
                assert_eq!(decode_request(&rest[..used]), Ok(Some((req, used))));
                rest = &rest[used..];
            }
        }
    }
}

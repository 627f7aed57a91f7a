//! PyTorch's TCPStore wire protocol, as pure functions over bytes.
//!
//! # The protocol, in short
//!
//! A client opens one TCP connection and sends *queries*; the server answers some of them, in
//! order, on the same connection. There are no request ids, no framing beyond the fields
//! themselves, and no error replies: a server that dislikes a query closes the connection.
//!
//! - A query is one byte, its [`QueryType`], followed by its fields.
//! - Integers are fixed-size and in the host's native byte order (PyTorch copies the bytes of
//!   a `uint64_t`/`int64_t`/`uint32_t`), so both ends must share an endianness.
//! - A string or a byte value is a `u64` length followed by that many bytes; a list of keys is
//!   a `u64` count followed by that many strings.
//! - The first query of every connection must be `VALIDATE` with the `u32`
//!   [`VALIDATION_MAGIC`]; PyTorch's client then sends `PING` with a `u32` nonce (its pid)
//!   and expects the same nonce back, before anything else.
//! - `SET key value`, `APPEND key value`, `MULTI_SET n (key value)*` and
//!   `QUEUE_PUSH key value` have no reply.
//! - `GET key` answers the value (empty when the key is missing). PyTorch's client never
//!   sends a bare `GET`: it first `WAIT`s for the key, then sends `GET`.
//! - `ADD key i64` adds to the decimal integer stored at the key (missing = 0), stores the sum
//!   as decimal text and answers it as an `i64`.
//! - `COMPARE_SET key expected desired`: when the key exists and holds `expected`, it becomes
//!   `desired`; when the key is missing and `expected` is empty, it is created as `desired`.
//!   The reply is the value after the call (for a missing key with a non-empty `expected`:
//!   `expected` itself, as PyTorch answers).
//! - `CHECK n keys` answers one byte, [`CHECK_READY`] or [`CHECK_NOT_READY`].
//! - `WAIT n keys` answers [`WAIT_STOP_WAITING`] once every key exists (at once if they
//!   do). A client whose own deadline passes sends `CANCEL_WAIT`, answered by
//!   [`WAIT_CANCELED`]; a `STOP_WAITING` already on its way comes first.
//! - `GETNUMKEYS` answers an `i64`; `DELETE_KEY key` answers the `i64` count deleted (0 or 1).
//! - `MULTI_GET n keys` answers the n values one after the other.
//! - `QUEUE_POP key` answers the queue's length as an `i64`, then (if it was not empty) the
//!   popped value; `QUEUE_LEN key` answers an `i64`. A non-empty queue counts as a present key
//!   for `CHECK`/`WAIT`, and a push wakes one waiter.
//! - `LIST_KEYS` answers an `i64` count, then the keys as strings.
//! - `BARRIER key i64` adds one to the counter at `key` and answers `STOP_WAITING` once the
//!   counter reaches the given world size (waiters are released together).
//!
//! PyTorch's own client prefixes every user key with `/` (its `init/` key, counted by
//! `wait_for_workers`, is the exception); [`KEY_PREFIX`] lets oxccl's client do the same so
//! both see one key space.
//!
//! This module only encodes and decodes: [`decode_request`] parses a query out of a buffer
//! (saying when it needs more bytes, refusing lengths over [`MAX_KEY_LEN`], [`MAX_VALUE_LEN`] and [`MAX_KEY_COUNT`] before any allocation),
//! the `put_*` functions build replies and queries, and the `read_*` functions read replies
//! from any [`Read`], allocating only as bytes actually arrive.

use std::io::{self, Read};

/// The `u32` a client's first query (`VALIDATE`) must carry.
pub const VALIDATION_MAGIC: u32 = 0x3C85_F7CE;
/// The prefix PyTorch's client puts before every user key.
pub const KEY_PREFIX: &str = "/";
/// The key PyTorch's `wait_for_workers` counts joined clients on (never prefixed).
pub const INIT_KEY: &str = "init/";
/// `CHECK`'s reply when every key is present.
pub const CHECK_READY: u8 = 0;
/// `CHECK`'s reply when some key is missing.
pub const CHECK_NOT_READY: u8 = 1;
/// `WAIT`'s (and `BARRIER`'s) reply once the keys are present.
pub const WAIT_STOP_WAITING: u8 = 0;
/// `CANCEL_WAIT`'s reply.
pub const WAIT_CANCELED: u8 = 1;

/// The longest key accepted (PyTorch's libuv server refuses longer ones too).
pub const MAX_KEY_LEN: usize = 8 * 1024;
/// The largest value accepted.
pub const MAX_VALUE_LEN: usize = 1 << 30;
/// The most keys one query may name (as PyTorch's libuv server).
pub const MAX_KEY_COUNT: usize = 128 * 1024;

/// The query types, numbered as PyTorch numbers them (`QueryType` in TCPStoreBackend.hpp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum QueryType {
    /// The handshake: a `u32` magic number, no reply.
    Validate = 0,
    /// key, value; no reply.
    Set = 1,
    /// key, expected, desired; replies the value after the call.
    CompareSet = 2,
    /// key; replies the value.
    Get = 3,
    /// key, i64; replies the new i64.
    Add = 4,
    /// keys; replies ready/not ready.
    Check = 5,
    /// keys; replies stop-waiting once all are present.
    Wait = 6,
    /// replies the key count.
    GetNumKeys = 7,
    /// key; replies the count deleted.
    DeleteKey = 8,
    /// key, value; no reply.
    Append = 9,
    /// keys; replies each value.
    MultiGet = 10,
    /// count, (key, value) pairs; no reply.
    MultiSet = 11,
    /// replies wait-canceled.
    CancelWait = 12,
    /// u32 nonce; replies it.
    Ping = 13,
    /// key, value; no reply.
    QueuePush = 14,
    /// key; replies length, then the value when non-empty.
    QueuePop = 15,
    /// key; replies the length.
    QueueLen = 16,
    /// replies the keys.
    ListKeys = 17,
    /// key, i64 world size; replies stop-waiting when all arrived.
    Barrier = 18,
}

impl QueryType {
    /// The query type of a byte, if it is one.
    pub fn from_byte(b: u8) -> Option<QueryType> {
        use QueryType::*;
        const ALL: [QueryType; 19] = [
            Validate, Set, CompareSet, Get, Add, Check, Wait, GetNumKeys, DeleteKey, Append,
            MultiGet, MultiSet, CancelWait, Ping, QueuePush, QueuePop, QueueLen, ListKeys, Barrier,
        ];
        ALL.get(usize::from(b)).copied()
    }
}

/// A decoded query, borrowing its keys and values from the buffer it was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `VALIDATE magic`.
    Validate(u32),
    /// `SET key value`.
    Set(&'a [u8], &'a [u8]),
    /// `COMPARE_SET key expected desired`.
    CompareSet(&'a [u8], &'a [u8], &'a [u8]),
    /// `GET key`.
    Get(&'a [u8]),
    /// `ADD key delta`.
    Add(&'a [u8], i64),
    /// `CHECK keys`.
    Check(Vec<&'a [u8]>),
    /// `WAIT keys`.
    Wait(Vec<&'a [u8]>),
    /// `GETNUMKEYS`.
    GetNumKeys,
    /// `DELETE_KEY key`.
    DeleteKey(&'a [u8]),
    /// `APPEND key value`.
    Append(&'a [u8], &'a [u8]),
    /// `MULTI_GET keys`.
    MultiGet(Vec<&'a [u8]>),
    /// `MULTI_SET (key value)*`.
    MultiSet(Vec<(&'a [u8], &'a [u8])>),
    /// `CANCEL_WAIT`.
    CancelWait,
    /// `PING nonce`.
    Ping(u32),
    /// `QUEUE_PUSH key value`.
    QueuePush(&'a [u8], &'a [u8]),
    /// `QUEUE_POP key`.
    QueuePop(&'a [u8]),
    /// `QUEUE_LEN key`.
    QueueLen(&'a [u8]),
    /// `LIST_KEYS`.
    ListKeys,
    /// `BARRIER key world_size`.
    Barrier(&'a [u8], i64),
}

impl Request<'_> {
    /// The query's type (what to name in messages: the fields may be a GiB of bytes).
    pub fn query_type(&self) -> QueryType {
        match self {
            Request::Validate(_) => QueryType::Validate,
            Request::Set(..) => QueryType::Set,
            Request::CompareSet(..) => QueryType::CompareSet,
            Request::Get(_) => QueryType::Get,
            Request::Add(..) => QueryType::Add,
            Request::Check(_) => QueryType::Check,
            Request::Wait(_) => QueryType::Wait,
            Request::GetNumKeys => QueryType::GetNumKeys,
            Request::DeleteKey(_) => QueryType::DeleteKey,
            Request::Append(..) => QueryType::Append,
            Request::MultiGet(_) => QueryType::MultiGet,
            Request::MultiSet(_) => QueryType::MultiSet,
            Request::CancelWait => QueryType::CancelWait,
            Request::Ping(_) => QueryType::Ping,
            Request::QueuePush(..) => QueryType::QueuePush,
            Request::QueuePop(_) => QueryType::QueuePop,
            Request::QueueLen(_) => QueryType::QueueLen,
            Request::ListKeys => QueryType::ListKeys,
            Request::Barrier(..) => QueryType::Barrier,
        }
    }
}

/// Why a query cannot be decoded: the server closes such a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The first byte is no known query type.
    UnknownQuery(u8),
    /// A key longer than [`MAX_KEY_LEN`].
    KeyTooLong(u64),
    /// A value longer than [`MAX_VALUE_LEN`].
    ValueTooLong(u64),
    /// More keys than [`MAX_KEY_COUNT`].
    TooManyKeys(u64),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::UnknownQuery(b) => write!(f, "unknown query type {b}"),
            WireError::KeyTooLong(n) => write!(f, "key of {n} bytes (max {MAX_KEY_LEN})"),
            WireError::ValueTooLong(n) => write!(f, "value of {n} bytes (max {MAX_VALUE_LEN})"),
            WireError::TooManyKeys(n) => write!(f, "{n} keys in one query (max {MAX_KEY_COUNT})"),
        }
    }
}

/// A cursor over a buffer that may hold only part of a query: `Ok(None)` means "read more".
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

type Step<T> = Result<Option<T>, WireError>;

/// `?` for "need more bytes": returns `Ok(None)` from the enclosing decoder.
macro_rules! need {
    ($e:expr) => {
        match $e? {
            Some(v) => v,
            None => return Ok(None),
        }
    };
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.buf.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N).and_then(|s| s.try_into().ok())
    }

    fn u32(&mut self) -> Step<u32> {
        Ok(self.array().map(u32::from_ne_bytes))
    }

    fn u64(&mut self) -> Step<u64> {
        Ok(self.array().map(u64::from_ne_bytes))
    }

    fn i64(&mut self) -> Step<i64> {
        Ok(self.array().map(i64::from_ne_bytes))
    }

    /// A length-prefixed field, its length checked against `max` before anything else.
    fn field(&mut self, max: usize, err: fn(u64) -> WireError) -> Step<&'a [u8]> {
        let len = need!(self.u64());
        if len > max as u64 {
            return Err(err(len));
        }
        // `len <= max <= usize::MAX` here, so the cast is exact.
        Ok(self.take(len as usize))
    }

    fn key(&mut self) -> Step<&'a [u8]> {
        self.field(MAX_KEY_LEN, WireError::KeyTooLong)
    }

    fn value(&mut self) -> Step<&'a [u8]> {
        self.field(MAX_VALUE_LEN, WireError::ValueTooLong)
    }

    fn count(&mut self) -> Step<usize> {
        let n = need!(self.u64());
        if n > MAX_KEY_COUNT as u64 {
            return Err(WireError::TooManyKeys(n));
        }
        Ok(Some(n as usize))
    }

    /// A key list; the vector grows with the keys actually present, never from the count.
    fn keys(&mut self) -> Step<Vec<&'a [u8]>> {
        let n = need!(self.count());
        let mut keys = Vec::new();
        for _ in 0..n {
            keys.push(need!(self.key()));
        }
        Ok(Some(keys))
    }
}

/// The key under which a client presents the shared token (`OXCCL_STORE_TOKEN`): a `CHECK`
/// of `TOKEN_KEY_PREFIX + token`, sent right after `VALIDATE`. PyTorch's keys all start with
/// `/` (or are `init/`), so none of them collides with it, and a server that checks no
/// token answers it like any missing key.
pub const TOKEN_KEY_PREFIX: &[u8] = b"\0oxccl-token/";

/// The key that presents `token`.
pub fn token_key(token: &str) -> Vec<u8> {
    let mut k = TOKEN_KEY_PREFIX.to_vec();
    k.extend_from_slice(token.as_bytes());
    k
}

/// Whether `req` presents exactly `token`, compared in time independent of where they differ.
pub fn presents_token(req: &Request<'_>, token: &[u8]) -> bool {
    let Request::Check(keys) = req else {
        return false;
    };
    let [key] = keys.as_slice() else {
        return false;
    };
    let Some(given) = key.strip_prefix(TOKEN_KEY_PREFIX) else {
        return false;
    };
    if given.len() != token.len() {
        return false;
    }
    given
        .iter()
        .zip(token)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// Decodes the query at the start of `buf`: `Ok(Some((query, bytes used)))`, `Ok(None)` when
/// `buf` holds only part of it, or the reason the query is refused.
pub fn decode_request(buf: &[u8]) -> Result<Option<(Request<'_>, usize)>, WireError> {
    let mut c = Cursor { buf, at: 0 };
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    c.at = 1;
    let q = QueryType::from_byte(first).ok_or(WireError::UnknownQuery(first))?;
    let req = match q {
        QueryType::Validate => Request::Validate(need!(c.u32())),
        QueryType::Set => Request::Set(need!(c.key()), need!(c.value())),
        QueryType::CompareSet => {
            Request::CompareSet(need!(c.key()), need!(c.value()), need!(c.value()))
        }
        QueryType::Get => Request::Get(need!(c.key())),
        QueryType::Add => Request::Add(need!(c.key()), need!(c.i64())),
        QueryType::Check => Request::Check(need!(c.keys())),
        QueryType::Wait => Request::Wait(need!(c.keys())),
        QueryType::GetNumKeys => Request::GetNumKeys,
        QueryType::DeleteKey => Request::DeleteKey(need!(c.key())),
        QueryType::Append => Request::Append(need!(c.key()), need!(c.value())),
        QueryType::MultiGet => Request::MultiGet(need!(c.keys())),
        QueryType::MultiSet => {
            let n = need!(c.count());
            let mut pairs = Vec::new();
            for _ in 0..n {
                pairs.push((need!(c.key()), need!(c.value())));
            }
            Request::MultiSet(pairs)
        }
        QueryType::CancelWait => Request::CancelWait,
        QueryType::Ping => Request::Ping(need!(c.u32())),
        QueryType::QueuePush => Request::QueuePush(need!(c.key()), need!(c.value())),
        QueryType::QueuePop => Request::QueuePop(need!(c.key())),
        QueryType::QueueLen => Request::QueueLen(need!(c.key())),
        QueryType::ListKeys => Request::ListKeys,
        QueryType::Barrier => Request::Barrier(need!(c.key()), need!(c.i64())),
    };
    Ok(Some((req, c.at)))
}

/// Appends a query-type byte.
pub fn put_query(out: &mut Vec<u8>, q: QueryType) {
    out.push(q as u8);
}

/// Appends one byte (a CHECK or WAIT reply).
pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

/// Appends a native-endian `u32`.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_ne_bytes());
}

/// Appends a native-endian `u64` (lengths and counts).
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_ne_bytes());
}

/// Appends a native-endian `i64`.
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_ne_bytes());
}

/// Appends a length-prefixed string or value.
pub fn put_bytes(out: &mut Vec<u8>, v: &[u8]) {
    put_u64(out, v.len() as u64);
    out.extend_from_slice(v);
}

/// Appends a key list (count, then each key).
pub fn put_keys<K: AsRef<[u8]>>(out: &mut Vec<u8>, keys: &[K]) {
    put_u64(out, keys.len() as u64);
    for k in keys {
        put_bytes(out, k.as_ref());
    }
}

/// Reads one byte.
pub fn read_u8(r: &mut impl Read) -> io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

/// Reads a native-endian `u32`.
pub fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_ne_bytes(b))
}

/// Reads a native-endian `i64`.
pub fn read_i64(r: &mut impl Read) -> io::Result<i64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(i64::from_ne_bytes(b))
}

/// Reads a length-prefixed value of at most `max` bytes. The buffer grows as bytes arrive
/// (in steps of at most 64 KiB), so a lying length costs nothing before the data comes.
pub fn read_bytes(r: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    let len = u64::from_ne_bytes(b);
    if len > max as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a value of {len} bytes (max {max})"),
        ));
    }
    let len = len as usize;
    let mut out = Vec::with_capacity(len.min(64 * 1024));
    let n = r.take(len as u64).read_to_end(&mut out)?;
    if n < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed inside a value",
        ));
    }
    Ok(out)
}

/// Parses the decimal integer PyTorch stores for `ADD` (surrounding ASCII whitespace allowed).
pub fn parse_counter(v: &[u8]) -> Option<i64> {
    std::str::from_utf8(v).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests;

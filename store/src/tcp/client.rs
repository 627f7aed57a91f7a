//! The store client: PyTorch's TCPStore client protocol over `std::net`.
//!
//! Connections are pooled rather than shared behind one lock: a call takes an idle connection
//! (or opens one), runs its query, and puts it back. A thread blocked in `get`/`wait` thus
//! never holds up another thread's `set` (PyTorch's client serializes all calls on one
//! socket, so a waiting thread there blocks everyone, for up to its timeout). The cost is a
//! second connection only while calls overlap.
//!
//! Writes with no reply in the protocol (`SET`, `APPEND`, `MULTI_SET`) are followed by a
//! `PING` in the same packet and its answer is awaited: the server answers a connection's
//! queries in order, so once the nonce is back the write is applied. Without this, a `set`
//! on one pooled connection could be overtaken by a `check` on another; it also reports a
//! lost server at the write instead of at some later call.
//!
//! Every socket read and write is bounded by the store's timeout; a connection that failed
//! in any way is dropped, never reused out of step with the server.
//!
//! # One connection, and watched keys at no cost
//!
//! A client keeps one idle connection (more exist only while calls overlap), so a process
//! costs its server one connection whatever the number of groups on it. A few keys may be
//! watched ([`Client::watched_is_set`], at most [`MAX_WATCHED`]): an idle connection per key
//! not yet seen set carries a `WAIT` on it, which the server answers only when the key is
//! set, so a process that asks again and again whether a key is set (the dump request, an
//! elastic group's alarm) sends nothing until then; the answer, if any, is read locally from
//! the socket. A call that takes such a connection sends `CANCEL_WAIT` in front of its own
//! query, in the same packet (no extra round trip), and reads the cancel's answer first; the
//! connection carries a `WAIT` again once it is back. A key seen set makes room for another.

use super::wire::{self, QueryType};
use oxccl_core::text::Escaped;
use oxccl_core::{text, Error, Result};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Keys one client watches at most (each keeps an idle connection waiting on it while unset);
/// asks for another key go to the server (see the module doc).
pub(crate) const MAX_WATCHED: usize = 4;
/// The smallest socket timeout (a zero `Duration` means "none" to the OS).
const MIN_TIMEOUT: Duration = Duration::from_millis(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A failure inside one query, kept as `io` until the call site names what was asked.
enum Fail {
    Io(io::Error),
    /// The wait's own deadline (given) passed; the connection is still in step.
    WaitTimedOut(Duration),
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Fail {
        Fail::Io(e)
    }
}

/// One validated connection to the server.
struct Conn {
    stream: TcpStream,
    /// The watched key (as sent) a `WAIT` was sent on, no answer read yet.
    parked: Option<String>,
    /// The watched key unparking it found set.
    saw: Option<String>,
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            parked: None,
            saw: None,
        }
    }

    /// Sends query bytes `q`. A parked connection sends `CANCEL_WAIT` first, in the same
    /// write, and reads its answer (after the `STOP_WAITING` that crossed it, when the
    /// watched key was set meanwhile), so the next byte read answers `q`.
    fn send(&mut self, q: &[u8]) -> io::Result<()> {
        let Some(key) = self.parked.take() else {
            return self.stream.write_all(q);
        };
        let mut all = Vec::with_capacity(1 + q.len());
        wire::put_query(&mut all, QueryType::CancelWait);
        all.extend_from_slice(q);
        self.stream.write_all(&all)?;
        let mut r = wire::read_u8(&mut self.stream)?;
        if r == wire::WAIT_STOP_WAITING {
            self.saw = Some(key);
            r = wire::read_u8(&mut self.stream)?;
        }
        if r != wire::WAIT_CANCELED {
            return Err(bad_reply("CANCEL_WAIT", r));
        }
        Ok(())
    }

    /// Parks the connection on `key` (a watched key, as sent).
    fn park(&mut self, key: &str) -> io::Result<()> {
        let mut q = Vec::with_capacity(key.len() + 16);
        wire::put_query(&mut q, QueryType::Wait);
        wire::put_keys(&mut q, &[key]);
        self.stream.write_all(&q)?;
        self.parked = Some(key.to_owned());
        Ok(())
    }

    /// Whether the server answered the parked `WAIT`, read without blocking: `Ok(true)` once
    /// it did (the connection is in step again, unparked), `Ok(false)` while it did not, an
    /// error when the connection is no longer usable.
    fn answered(&mut self) -> io::Result<bool> {
        use std::io::Read;
        self.stream.set_nonblocking(true)?;
        let mut b = [0u8; 1];
        let read = self.stream.read(&mut b);
        self.stream.set_nonblocking(false)?;
        match read {
            Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) if b[0] == wire::WAIT_STOP_WAITING => {
                self.parked = None;
                Ok(true)
            }
            Ok(_) => Err(bad_reply("WAIT", b[0])),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The idle connection(s) and the watched keys.
#[derive(Default)]
struct Pool {
    idle: Vec<Conn>,
    watched: Vec<Watched>,
}

/// A key a client watches (as sent), and whether it was seen set.
struct Watched {
    key: String,
    set: bool,
}

impl Pool {
    /// Idle connections kept: one, or one per watched key not seen set.
    fn max_idle(&self) -> usize {
        self.watched.iter().filter(|w| !w.set).count().max(1)
    }

    /// Notes that `key` was seen set.
    fn seen_set(&mut self, key: &str) {
        if let Some(w) = self.watched.iter_mut().find(|w| w.key == key) {
            w.set = true;
        }
    }

    /// Whether `key` is watched, made so when there is room (taking the place of a key seen
    /// set), and seen set: `None` when it is not watched.
    fn watch(&mut self, key: &str) -> Option<bool> {
        if let Some(w) = self.watched.iter().find(|w| w.key == key) {
            return Some(w.set);
        }
        let fresh = Watched {
            key: key.to_owned(),
            set: false,
        };
        if self.watched.len() < MAX_WATCHED {
            self.watched.push(fresh);
        } else {
            let done = self.watched.iter_mut().find(|w| w.set)?;
            *done = fresh;
        }
        Some(false)
    }

    /// An idle connection for a call: one waiting on nothing, else none while there is room
    /// for another idle one (the call opens it, and it waits on a watched key once back, so
    /// a client comes to keep a connection per watched key), else one waiting on a key (the
    /// call cancels that wait and the connection takes it up again once back).
    fn take(&mut self) -> Option<Conn> {
        if let Some(i) = self.idle.iter().position(|c| c.parked.is_none()) {
            return Some(self.idle.swap_remove(i));
        }
        if self.idle.len() < self.max_idle() {
            return None;
        }
        self.idle.pop()
    }

    /// Takes back `c` after a call that succeeded: kept idle if there is room, parked on a
    /// watched key not seen set that no idle connection waits on, else closed.
    fn put_back(&mut self, mut c: Conn) {
        if let Some(key) = c.saw.take() {
            self.seen_set(&key);
        }
        if self.idle.len() >= self.max_idle() {
            return;
        }
        if c.parked.is_none() {
            let waited = |k: &str| self.idle.iter().any(|i| i.parked.as_deref() == Some(k));
            let free = self.watched.iter().find(|w| !w.set && !waited(&w.key));
            if let Some(key) = free.map(|w| w.key.clone()) {
                if c.park(&key).is_err() {
                    return;
                }
            }
        }
        self.idle.push(c);
    }
}

/// A pool of connections to one TCP store server.
pub(crate) struct Client {
    /// `host:port` as the user gave it, for messages.
    name: String,
    addrs: Vec<SocketAddr>,
    timeout: Duration,
    pool: Mutex<Pool>,
    nonce: AtomicU32,
    /// The shared token sent on every new connection (`OXCCL_STORE_TOKEN`), if any.
    token: Option<String>,
}

impl Client {
    /// Connects to `host:port`, retrying with backoff until `timeout` (the server may not be
    /// up yet, as when every rank starts at once).
    /// With `token`, every connection presents it (see [`wire::token_key`]).
    pub(crate) fn connect(
        host: &str,
        port: u16,
        timeout: Duration,
        token: Option<&str>,
    ) -> Result<Client> {
        // Only shown in messages: escaped once here (see `oxccl_core::text`).
        let name = format!("{}:{port}", Escaped(host));
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| Error::invalid("host", format_args!("a resolvable host for {name}: {e}")))?
            .collect();
        let client = Client {
            name,
            addrs,
            timeout: timeout.max(MIN_TIMEOUT),
            pool: Mutex::new(Pool::default()),
            nonce: AtomicU32::new(std::process::id()),
            token: token.map(str::to_string),
        };
        let start = Instant::now();
        let deadline = start + client.timeout;
        let mut delay = Duration::from_millis(10);
        // Whether any attempt saw the server close the handshake: the last attempt may find
        // the server gone, and the likely cause must still be named.
        let mut handshake_closed = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match client.open(left.max(MIN_TIMEOUT)) {
                Ok(c) => {
                    lock(&client.pool).idle.push(c);
                    return Ok(client);
                }
                Err(e) => {
                    // A server that wants a token closes the handshake of a client without
                    // the right one: say so, it is the likely cause.
                    handshake_closed |= matches!(
                        e.kind(),
                        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
                    );
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let hint = if handshake_closed {
                            "; the server closed the handshake: a server started with \
                             OXCCL_STORE_TOKEN refuses clients without that token, and one \
                             at its connection limit refuses every new client (its log \
                             says which)"
                        } else {
                            ""
                        };
                        return Err(Error::Timeout {
                            what: text!(
                                "connecting to the TCP store at {} ({e}{hint})",
                                client.name
                            ),
                            after_ms: ms(start.elapsed()),
                        });
                    }
                    std::thread::sleep(delay.min(left));
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// Opens and validates one connection (one attempt per address).
    fn open(&self, connect_timeout: Duration) -> io::Result<Conn> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for a in &self.addrs {
            match TcpStream::connect_timeout(a, connect_timeout) {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    // The handshake shares the connect's deadline: something that accepts
                    // but never answers must not stretch the connect past its timeout.
                    let handshake = connect_timeout.clamp(MIN_TIMEOUT, self.timeout);
                    stream.set_read_timeout(Some(handshake))?;
                    stream.set_write_timeout(Some(handshake))?;
                    let mut c = Conn::new(stream);
                    // The handshake PyTorch's servers require, then a ping as PyTorch's
                    // client does, which proves the server answers.
                    let mut q = Vec::with_capacity(16);
                    wire::put_query(&mut q, QueryType::Validate);
                    wire::put_u32(&mut q, wire::VALIDATION_MAGIC);
                    if let Some(t) = &self.token {
                        self.present_token(&mut c, q, t)?;
                        q = Vec::new();
                    }
                    self.ping_after(&mut c, q)?;
                    c.stream.set_read_timeout(Some(self.timeout))?;
                    c.stream.set_write_timeout(Some(self.timeout))?;
                    return Ok(c);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Sends `q` followed by the token's `CHECK` (see [`wire::token_key`]). A server that
    /// checks tokens answers ready; one that does not (PyTorch's, or oxccl's started without
    /// a token) answers not-ready for this key it never stores, and the client goes on.
    fn present_token(&self, c: &mut Conn, mut q: Vec<u8>, token: &str) -> io::Result<()> {
        wire::put_query(&mut q, QueryType::Check);
        wire::put_keys(&mut q, &[wire::token_key(token)]);
        c.send(&q)?;
        match wire::read_u8(&mut c.stream)? {
            wire::CHECK_READY | wire::CHECK_NOT_READY => Ok(()),
            b => Err(bad_reply("CHECK", b)),
        }
    }

    /// Sends `q` followed by a `PING`, and waits for the nonce.
    fn ping_after(&self, c: &mut Conn, mut q: Vec<u8>) -> io::Result<()> {
        let nonce = self.nonce.fetch_add(1, Ordering::Relaxed);
        wire::put_query(&mut q, QueryType::Ping);
        wire::put_u32(&mut q, nonce);
        c.send(&q)?;
        let got = wire::read_u32(&mut c.stream)?;
        if got != nonce {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("ping answered {got}, expected {nonce}"),
            ));
        }
        Ok(())
    }

    /// Runs `f` on a pooled connection; `what` names the call in errors.
    fn with<T>(
        &self,
        what: &str,
        f: impl FnOnce(&Self, &mut Conn) -> std::result::Result<T, Fail>,
    ) -> Result<T> {
        let pooled = lock(&self.pool).take();
        let mut c = match pooled {
            Some(c) => c,
            // A fresh connection after the first: one attempt, the server should be up.
            None => self.open(self.timeout).map_err(|e| self.error(what, &e))?,
        };
        match f(self, &mut c) {
            Ok(v) => {
                lock(&self.pool).put_back(c);
                Ok(v)
            }
            Err(Fail::Io(e)) => Err(self.error(what, &e)),
            Err(Fail::WaitTimedOut(after)) => Err(Error::Timeout {
                what: text!("{what} at the TCP store {}", self.name),
                after_ms: ms(after),
            }),
        }
    }

    fn error(&self, what: &str, e: &io::Error) -> Error {
        use io::ErrorKind::*;
        match e.kind() {
            WouldBlock | TimedOut => Error::Timeout {
                what: text!("no answer to {what} from the TCP store at {}", self.name),
                after_ms: ms(self.timeout),
            },
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => Error::Remote {
                detail: text!(
                    "the TCP store at {} closed the connection during {what}",
                    self.name
                ),
            },
            ConnectionRefused => Error::Remote {
                detail: text!(
                    "the TCP store at {} refused a connection for {what}",
                    self.name
                ),
            },
            _ => Error::Remote {
                detail: text!("TCP store at {}, {what}: {e}", self.name),
            },
        }
    }

    /// A query whose answer `read` decodes.
    fn ask<T>(
        &self,
        what: &str,
        q: Vec<u8>,
        read: impl FnOnce(&mut TcpStream) -> io::Result<T>,
    ) -> Result<T> {
        self.with(what, |_, c| {
            c.send(&q)?;
            Ok(read(&mut c.stream)?)
        })
    }

    /// A query with no answer of its own, acknowledged by a trailing ping.
    pub(crate) fn tell(&self, what: &str, q: Vec<u8>) -> Result<()> {
        self.with(what, |me, c| Ok(me.ping_after(c, q)?))
    }

    pub(crate) fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut q = Vec::with_capacity(key.len() + value.len() + 32);
        wire::put_query(&mut q, QueryType::Set);
        wire::put_bytes(&mut q, key.as_bytes());
        wire::put_bytes(&mut q, value);
        self.tell("set", q)
    }

    pub(crate) fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut q = Vec::new();
        wire::put_query(&mut q, QueryType::Add);
        wire::put_bytes(&mut q, key.as_bytes());
        wire::put_i64(&mut q, delta);
        self.ask("add", q, wire::read_i64)
    }

    /// Waits for `keys`, then reads them with `MULTI_GET` (PyTorch's `GET` is a `WAIT` then
    /// a `GET`; one `MULTI_GET` does both jobs for any number of keys).
    pub(crate) fn get(&self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let what = describe("get", keys);
        self.with(&what, |me, c| {
            me.wait_on(c, keys, timeout)?;
            let mut q = Vec::new();
            if let [key] = keys {
                wire::put_query(&mut q, QueryType::Get);
                wire::put_bytes(&mut q, key.as_bytes());
                c.send(&q)?;
                return Ok(vec![wire::read_bytes(&mut c.stream, wire::MAX_VALUE_LEN)?]);
            }
            wire::put_query(&mut q, QueryType::MultiGet);
            wire::put_keys(&mut q, keys);
            c.send(&q)?;
            let mut out = Vec::new();
            for _ in keys {
                out.push(wire::read_bytes(&mut c.stream, wire::MAX_VALUE_LEN)?);
            }
            Ok(out)
        })
    }

    pub(crate) fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let what = describe("wait for", keys);
        self.with(&what, |me, c| me.wait_on(c, keys, timeout))
    }

    /// `WAIT` with its own deadline; on expiry, `CANCEL_WAIT` brings the connection back in
    /// step (a `STOP_WAITING` that crossed the cancel arrives first and is skipped).
    fn wait_on(
        &self,
        c: &mut Conn,
        keys: &[&str],
        timeout: Duration,
    ) -> std::result::Result<(), Fail> {
        let mut q = Vec::new();
        wire::put_query(&mut q, QueryType::Wait);
        wire::put_keys(&mut q, keys);
        c.send(&q)?;
        c.stream.set_read_timeout(Some(timeout.max(MIN_TIMEOUT)))?;
        let first = wire::read_u8(&mut c.stream);
        c.stream.set_read_timeout(Some(self.timeout))?;
        match first {
            Ok(wire::WAIT_STOP_WAITING) => return Ok(()),
            Ok(other) => return Err(bad_reply("WAIT", other).into()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
        let mut q = Vec::new();
        wire::put_query(&mut q, QueryType::CancelWait);
        c.send(&q)?;
        let mut r = wire::read_u8(&mut c.stream)?;
        if r == wire::WAIT_STOP_WAITING {
            r = wire::read_u8(&mut c.stream)?;
        }
        if r != wire::WAIT_CANCELED {
            return Err(bad_reply("CANCEL_WAIT", r).into());
        }
        Err(Fail::WaitTimedOut(timeout))
    }

    /// Whether `key` (as sent) is set, for a caller that asks again and again. The first
    /// call makes it a watched key if there is room (see the module doc); after that the
    /// answer is read from the socket of the idle connection waiting on it, without a query.
    /// When no such connection is idle (a call holds it; the server closed it) or the key is
    /// not watched, the server is asked (`CHECK`), so the answer is never late.
    pub(crate) fn watched_is_set(&self, key: &str) -> Result<bool> {
        {
            let mut pool = lock(&self.pool);
            match pool.watch(key) {
                Some(true) => return Ok(true),
                Some(false) => {
                    let parked = pool
                        .idle
                        .iter()
                        .position(|c| c.parked.as_deref() == Some(key));
                    if let Some(i) = parked {
                        match pool.idle[i].answered() {
                            Ok(answered) => {
                                if answered {
                                    pool.seen_set(key);
                                }
                                return Ok(answered);
                            }
                            // Out of step or closed: dropped, and the server asked below.
                            Err(_) => drop(pool.idle.swap_remove(i)),
                        }
                    }
                }
                None => {}
            }
        }
        // Going through the pool parks the connection on the way back.
        let set = self.check(&[key])?;
        if set {
            lock(&self.pool).seen_set(key);
        }
        Ok(set)
    }

    pub(crate) fn check(&self, keys: &[&str]) -> Result<bool> {
        let mut q = Vec::new();
        wire::put_query(&mut q, QueryType::Check);
        wire::put_keys(&mut q, keys);
        self.ask("check", q, |s| match wire::read_u8(s)? {
            wire::CHECK_READY => Ok(true),
            wire::CHECK_NOT_READY => Ok(false),
            other => Err(bad_reply("CHECK", other)),
        })
    }

    pub(crate) fn compare_set(
        &self,
        key: &str,
        expected: &[u8],
        desired: &[u8],
    ) -> Result<Vec<u8>> {
        let mut q = Vec::new();
        wire::put_query(&mut q, QueryType::CompareSet);
        wire::put_bytes(&mut q, key.as_bytes());
        wire::put_bytes(&mut q, expected);
        wire::put_bytes(&mut q, desired);
        self.ask("compare_set", q, |s| {
            wire::read_bytes(s, wire::MAX_VALUE_LEN)
        })
    }

    pub(crate) fn delete(&self, key: &str) -> Result<bool> {
        let mut q = Vec::new();
        wire::put_query(&mut q, QueryType::DeleteKey);
        wire::put_bytes(&mut q, key.as_bytes());
        self.ask("delete", q, |s| Ok(wire::read_i64(s)? == 1))
    }

    pub(crate) fn num_keys(&self) -> Result<u64> {
        let mut q = Vec::new();
        wire::put_query(&mut q, QueryType::GetNumKeys);
        self.ask("num_keys", q, |s| {
            let n = wire::read_i64(s)?;
            u64::try_from(n)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "negative key count"))
        })
    }
}

fn bad_reply(query: &str, byte: u8) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected answer {byte} to {query}"),
    )
}

/// `"get `a`, `b`"`, cut to a readable length (the error text is bounded anyway).
fn describe(verb: &str, keys: &[&str]) -> String {
    let mut s = verb.to_string();
    for (i, k) in keys.iter().enumerate() {
        s.push_str(if i == 0 { " key `" } else { "`, `" });
        s.push_str(k.strip_prefix(wire::KEY_PREFIX).unwrap_or(k));
    }
    if !keys.is_empty() {
        s.push('`');
    }
    s
}

//! The store server's event loops over non-blocking sockets (epoll through `mio`): one to
//! eight, by cores, each serving its share of the client connections, all over one key space.
//!
//! Each wakeup admits the connections the accepting threads handed this loop (see
//! [`super::acceptor`]), reads what ready clients sent, applies each complete query to the
//! key space and queues its reply, then writes the queued replies. A `WAIT` that cannot be
//! answered at once leaves a pending wait in the key space; the query that sets its last key
//! queues `STOP_WAITING` on the waiter. A waiter served by another loop gets it through that
//! loop's mailbox, filled under the key space's lock in the same hold as the query, and
//! emptied under that lock before the other loop applies any query: so a `STOP_WAITING`
//! always comes before the `WAIT_CANCELED` of a `CANCEL_WAIT` that crossed it, in the order
//! PyTorch's client expects, whichever loops serve the setter and the waiter.
//!
//! A client can only lose its own connection: a bad query, a query past the limits or a
//! failed socket closes it; a client that stops reading its replies has its further queries
//! held back, and is dropped once its replies make no progress for [`WRITE_TIMEOUT`]. A client
//! that sends without pause is served a bounded number of reads per turn, so it cannot starve
//! the others.

use super::conn::{Close, Conn, Filled};
use super::fd_limit;
use super::limits::ServerLimits;
use super::state::State;
use super::wire::{self, Request};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The token of the waker that [`super::TcpServer`] uses to stop the loop, and the
/// accepting thread to say connections wait.
pub(super) const WAKER: Token = Token(1);
/// Connections are numbered from here on, never reused.
const FIRST_CONN: usize = 2;
/// How long queued replies may make no progress before their connection is dropped.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often stalled writers are checked against [`WRITE_TIMEOUT`].
const TICK: Duration = Duration::from_secs(1);
/// Reads one connection gets per turn before the others are served.
const READS_PER_TURN: usize = 16;
/// The one read buffer, shared by every connection.
const CHUNK: usize = 64 * 1024;

/// Locks `m`, taking the data even if a thread panicked while holding it: the state is plain
/// maps, always consistent between statements, and a server must keep serving.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The key space, and the wake-ups each loop owes its connections from queries other loops
/// applied (by loop), under one lock (see the module doc for why together).
pub(super) struct Space {
    pub(super) state: State,
    mail: Vec<Vec<u64>>,
}

impl Space {
    /// `state` for `loops` event loops, no mail yet.
    pub(super) fn new(state: State, loops: usize) -> Space {
        Space {
            state,
            mail: vec![Vec::new(); loops],
        }
    }
}

/// What the loops share with each other and with their [`super::TcpServer`] handle.
pub(super) struct Shared {
    /// The key space (locked by a loop per query, and by `stats`).
    pub(super) state: Mutex<Space>,
    /// Set by the handle to end the loop (then woken through the waker).
    pub(super) stopping: AtomicBool,
    /// Open client connections.
    pub(super) connections: AtomicUsize,
    /// Query bytes read ahead, over all connections.
    pub(super) buffered: AtomicUsize,
    /// Queries applied to the key space since the server started.
    pub(super) queries: AtomicU64,
}

/// One event loop and every connection it serves.
pub(super) struct EventLoop {
    poll: Poll,
    /// This loop's index, and how many loops serve.
    me: usize,
    loops: usize,
    /// Every loop's waker, by index (to say it has mail).
    peers: Vec<Arc<Waker>>,
    /// Connections the accepting thread took, not yet admitted.
    incoming: Receiver<TcpStream>,
    shared: Arc<Shared>,
    limits: ServerLimits,
    /// The token clients must present, if any.
    token: Option<Vec<u8>>,
    conns: HashMap<usize, Conn>,
    next: usize,
    chunk: Vec<u8>,
    /// Connections with replies to write.
    dirty: Vec<usize>,
    /// Connections to serve again next turn (more to read, or queries held back until now).
    again: Vec<usize>,
    /// Connections whose replies wait for the socket.
    stalled: HashSet<usize>,
    warned_full: bool,
}

impl EventLoop {
    /// Loop `me` of `loops`, serving the connections `incoming` brings, and the waker that
    /// interrupts it. It serves once it knows the others' wakers ([`EventLoop::run`]).
    pub(super) fn new(
        me: usize,
        loops: usize,
        incoming: Receiver<TcpStream>,
        shared: Arc<Shared>,
        limits: ServerLimits,
        token: Option<Vec<u8>>,
    ) -> io::Result<(EventLoop, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let ev = EventLoop {
            poll,
            me,
            loops,
            peers: Vec::new(),
            incoming,
            shared,
            limits,
            token,
            conns: HashMap::new(),
            next: FIRST_CONN + me,
            chunk: vec![0; CHUNK],
            dirty: Vec::new(),
            again: Vec::new(),
            stalled: HashSet::new(),
            warned_full: false,
        };
        Ok((ev, waker))
    }

    /// Serves, with `peers` the wakers of every loop (by index), until the handle sets
    /// `stopping`; then closes every connection.
    pub(super) fn run(mut self, peers: Vec<Arc<Waker>>) {
        self.peers = peers;
        let mut events = Events::with_capacity(1024);
        let mut last_tick = Instant::now();
        while !self.shared.stopping.load(Ordering::SeqCst) {
            let timeout = if self.again.is_empty() {
                TICK
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                log::error!("oxccl store: the event loop cannot poll, stopping: {e}");
                break;
            }
            if self.shared.stopping.load(Ordering::SeqCst) {
                break;
            }
            // New clients first: their events may be among these.
            self.admit_incoming();
            for ev in events.iter() {
                match ev.token() {
                    WAKER => self.read_mail(),
                    Token(id) => {
                        if ev.is_writable() {
                            self.dirty.push(id);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.serve(id);
                        }
                    }
                }
            }
            for id in std::mem::take(&mut self.again) {
                self.serve(id);
            }
            self.flush_dirty();
            if last_tick.elapsed() >= TICK {
                self.drop_stalled();
                last_tick = Instant::now();
            }
        }
        self.close_all();
    }

    /// Queues the `STOP_WAITING`s other loops' queries owe this loop's connections.
    fn read_mail(&mut self) {
        let mail = std::mem::take(&mut lock(&self.shared.state).mail[self.me]);
        self.wake_local(mail);
    }

    /// Queues `STOP_WAITING` on each of this loop's connections `ids` (gone ones skipped).
    fn wake_local(&mut self, ids: Vec<u64>) {
        for w in ids {
            let w = w as usize;
            if let Some(c) = self.conns.get_mut(&w) {
                c.push(vec![wire::WAIT_STOP_WAITING]);
                self.dirty.push(w);
            }
        }
    }

    /// Admits every connection the accepting threads handed this loop.
    fn admit_incoming(&mut self) {
        while let Ok(stream) = self.incoming.try_recv() {
            self.admit(stream);
        }
    }

    /// Serves a new client, or closes it when the server is full.
    fn admit(&mut self, stream: TcpStream) {
        let max = self.limits.max_connections;
        if self.shared.connections.load(Ordering::SeqCst) >= max {
            if !self.warned_full {
                self.warned_full = true;
                log::warn!(
                    "oxccl store: {max} clients already, refusing more (warned once); raise \
                     ServerLimits::max_connections or OXCCL_STORE_MAX_CONNECTIONS, and the \
                     descriptor limit (`ulimit -n`, now {}) with it",
                    fd_limit::limit_text()
                );
            }
            return;
        }
        let _ = stream.set_nodelay(true);
        let id = self.next;
        self.next += self.loops;
        let mut conn = Conn::new(stream, self.token.is_none());
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self
            .poll
            .registry()
            .register(conn.stream(), Token(id), interest)
        {
            log::debug!("oxccl store: cannot watch a new client: {e}");
            return;
        }
        self.conns.insert(id, conn);
        self.shared.connections.fetch_add(1, Ordering::SeqCst);
    }

    /// Applies what connection `id` has read ahead, then reads and applies more; closes it
    /// when it fails or misbehaves.
    fn serve(&mut self, id: usize) {
        if let Err(why) = self.serve_or_close(id) {
            self.close(id, &why);
        }
    }

    fn serve_or_close(&mut self, id: usize) -> Result<(), Close> {
        self.apply_queries(id)?;
        for _ in 0..READS_PER_TURN {
            let Some(conn) = self.conns.get_mut(&id) else {
                return Ok(());
            };
            if conn.eof || conn.backed_up() {
                return Ok(());
            }
            let n = match conn.read_into(&mut self.chunk)? {
                Filled::Drained => return Ok(()),
                Filled::Eof => {
                    // The client is gone for queries: drop its wait, end once replies are out.
                    conn.eof = true;
                    lock(&self.shared.state).state.remove_pending(id as u64);
                    self.dirty.push(id);
                    return Ok(());
                }
                Filled::Bytes(n) => n,
            };
            let limits = &self.limits;
            if conn.buf.len() + n > limits.max_query_bytes {
                return Err(Close::Protocol(format!(
                    "a query past {} bytes",
                    limits.max_query_bytes
                )));
            }
            let total = self.shared.buffered.fetch_add(n, Ordering::SeqCst) + n;
            if total > limits.max_buffered_bytes {
                self.shared.buffered.fetch_sub(n, Ordering::SeqCst);
                return Err(Close::Protocol(format!(
                    "clients have {} bytes of queries in flight already",
                    limits.max_buffered_bytes
                )));
            }
            conn.keep(&self.chunk[..n]);
            self.apply_queries(id)?;
        }
        // More may be waiting in the socket: serve the others first.
        self.again.push(id);
        Ok(())
    }

    /// Applies the complete queries connection `id` has read ahead (until its replies back
    /// up), queuing their replies and the wake-ups they cause.
    fn apply_queries(&mut self, id: usize) -> Result<(), Close> {
        let EventLoop {
            conns,
            shared,
            token,
            dirty,
            me,
            loops,
            peers,
            ..
        } = self;
        let (me, loops) = (*me, *loops);
        // Loops owed a wake-up by these queries, a bit each (each told once, after; a server
        // runs at most 64 loops).
        let mut told: u64 = 0;
        let Some(conn) = conns.get_mut(&id) else {
            return Ok(());
        };
        let mut used = 0;
        let mut woken: Vec<u64> = Vec::new();
        let result = loop {
            if conn.backed_up() {
                break Ok(());
            }
            let req = match wire::decode_request(&conn.buf[used..]) {
                Ok(Some((req, n))) => {
                    used += n;
                    req
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(Close::Protocol(format!("refused query: {e}"))),
            };
            if !conn.validated {
                // PyTorch's servers accept nothing before a correct VALIDATE.
                match req {
                    Request::Validate(wire::VALIDATION_MAGIC) => conn.validated = true,
                    other => {
                        break Err(Close::Protocol(format!(
                            "first query must be VALIDATE with the magic, got {:?}",
                            other.query_type()
                        )))
                    }
                }
                continue;
            }
            if !conn.authenticated {
                // The first query after VALIDATE must present the token.
                let expected = token.as_deref().unwrap_or_default();
                if !wire::presents_token(&req, expected) {
                    break Err(Close::Protocol("no valid store token".into()));
                }
                conn.authenticated = true;
                conn.push(vec![wire::CHECK_READY]);
                continue;
            }
            let mut out = Vec::new();
            shared.queries.fetch_add(1, Ordering::Relaxed);
            // Wake-ups owed to this connection by other loops' queries: before this reply.
            let mut owed = 0;
            let applied = {
                let mut space = lock(&shared.state);
                for w in std::mem::take(&mut space.mail[me]) {
                    if w == id as u64 {
                        owed += 1;
                    } else {
                        woken.push(w);
                    }
                }
                let mut released = Vec::new();
                let applied = space.state.apply(id as u64, req, &mut out, &mut released);
                for w in released {
                    match owner(w, loops) {
                        o if o == me => woken.push(w),
                        o => {
                            space.mail[o].push(w);
                            told |= 1 << o;
                        }
                    }
                }
                applied
            };
            for _ in 0..owed {
                conn.push(vec![wire::WAIT_STOP_WAITING]);
            }
            if let Err(e) = applied {
                break Err(Close::Protocol(e));
            }
            conn.push(out);
        };
        conn.consume(used);
        shared.buffered.fetch_sub(used, Ordering::SeqCst);
        if conn.queued() > 0 {
            dirty.push(id);
        }
        // Queued right after the query that released them, before anything else those
        // waiters may be sent (see the module doc).
        for w in woken {
            let w = w as usize;
            if let Some(c) = conns.get_mut(&w) {
                c.push(vec![wire::WAIT_STOP_WAITING]);
                dirty.push(w);
            }
        }
        for o in (0..loops).filter(|o| told & (1 << o) != 0) {
            if let Some(waker) = peers.get(o) {
                if let Err(e) = waker.wake() {
                    // It still reads its mail before its next query, and within its tick.
                    log::debug!("oxccl store: cannot wake loop {o}: {e}");
                }
            }
        }
        result
    }

    /// Writes the queued replies of the connections that have some, or could write again.
    fn flush_dirty(&mut self) {
        let now = Instant::now();
        for id in std::mem::take(&mut self.dirty) {
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            let was_backed_up = conn.backed_up();
            if let Err(why) = conn.flush(now) {
                self.close(id, &why);
                continue;
            }
            if was_backed_up && !conn.backed_up() {
                // Its held-back queries can go on now.
                self.again.push(id);
            }
            if conn.queued() > 0 {
                self.stalled.insert(id);
                continue;
            }
            self.stalled.remove(&id);
            if conn.eof {
                self.close(id, &Close::Peer);
            }
        }
    }

    /// Drops the connections whose replies made no progress for [`WRITE_TIMEOUT`].
    fn drop_stalled(&mut self) {
        let now = Instant::now();
        let conns = &self.conns;
        self.stalled.retain(|id| conns.contains_key(id));
        let late: Vec<usize> = self
            .stalled
            .iter()
            .copied()
            .filter(|id| {
                conns
                    .get(id)
                    .and_then(|c| c.stalled_since)
                    .is_some_and(|t| now.duration_since(t) >= WRITE_TIMEOUT)
            })
            .collect();
        for id in late {
            let why = io::Error::new(
                io::ErrorKind::TimedOut,
                format!("its replies made no progress for {WRITE_TIMEOUT:?}"),
            );
            self.close(id, &Close::Io(why));
        }
    }

    /// Forgets connection `id` (its wait and its read-ahead included) and closes its socket.
    fn close(&mut self, id: usize, why: &Close) {
        let Some(mut conn) = self.conns.remove(&id) else {
            return;
        };
        let _ = self.poll.registry().deregister(conn.stream());
        lock(&self.shared.state).state.remove_pending(id as u64);
        self.shared
            .buffered
            .fetch_sub(conn.buf.len(), Ordering::SeqCst);
        self.shared.connections.fetch_sub(1, Ordering::SeqCst);
        self.stalled.remove(&id);
        match why {
            Close::Peer => {}
            Close::Protocol(p) => log::debug!("oxccl store: closing client {id}: {p}"),
            Close::Io(e) => log::debug!("oxccl store: client {id} failed: {e}"),
        }
    }

    /// Closes every connection (their clients' pending calls fail at once).
    fn close_all(&mut self) {
        let ids: Vec<usize> = self.conns.keys().copied().collect();
        for id in ids {
            self.close(id, &Close::Peer);
        }
    }
}

/// The loop that serves connection `id` (ids are dealt to the loops in turn).
pub(super) fn owner(id: u64, loops: usize) -> usize {
    (id as usize - FIRST_CONN) % loops.max(1)
}

//! The store server: PyTorch's TCPStore server protocol over `std::net`, a thread per client.
//!
//! One mutex guards the whole key space (every query is short; the only slow part, writing
//! a reply, happens outside it). A `WAIT` that cannot be answered at once registers the
//! connection as pending; whichever thread later sets the last awaited key writes
//! `STOP_WAITING` to that connection itself, as PyTorch's event-loop server does. Each
//! connection's socket writes go through its own mutex, taken while the key-space lock is
//! still held, so a `STOP_WAITING` always reaches the client before a `WAIT_CANCELED` that
//! crossed it, in the order PyTorch's client expects.
//!
//! A hostile or broken client can only lose its own connection: lengths are bounded before
//! anything is allocated (see [`super::wire`]), a bad query closes the connection, a client
//! that stops reading times out on write, and nothing here panics on input. What the server
//! holds is bounded by its [`ServerLimits`] (connections, bytes read ahead, stored bytes,
//! awaited keys: see [`super::limits`] for the bound), and [`TcpServer::stats`] shows it. With
//! a token ([`ServerOptions::token`]) a client must present it right after `VALIDATE`.

use super::limits::{ServerLimits, ServerOptions, ServerStats};
use super::state::{State, Writer};
use super::wire::{self, Request, WireError};
use oxccl_core::text::Escaped;
use oxccl_core::{text, Error, Result};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a write to a client may stall before the connection is dropped: a client that
/// stops reading must not hold a server thread forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection thread's stack: it keeps its buffers on the heap and needs little.
const CONN_STACK: usize = 256 * 1024;
/// How long `shutdown` waits for the connection threads to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Locks `m`, taking the data even if a thread panicked while holding it: the state is plain
/// maps, always consistent between statements, and a server must keep serving.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the server threads share.
struct Shared {
    state: Mutex<State>,
    stopping: AtomicBool,
    next_id: AtomicU64,
    /// Open connections, to close them on shutdown.
    conns: Mutex<HashMap<u64, TcpStream>>,
    /// Live connection threads, and a condition to wait for none.
    live: Mutex<usize>,
    none_live: Condvar,
    limits: ServerLimits,
    /// The token clients must present, if any.
    token: Option<Vec<u8>>,
    /// Query bytes read ahead, over all connections.
    buffered: AtomicUsize,
}

/// Why a connection is closed.
enum Close {
    Peer,
    Protocol(String),
    Io(io::Error),
}

/// A TCP store server speaking PyTorch's TCPStore protocol: torch clients
/// (`TCPStore(host, port, is_master=False)`) and oxccl's [`super::TcpStore`] both use it.
///
/// It serves from background threads until [`TcpServer::shutdown`] or drop, which close every
/// client connection (their pending calls fail at once instead of hanging).
pub struct TcpServer {
    shared: Arc<Shared>,
    port: u16,
    local: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl TcpServer {
    /// Binds `host:port` (port 0 picks a free one) and starts serving, with the default
    /// limits and the token of `OXCCL_STORE_TOKEN`, if set ([`ServerOptions::from_env`]).
    pub fn bind(host: &str, port: u16) -> Result<TcpServer> {
        TcpServer::bind_with(host, port, ServerOptions::from_env())
    }

    /// Binds `host:port` exactly as given (a wildcard address listens on every interface)
    /// and starts serving under `opts`.
    pub fn bind_with(host: &str, port: u16, opts: ServerOptions) -> Result<TcpServer> {
        let addrs = (host, port).to_socket_addrs().map_err(|e| {
            Error::invalid(
                "host",
                format_args!("a resolvable host, got `{}`: {e}", Escaped(host)),
            )
        })?;
        let mut last: Option<io::Error> = None;
        let mut listener = None;
        for a in addrs {
            match TcpListener::bind(a) {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(listener) = listener else {
            let why = last.map_or_else(|| "no address".to_string(), |e| e.to_string());
            return Err(Error::invalid(
                "port",
                format_args!("a port free to bind on {}:{port}: {why}", Escaped(host)),
            ));
        };
        let local = listener
            .local_addr()
            .map_err(|e| Error::invalid("port", format_args!("a bound socket: {e}")))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(&opts.limits)),
            stopping: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            live: Mutex::new(0),
            none_live: Condvar::new(),
            limits: opts.limits,
            token: opts.token.map(String::into_bytes),
            buffered: AtomicUsize::new(0),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("oxccl-store-accept".into())
            .spawn(move || accept_loop(&s, &listener))
            .map_err(|e| Error::Remote {
                detail: text!("cannot start the store's accept thread: {e}"),
            })?;
        Ok(TcpServer {
            shared,
            port: local.port(),
            local,
            accept: Some(accept),
        })
    }

    /// The port the server listens on (the one picked, when bound with port 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// What the server holds now (connections, bytes read ahead, stored, awaited), to check
    /// it against its [`ServerLimits`].
    pub fn stats(&self) -> ServerStats {
        let connections = *lock(&self.shared.live);
        let (stored_bytes, (waited_bytes, waiting_connections)) = {
            let st = lock(&self.shared.state);
            (st.stored_bytes(), st.waits())
        };
        ServerStats {
            connections,
            buffered_bytes: self.shared.buffered.load(Ordering::SeqCst),
            stored_bytes,
            waiting_connections,
            waited_bytes,
        }
    }

    /// Stops accepting, closes every client connection and waits (briefly) for the server's
    /// threads to end.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        for (_, c) in lock(&self.shared.conns).drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
        // Wake the blocking accept with a connection of our own; it sees `stopping` and ends.
        let ip = match self.local.ip() {
            IpAddr::V4(v) if v.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(v) if v.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let woke =
            TcpStream::connect_timeout(&SocketAddr::new(ip, self.port), Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            if woke.is_ok() {
                let _ = h.join();
            }
        }
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        let mut live = lock(&self.shared.live);
        while *live > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            live = match self.shared.none_live.wait_timeout(live, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for TcpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpServer")
            .field("local", &self.local)
            .finish()
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else {
            // Transient (EMFILE, aborted handshakes): back off a little and go on.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let (Ok(closer), Ok(writer)) = (stream.try_clone(), stream.try_clone()) else {
            continue;
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        {
            // Checked under the lock `stop` drains with: a connection accepted while the
            // server stops is either closed by `stop` or never registered (dropped here).
            let mut conns = lock(&shared.conns);
            if shared.stopping.load(Ordering::SeqCst) {
                return;
            }
            conns.insert(id, closer);
        }
        {
            let mut live = lock(&shared.live);
            let max = shared.limits.max_connections;
            if *live >= max {
                drop(live);
                log::warn!("oxccl store: {max} clients already, refusing one");
                if let Some(c) = lock(&shared.conns).remove(&id) {
                    let _ = c.shutdown(Shutdown::Both);
                }
                continue;
            }
            *live += 1;
        }
        let s = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("oxccl-store-conn".into())
            .stack_size(CONN_STACK)
            .spawn(move || {
                let writer = Arc::new(Writer(Mutex::new(writer)));
                let why = serve(&s, id, stream, &writer);
                if let Close::Protocol(p) = &why {
                    log::debug!("oxccl store: closing client {id}: {p}");
                } else if let Close::Io(e) = &why {
                    log::debug!("oxccl store: client {id} failed: {e}");
                }
                finish(&s, id);
            });
        if spawned.is_err() {
            finish(shared, id);
        }
    }
}

/// Forgets connection `id` (its wait included) and counts its thread out.
fn finish(shared: &Shared, id: u64) {
    lock(&shared.state).remove_pending(id);
    if let Some(c) = lock(&shared.conns).remove(&id) {
        let _ = c.shutdown(Shutdown::Both);
    }
    let mut live = lock(&shared.live);
    *live = live.saturating_sub(1);
    if *live == 0 {
        shared.none_live.notify_all();
    }
}

/// Reads and answers queries from one client until it leaves or misbehaves.
fn serve(shared: &Shared, id: u64, stream: TcpStream, writer: &Arc<Writer>) -> Close {
    let mut buf: Vec<u8> = Vec::new();
    let why = serve_with(shared, id, stream, writer, &mut buf);
    shared.buffered.fetch_sub(buf.len(), Ordering::SeqCst);
    why
}

/// [`serve`] with its read-ahead buffer, whose bytes are counted in `shared.buffered`.
fn serve_with(
    shared: &Shared,
    id: u64,
    mut stream: TcpStream,
    writer: &Arc<Writer>,
    buf: &mut Vec<u8>,
) -> Close {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut validated = false;
    let mut authenticated = shared.token.is_none();
    loop {
        let mut used = 0;
        loop {
            match wire::decode_request(&buf[used..]) {
                Ok(Some((req, n))) => {
                    used += n;
                    if !validated {
                        // PyTorch's servers accept nothing before a correct VALIDATE.
                        match req {
                            Request::Validate(wire::VALIDATION_MAGIC) => validated = true,
                            other => {
                                return Close::Protocol(format!(
                                    "first query must be VALIDATE with the magic, got {:?}",
                                    other.query_type()
                                ))
                            }
                        }
                        continue;
                    }
                    if !authenticated {
                        // The first query after VALIDATE must present the token.
                        let token = shared.token.as_deref().unwrap_or_default();
                        if !wire::presents_token(&req, token) {
                            return Close::Protocol("no valid store token".into());
                        }
                        authenticated = true;
                        let mut w = lock(&writer.0);
                        if let Err(e) = w.write_all(&[wire::CHECK_READY]) {
                            return Close::Io(e);
                        }
                        continue;
                    }
                    if let Err(c) = handle(shared, id, writer, req) {
                        return c;
                    }
                }
                Ok(None) => break,
                Err(e) => return Close::Protocol(wire_error(&e)),
            }
        }
        buf.drain(..used);
        shared.buffered.fetch_sub(used, Ordering::SeqCst);
        if shared.stopping.load(Ordering::SeqCst) {
            return Close::Peer;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Close::Peer,
            Ok(n) => {
                let limits = &shared.limits;
                if buf.len() + n > limits.max_query_bytes {
                    return Close::Protocol(format!(
                        "a query past {} bytes",
                        limits.max_query_bytes
                    ));
                }
                let total = shared.buffered.fetch_add(n, Ordering::SeqCst) + n;
                if total > limits.max_buffered_bytes {
                    shared.buffered.fetch_sub(n, Ordering::SeqCst);
                    return Close::Protocol(format!(
                        "clients have {} bytes of queries in flight already",
                        limits.max_buffered_bytes
                    ));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Close::Io(e),
        }
    }
}

fn wire_error(e: &WireError) -> String {
    format!("refused query: {e}")
}

/// Applies one query and writes its reply (and the wake-ups it causes).
fn handle(shared: &Shared, id: u64, writer: &Arc<Writer>, req: Request<'_>) -> Result<(), Close> {
    let mut out = Vec::new();
    let mut wake: Vec<Arc<Writer>> = Vec::new();
    let mut st = lock(&shared.state);
    st.apply(id, writer, req, &mut out, &mut wake)
        .map_err(Close::Protocol)?;
    // Take every socket we write to before letting go of the key space (see the module doc).
    let mut woken: Vec<MutexGuard<'_, TcpStream>> = wake.iter().map(|w| lock(&w.0)).collect();
    let own = (!out.is_empty()).then(|| lock(&writer.0));
    drop(st);
    for w in &mut woken {
        // A waiter that cannot be written to is gone; its own thread cleans it up.
        let _ = w.write_all(&[wire::WAIT_STOP_WAITING]);
    }
    drop(woken);
    if let Some(mut w) = own {
        w.write_all(&out).map_err(Close::Io)?;
    }
    Ok(())
}

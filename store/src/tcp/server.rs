//! The store server's handle: binds the listening socket, starts the accepting thread and
//! the event loop's (see [`super::acceptor`], [`super::event_loop`]), reports what the
//! server holds, and stops them.
//!
//! A hostile or broken client can only lose its own connection: lengths are bounded before
//! anything is allocated (see [`super::wire`]), a bad query closes the connection, a client
//! that stops reading is held back and then dropped, and nothing here panics on input. What
//! the server holds is bounded by its [`ServerLimits`](super::ServerLimits) (connections, bytes read ahead, stored
//! bytes, awaited keys: see [`super::limits`] for the bound), and [`TcpServer::stats`] shows
//! it. With a token ([`ServerOptions::token`]) a client must present it right after
//! `VALIDATE`.

use super::acceptor::Acceptor;
use super::event_loop::{lock, EventLoop, Shared};
use super::fd_limit;
use super::limits::{ServerOptions, ServerStats};
use super::state::State;
use mio::Waker;
use oxccl_core::text::Escaped;
use oxccl_core::{text, Error, Result};
use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A TCP store server speaking PyTorch's TCPStore protocol: torch clients
/// (`TCPStore(host, port, is_master=False)`) and oxccl's [`super::TcpStore`] both use it.
///
/// It serves from one background thread (and accepts on one to four others) until [`TcpServer::shutdown`] or drop, which close
/// every client connection (their pending calls fail at once instead of hanging).
pub struct TcpServer {
    shared: Arc<Shared>,
    /// Wakes the event loop (to stop it).
    waker: Arc<Waker>,
    /// The accepting threads, and the wakers that stop them.
    acceptors: Vec<(Waker, JoinHandle<()>)>,
    port: u16,
    local: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

/// Threads accepting on the listening socket: more than one where there are cores to spare,
/// so a burst of connections from a whole job is taken off the kernel's short queue in time.
fn acceptor_count() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (cores / 4).clamp(1, 4)
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
        // Each client is a descriptor: take what the system allows before serving.
        let _ = fd_limit::descriptor_limit();
        fd_limit::deepen_backlog(&listener);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(&opts.limits)),
            stopping: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            buffered: AtomicUsize::new(0),
            queries: AtomicU64::new(0),
        });
        let token = opts.token.map(String::into_bytes);
        let cannot = |e: io::Error| Error::Remote {
            detail: text!("cannot start the store's event loop: {e}"),
        };
        let (to_loop, incoming) = std::sync::mpsc::channel();
        let (event_loop, waker) =
            EventLoop::new(incoming, Arc::clone(&shared), opts.limits, token).map_err(cannot)?;
        let waker = Arc::new(waker);
        let thread = std::thread::Builder::new()
            .name("oxccl-store".into())
            .spawn(move || event_loop.run())
            .map_err(cannot)?;
        let mut server = TcpServer {
            shared,
            waker,
            acceptors: Vec::new(),
            port: local.port(),
            local,
            thread: Some(thread),
        };
        // Stopped by `server`'s drop, with the loop, if one cannot start.
        for _ in 0..acceptor_count() {
            let started = listener.try_clone().and_then(|l| {
                let (acceptor, wake) = Acceptor::new(
                    l,
                    Arc::clone(&server.shared),
                    to_loop.clone(),
                    Arc::clone(&server.waker),
                )?;
                let h = std::thread::Builder::new()
                    .name("oxccl-store-accept".into())
                    .spawn(move || acceptor.run())?;
                Ok((wake, h))
            });
            server.acceptors.push(started.map_err(cannot)?);
        }
        Ok(server)
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
    /// it against its [`ServerLimits`](super::ServerLimits).
    pub fn stats(&self) -> ServerStats {
        let (stored_bytes, (waited_bytes, waiting_connections)) = {
            let st = lock(&self.shared.state);
            (st.stored_bytes(), st.waits())
        };
        ServerStats {
            connections: self.shared.connections.load(Ordering::SeqCst),
            buffered_bytes: self.shared.buffered.load(Ordering::SeqCst),
            stored_bytes,
            waiting_connections,
            waited_bytes,
            queries: self.shared.queries.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting, closes every client connection and waits for the server's thread to
    /// end (it notices at once: it is woken, and no step of it blocks).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // The acceptors first: no client is accepted once the loop closes them all.
        for (wake, _) in &self.acceptors {
            if let Err(e) = wake.wake() {
                log::debug!("oxccl store: cannot wake an accepting thread: {e}");
            }
        }
        for (_, h) in self.acceptors.drain(..) {
            let _ = h.join();
        }
        if let Err(e) = self.waker.wake() {
            // The loop still sees `stopping` within its tick.
            log::debug!("oxccl store: cannot wake the event loop: {e}");
        }
        if let Some(h) = self.thread.take() {
            let _ = h.join();
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

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
use super::event_loop::{lock, EventLoop, Shared, Space};
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
/// It serves from one to eight event-loop threads (and accepts on one or two others) until
/// [`TcpServer::shutdown`] or drop, which close every client connection (their pending calls
/// fail at once instead of hanging).
pub struct TcpServer {
    shared: Arc<Shared>,
    /// The event loops, and the wakers that stop them.
    loops: Vec<(Arc<Waker>, JoinHandle<()>)>,
    /// The accepting threads, and the wakers that stop them.
    acceptors: Vec<(Waker, JoinHandle<()>)>,
    port: u16,
    local: SocketAddr,
}

/// The accepting threads and event loops a server runs: more than one of each where there
/// are cores to spare, so that a burst of connections from a whole job is taken off the
/// kernel's short queue in time, and a barrier of the whole job is served by several cores.
/// `event_loops` other than 0 is taken as asked (up to [`MAX_EVENT_LOOPS`]).
fn thread_counts(event_loops: usize) -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let loops = match event_loops {
        0 => (cores / 4).clamp(1, 8),
        n => n.min(MAX_EVENT_LOOPS),
    };
    ((cores / 8).clamp(1, 2), loops)
}

/// The most event loops a server runs, whatever it is asked.
const MAX_EVENT_LOOPS: usize = 64;

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
        let (acceptors, loops) = thread_counts(opts.event_loops);
        let shared = Arc::new(Shared {
            state: Mutex::new(Space::new(State::new(&opts.limits), loops)),
            stopping: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            buffered: AtomicUsize::new(0),
            queries: AtomicU64::new(0),
        });
        let token = opts.token.map(String::into_bytes);
        let cannot = |e: io::Error| Error::Remote {
            detail: text!("cannot start the store's event loop: {e}"),
        };
        let mut made = Vec::with_capacity(loops);
        let mut queues = Vec::with_capacity(loops);
        for me in 0..loops {
            let (to_loop, incoming) = std::sync::mpsc::channel();
            let (event_loop, waker) = EventLoop::new(
                me,
                loops,
                incoming,
                Arc::clone(&shared),
                opts.limits,
                token.clone(),
            )
            .map_err(cannot)?;
            queues.push((to_loop, Arc::clone(&waker)));
            made.push(event_loop);
        }
        let wakers: Vec<Arc<Waker>> = queues.iter().map(|(_, w)| Arc::clone(w)).collect();
        let mut server = TcpServer {
            shared,
            loops: Vec::new(),
            acceptors: Vec::new(),
            port: local.port(),
            local,
        };
        // A thread that cannot start stops the ones started, through `server`'s drop.
        for event_loop in made {
            let (peers, waker) = (wakers.clone(), Arc::clone(&wakers[server.loops.len()]));
            let h = std::thread::Builder::new()
                .name("oxccl-store".into())
                .spawn(move || event_loop.run(peers))
                .map_err(cannot)?;
            server.loops.push((waker, h));
        }
        for first in 0..acceptors {
            let started = listener.try_clone().and_then(|l| {
                let (acceptor, wake) =
                    Acceptor::new(l, Arc::clone(&server.shared), queues.clone(), first)?;
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
            let space = lock(&self.shared.state);
            let st = &space.state;
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
        // The acceptors first: no client is accepted once the loops close them all.
        for (wake, _) in &self.acceptors {
            if let Err(e) = wake.wake() {
                log::debug!("oxccl store: cannot wake an accepting thread: {e}");
            }
        }
        for (_, h) in self.acceptors.drain(..) {
            let _ = h.join();
        }
        for (wake, _) in &self.loops {
            if let Err(e) = wake.wake() {
                // The loop still sees `stopping` within its tick.
                log::debug!("oxccl store: cannot wake an event loop: {e}");
            }
        }
        for (_, h) in self.loops.drain(..) {
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

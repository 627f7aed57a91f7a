//! The store server's accepting threads: take connections off the listening socket as fast
//! as they come and deal them to the event loops in turn (see [`super::event_loop`]).
//!
//! The kernel's queue of connections not yet accepted is short (`SOMAXCONN`, 4,096 by
//! default); when a whole job connects at once and that queue fills, the kernel drops the
//! further attempts and each of those clients waits for its own retry, a second or more. An
//! event loop busy with the clients it has already accepted takes the queue only between its
//! turns; a thread that does nothing else keeps it drained, and the accepted connections wait
//! in memory instead, for the loop's next turn.

use super::event_loop::{Shared, WAKER};
use super::fd_limit;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

/// The listening socket's token (in the acceptor's own poll).
const LISTENER: Token = Token(0);
/// How long accepting pauses after it failed (out of descriptors, most likely).
const ACCEPT_RETRY: Duration = Duration::from_millis(50);
/// How often the thread looks at `stopping` when nothing wakes it.
const TICK: Duration = Duration::from_secs(1);

/// The accepting thread's state.
pub(super) struct Acceptor {
    poll: Poll,
    listener: TcpListener,
    shared: Arc<Shared>,
    /// Where accepted connections go: each loop's queue, and the waker that says it has some.
    loops: Vec<(Sender<TcpStream>, Arc<Waker>)>,
    /// The loop the next connection goes to (dealt in turn).
    next: usize,
    warned: bool,
}

impl Acceptor {
    /// An acceptor of `listener`'s connections for `loops` (each loop's queue and waker),
    /// starting with loop `first`, and the waker that interrupts the acceptor itself (to stop
    /// it).
    pub(super) fn new(
        listener: std::net::TcpListener,
        shared: Arc<Shared>,
        loops: Vec<(Sender<TcpStream>, Arc<Waker>)>,
        first: usize,
    ) -> io::Result<(Acceptor, Waker)> {
        listener.set_nonblocking(true)?;
        let mut listener = TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        let acceptor = Acceptor {
            poll,
            listener,
            shared,
            next: first % loops.len().max(1),
            loops,
            warned: false,
        };
        Ok((acceptor, waker))
    }

    /// Accepts until the server stops (`stopping`, then a wake) or the loop is gone.
    pub(super) fn run(mut self) {
        let mut events = Events::with_capacity(4);
        let mut paused = false;
        while !self.shared.stopping.load(Ordering::SeqCst) {
            let timeout = if paused { ACCEPT_RETRY } else { TICK };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                log::error!("oxccl store: cannot wait for clients, stopping: {e}");
                return;
            }
            if self.shared.stopping.load(Ordering::SeqCst) {
                return;
            }
            match self.accept_all() {
                Some(p) => paused = p,
                None => return,
            }
        }
    }

    /// Accepts every pending connection; whether accepting must pause (`None`: the loop is
    /// gone).
    fn accept_all(&mut self) -> Option<bool> {
        let mut handed = vec![false; self.loops.len()];
        let paused = loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    let to = self.next;
                    self.next = (to + 1) % self.loops.len();
                    if self.loops[to].0.send(stream).is_err() {
                        return None;
                    }
                    handed[to] = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                    ) => {}
                Err(e) => {
                    // Out of descriptors, most likely: the pending clients stay queued in the
                    // listener and are taken when descriptors free up.
                    if !self.warned {
                        self.warned = true;
                        log::warn!(
                            "oxccl store: cannot accept a client ({e}), {} served; raise the \
                             descriptor limit (`ulimit -n`, now {})",
                            self.shared.connections.load(Ordering::SeqCst),
                            fd_limit::limit_text()
                        );
                    }
                    break true;
                }
            }
        };
        for (i, _) in handed.iter().enumerate().filter(|(_, h)| **h) {
            if let Err(e) = self.loops[i].1.wake() {
                // The loop still takes them within its tick.
                log::debug!("oxccl store: cannot wake event loop {i}: {e}");
            }
        }
        Some(paused)
    }
}

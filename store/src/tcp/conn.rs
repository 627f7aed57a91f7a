//! One client connection of the event-driven server: its non-blocking socket, the query bytes
//! read ahead of the query it is in, the replies queued for it, and where its handshake
//! stands. Nothing here knows the key space or the other connections.
//!
//! An idle connection holds no buffer: the read-ahead is emptied (and its memory returned)
//! once its queries are applied, and the write queue holds only replies not yet sent.

use mio::net::TcpStream;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::Instant;

/// Read-ahead capacity kept once emptied; more is handed back, so an idle connection that
/// once sent a large query costs nothing for it.
const KEEP_CAPACITY: usize = 4 * 1024;
/// Replies queued past which a connection's further queries wait: a client that sends
/// queries without reading the replies cannot make the server hold more than this plus one
/// reply.
pub(super) const QUEUE_HIGH: usize = 256 * 1024;

/// How a read from the socket went.
pub(super) enum Filled {
    /// This many bytes were appended to the read-ahead.
    Bytes(usize),
    /// Nothing more to read now.
    Drained,
    /// The client closed its sending side.
    Eof,
}

/// Why a connection is closed.
pub(super) enum Close {
    /// The client left.
    Peer,
    /// The client broke the protocol or crossed a limit.
    Protocol(String),
    /// The socket failed (or a write stalled past the timeout).
    Io(io::Error),
}

/// One client connection.
pub(super) struct Conn {
    stream: TcpStream,
    /// Query bytes read but not yet applied.
    pub(super) buf: Vec<u8>,
    /// Replies not yet written, oldest first; `sent` bytes of the front one are written.
    out: VecDeque<Vec<u8>>,
    sent: usize,
    queued: usize,
    /// Since when queued replies could not be written (reset by any progress).
    pub(super) stalled_since: Option<Instant>,
    /// The first query was a correct `VALIDATE`.
    pub(super) validated: bool,
    /// The token was presented (or none is needed).
    pub(super) authenticated: bool,
    /// The client closed its sending side: the connection ends once its replies are out.
    pub(super) eof: bool,
}

impl Conn {
    /// A connection over an accepted socket; `authenticated` when the server needs no token.
    pub(super) fn new(stream: TcpStream, authenticated: bool) -> Conn {
        Conn {
            stream,
            buf: Vec::new(),
            out: VecDeque::new(),
            sent: 0,
            queued: 0,
            stalled_since: None,
            validated: false,
            authenticated,
            eof: false,
        }
    }

    /// The socket, to register it with the event loop.
    pub(super) fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Reads once from the socket into `chunk` (the loop's shared buffer); the caller checks
    /// the bytes against the limits before keeping them with [`Conn::keep`].
    pub(super) fn read_into(&mut self, chunk: &mut [u8]) -> Result<Filled, Close> {
        loop {
            return match self.stream.read(chunk) {
                Ok(0) => Ok(Filled::Eof),
                Ok(n) => Ok(Filled::Bytes(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Filled::Drained),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(Close::Io(e)),
            };
        }
    }

    /// Appends bytes read to the read-ahead.
    pub(super) fn keep(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Drops the first `n` bytes of the read-ahead (applied queries), handing back memory
    /// once it is empty.
    pub(super) fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
        if self.buf.is_empty() && self.buf.capacity() > KEEP_CAPACITY {
            self.buf = Vec::new();
        }
    }

    /// Queues a reply (written by [`Conn::flush`]).
    pub(super) fn push(&mut self, reply: Vec<u8>) {
        if reply.is_empty() {
            return;
        }
        self.queued += reply.len();
        match self.out.back_mut() {
            // Small replies share one buffer: a burst of them costs one allocation.
            Some(last) if last.len() + reply.len() <= KEEP_CAPACITY => {
                last.extend_from_slice(&reply);
            }
            _ => self.out.push_back(reply),
        }
    }

    /// Bytes of replies not yet written.
    pub(super) fn queued(&self) -> usize {
        self.queued
    }

    /// Whether more replies wait than the connection may pile up: its queries then wait.
    pub(super) fn backed_up(&self) -> bool {
        self.queued > QUEUE_HIGH
    }

    /// Writes queued replies until done or the socket is full; `now` starts the stall clock
    /// when the socket is full and no byte went out.
    pub(super) fn flush(&mut self, now: Instant) -> Result<(), Close> {
        while let Some(front) = self.out.front() {
            match self.stream.write(&front[self.sent..]) {
                Ok(0) => return Err(Close::Peer),
                Ok(n) => {
                    self.sent += n;
                    self.queued -= n;
                    self.stalled_since = None;
                    if self.sent == front.len() {
                        self.out.pop_front();
                        self.sent = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stalled_since.get_or_insert(now);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Close::Io(e)),
            }
        }
        if self.out.capacity() > 4 {
            self.out = VecDeque::new();
        }
        Ok(())
    }
}

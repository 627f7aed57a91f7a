//! One simulated rank on a non-blocking socket: the queries it sends and the replies it
//! expects at each step of join, rounds and leave, in PyTorch's TCPStore protocol.
//!
//! Join: VALIDATE (the wire magic) and PING with the rank's nonce; the nonce back means
//! joined. Round r: ADD 1 to `count/r`; the rank whose ADD answers N (the last to arrive)
//! SETs `done/r` and PINGs (its nonce back confirms the SET is applied); every rank WAITs on
//! `done/r` until STOP_WAITING.

use oxccl::store::tcp::wire::{self, QueryType};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// The queries every rank of a run shares, built once.
pub struct Queries {
    /// The ranks in all (the ADD reply that releases a round).
    pub ranks: i64,
    /// ADD 1 to `count/r`, per round.
    add: Vec<Vec<u8>>,
    /// WAIT on `done/r`, per round.
    wait: Vec<Vec<u8>>,
    /// The key `done/r`, per round.
    done: Vec<Vec<u8>>,
}

impl Queries {
    /// The queries of `rounds` rounds of `ranks` ranks, under keys of `run` (fresh per server,
    /// so no run sees another's keys). Keys carry PyTorch's `/` prefix, as its clients send.
    pub fn new(run: &str, ranks: usize, rounds: usize) -> Queries {
        let key = |what: &str, r: usize| format!("{}fanin/{run}/{what}/{r}", wire::KEY_PREFIX);
        let mut q = Queries {
            ranks: i64::try_from(ranks).unwrap_or(i64::MAX),
            add: Vec::new(),
            wait: Vec::new(),
            done: Vec::new(),
        };
        for r in 0..rounds {
            let mut add = Vec::new();
            wire::put_query(&mut add, QueryType::Add);
            wire::put_bytes(&mut add, key("count", r).as_bytes());
            wire::put_i64(&mut add, 1);
            let done = key("done", r).into_bytes();
            let mut wait = Vec::new();
            wire::put_query(&mut wait, QueryType::Wait);
            wire::put_keys(&mut wait, &[&done]);
            q.add.push(add);
            q.wait.push(wait);
            q.done.push(done);
        }
        q
    }

    /// The rounds.
    pub fn rounds(&self) -> usize {
        self.add.len()
    }
}

/// Where a rank stands: which reply it waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The connection is being made.
    Connecting,
    /// VALIDATE and PING sent; waiting for the nonce.
    Joining,
    /// Joined; idle until the rounds start.
    Joined,
    /// ADD of round r sent; waiting for the count.
    Adding(usize),
    /// SET, PING and WAIT of round r sent; waiting for the nonce.
    Confirming(usize),
    /// WAIT of round r sent; waiting for STOP_WAITING.
    Waiting(usize),
    /// Every round finished; the connection is to be closed.
    Done,
    /// It failed (its error is counted by its process); its connection is closed.
    Failed,
}

impl Phase {
    /// The step a rank that has not finished waits at, one word for counts.
    pub fn word(self) -> &'static str {
        match self {
            Phase::Connecting => "connecting",
            Phase::Joining => "joining",
            Phase::Joined => "joined",
            Phase::Adding(_) => "adding",
            Phase::Confirming(_) | Phase::Waiting(_) => "waiting",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }
}

/// What a reply made of a rank, for the process's tally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// It joined.
    Joined,
    /// Its ADD of `round` answered `value`.
    Added {
        /// The round.
        round: usize,
        /// The count after this rank's add.
        value: i64,
    },
    /// It got STOP_WAITING for `round`.
    Finished(usize),
}

/// Why one rank failed: what it saw, as one word counted over the ranks, and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankError {
    /// One word, no spaces, commas or colons (it travels in a [`super::messages::Msg`]
    /// line): `refused`, `reset`, `aborted`, `timed-out`, `broken-pipe`, `no-address`,
    /// `errno-N` for another error of the socket, `closed` (the server closed it),
    /// `bad-reply`, or `stalled` (the server read nothing).
    pub kind: String,
    /// The message, naming the rank.
    pub text: String,
}

impl RankError {
    fn new(kind: &str, text: String) -> RankError {
        RankError {
            kind: kind.to_string(),
            text,
        }
    }

    /// Rank `nonce`'s socket error `e` while it did `doing` ("connect", "read", "send").
    pub fn io(nonce: u32, doing: &str, e: &io::Error) -> RankError {
        RankError {
            kind: io_kind(e),
            text: format!("rank {nonce}: {doing}: {e}"),
        }
    }
}

/// The word of a socket error (see [`RankError::kind`]).
pub fn io_kind(e: &io::Error) -> String {
    let word = match e.kind() {
        io::ErrorKind::ConnectionRefused => "refused",
        io::ErrorKind::ConnectionReset => "reset",
        io::ErrorKind::ConnectionAborted => "aborted",
        io::ErrorKind::TimedOut => "timed-out",
        io::ErrorKind::BrokenPipe => "broken-pipe",
        io::ErrorKind::AddrNotAvailable => "no-address",
        _ => {
            return e
                .raw_os_error()
                .map_or_else(|| "other".to_string(), |n| format!("errno-{n}"))
        }
    };
    word.to_string()
}

/// How long a write of a few dozen bytes may wait for room in the socket's buffer.
const SEND_BOUND: Duration = Duration::from_secs(10);

/// One rank's connection and protocol state.
pub struct Rank {
    /// Its connection; `None` once closed.
    pub stream: Option<mio::net::TcpStream>,
    /// What it waits for.
    pub phase: Phase,
    /// Its PING nonce (its rank number).
    nonce: u32,
    /// Reply bytes read but not yet used (usually none: replies are a few bytes).
    inbuf: Vec<u8>,
}

impl Rank {
    /// A rank whose connection `stream` is being made.
    pub fn new(stream: mio::net::TcpStream, nonce: u32) -> Rank {
        Rank {
            stream: Some(stream),
            phase: Phase::Connecting,
            nonce,
            inbuf: Vec::new(),
        }
    }

    /// A rank whose connection could not even be started.
    pub fn failed(nonce: u32) -> Rank {
        Rank {
            stream: None,
            phase: Phase::Failed,
            nonce,
            inbuf: Vec::new(),
        }
    }

    /// Checks a readiness event while connecting: `Ok(true)` once connected (VALIDATE and
    /// PING are then sent), `Ok(false)` while still connecting.
    pub fn try_join(&mut self) -> Result<bool, RankError> {
        let Some(s) = self.stream.as_mut() else {
            return Ok(false);
        };
        let nonce = self.nonce;
        let failed = |e: &io::Error| RankError::io(nonce, "connect", e);
        if let Some(e) = s.take_error().map_err(|e| failed(&e))? {
            return Err(failed(&e));
        }
        match s.peer_addr() {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(false),
            Err(e) => return Err(failed(&e)),
        }
        s.set_nodelay(true)
            .map_err(|e| RankError::io(nonce, "nodelay", &e))?;
        let mut q = Vec::with_capacity(16);
        wire::put_query(&mut q, QueryType::Validate);
        wire::put_u32(&mut q, wire::VALIDATION_MAGIC);
        wire::put_query(&mut q, QueryType::Ping);
        wire::put_u32(&mut q, self.nonce);
        self.send(&q)?;
        self.phase = Phase::Joining;
        Ok(true)
    }

    /// Sends round `r`'s ADD.
    pub fn start_round(&mut self, q: &Queries, r: usize) -> Result<(), RankError> {
        self.send(&q.add[r])?;
        self.phase = Phase::Adding(r);
        Ok(())
    }

    /// Reads what the socket has (through `chunk`) and acts on every complete reply,
    /// telling `on` what happened.
    pub fn on_readable(
        &mut self,
        q: &Queries,
        chunk: &mut [u8],
        on: &mut impl FnMut(Event),
    ) -> Result<(), RankError> {
        let Some(s) = self.stream.as_mut() else {
            return Ok(());
        };
        loop {
            match s.read(chunk) {
                Ok(0) => {
                    return Err(RankError::new(
                        "closed",
                        format!("the server closed rank {} ({:?})", self.nonce, self.phase),
                    ))
                }
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RankError::io(self.nonce, "read", &e)),
            }
        }
        while let Some(used) = self.take_reply(q, on)? {
            self.inbuf.drain(..used);
        }
        Ok(())
    }

    /// Acts on the reply at the start of the buffer, if complete: the bytes it took.
    fn take_reply(
        &mut self,
        q: &Queries,
        on: &mut impl FnMut(Event),
    ) -> Result<Option<usize>, RankError> {
        let want = match self.phase {
            Phase::Joining | Phase::Confirming(_) => 4,
            Phase::Adding(_) => 8,
            Phase::Waiting(_) => 1,
            Phase::Connecting | Phase::Joined | Phase::Done | Phase::Failed => {
                return match self.inbuf.is_empty() {
                    true => Ok(None),
                    false => Err(RankError::new(
                        "bad-reply",
                        format!(
                            "rank {}: {} bytes the server sent unasked ({:?})",
                            self.nonce,
                            self.inbuf.len(),
                            self.phase
                        ),
                    )),
                };
            }
        };
        let mut reply = [0u8; 8];
        match self.inbuf.get(..want) {
            Some(bytes) => reply[..want].copy_from_slice(bytes),
            None => return Ok(None),
        }
        match self.phase {
            Phase::Joining | Phase::Confirming(_) => {
                let got = u32::from_ne_bytes([reply[0], reply[1], reply[2], reply[3]]);
                if got != self.nonce {
                    return Err(RankError::new(
                        "bad-reply",
                        format!("rank {}: PING answered {got}", self.nonce),
                    ));
                }
                self.phase = match self.phase {
                    Phase::Confirming(r) => Phase::Waiting(r),
                    _ => {
                        on(Event::Joined);
                        Phase::Joined
                    }
                };
            }
            Phase::Adding(r) => {
                let value = i64::from_ne_bytes(reply);
                on(Event::Added { round: r, value });
                let mut out = Vec::new();
                self.phase = if value == q.ranks {
                    // The last to arrive releases the round.
                    wire::put_query(&mut out, QueryType::Set);
                    wire::put_bytes(&mut out, &q.done[r]);
                    wire::put_bytes(&mut out, b"1");
                    wire::put_query(&mut out, QueryType::Ping);
                    wire::put_u32(&mut out, self.nonce);
                    Phase::Confirming(r)
                } else {
                    Phase::Waiting(r)
                };
                out.extend_from_slice(&q.wait[r]);
                self.send(&out)?;
            }
            Phase::Waiting(r) => {
                if reply[0] != wire::WAIT_STOP_WAITING {
                    return Err(RankError::new(
                        "bad-reply",
                        format!("rank {}: WAIT answered {}", self.nonce, reply[0]),
                    ));
                }
                on(Event::Finished(r));
                if r + 1 < q.rounds() {
                    self.start_round(q, r + 1)?;
                } else {
                    self.phase = Phase::Done;
                }
            }
            Phase::Connecting | Phase::Joined | Phase::Done | Phase::Failed => {}
        }
        Ok(Some(want))
    }

    /// Writes all of `bytes` (a few dozen: the socket's buffer takes them, at worst after
    /// a short wait).
    fn send(&mut self, bytes: &[u8]) -> Result<(), RankError> {
        let Some(s) = self.stream.as_mut() else {
            return Err(RankError::new(
                "closed",
                format!("rank {}: send on a closed connection", self.nonce),
            ));
        };
        let start = Instant::now();
        let mut at = 0;
        while at < bytes.len() {
            match s.write(&bytes[at..]) {
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if start.elapsed() > SEND_BOUND {
                        return Err(RankError::new(
                            "stalled",
                            format!(
                                "rank {}: the server read nothing for {} s",
                                self.nonce,
                                SEND_BOUND.as_secs()
                            ),
                        ));
                    }
                    std::thread::yield_now();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RankError::io(self.nonce, "send", &e)),
            }
        }
        Ok(())
    }
}

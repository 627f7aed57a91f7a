//! A client process of the bench (`oxccl store bench-client`, hidden): its share of the
//! ranks on non-blocking sockets driven from one thread by mio. It connects them all at
//! once, says when they joined, waits for `go` on stdin (the bench samples the idle server
//! meanwhile), runs the rounds, closes every connection, and reports (see [`super::messages`]).
//! A rank that fails is counted, not fatal: the process reports what all its ranks saw once
//! they settle, when its bound passes, or when the bench says `stop`.
//!
//! Its sockets are bound to a loopback source address of its own, so each client process
//! has the whole ephemeral port range to itself.

use super::messages::{count, Msg, StopReason, Tally, GO, STOP};
use super::proc_stat::mono_ns;
use super::rank::{Event, Phase, Queries, Rank, RankError};
use crate::exit;
use clap::Args;
use mio::{Events, Interest, Poll, Token};
use std::io::{self, BufRead, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// Options of one client process (set by the bench).
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The server's port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// The loopback address this process's sockets are bound to.
    #[arg(long)]
    pub source: Ipv4Addr,
    /// The number of this process's first rank (ranks are numbered across processes).
    #[arg(long)]
    pub first: u32,
    /// The ranks this process drives.
    #[arg(long)]
    pub count: usize,
    /// The ranks of the whole run.
    #[arg(long)]
    pub ranks: usize,
    /// The rounds.
    #[arg(long)]
    pub rounds: usize,
    /// The run's key prefix.
    #[arg(long)]
    pub run: String,
    /// The bound on each phase, in seconds.
    #[arg(long)]
    pub timeout: u64,
}

/// How long a process whose rank failed goes on before it reports, so that its counts
/// cover its other ranks too (they fail or finish the step meanwhile, or are counted where
/// they wait).
pub const SETTLE: Duration = Duration::from_secs(1);

/// What this process's ranks did, for its report.
struct Progress {
    joined: usize,
    values: Vec<Vec<i64>>,
    finished: Vec<usize>,
    finished_at: Vec<u64>,
    /// Failed ranks, their kinds and the first one's message and time.
    failures: Tally,
    failed: usize,
    /// When the first rank failed, on this process's clock.
    first_failed: Option<Instant>,
}

impl Progress {
    /// Counts `rank`'s failure `e` and closes its connection.
    fn fail(&mut self, poll: &Poll, rank: &mut Rank, e: &RankError) {
        if let Some(mut s) = rank.stream.take() {
            let _ = poll.registry().deregister(&mut s);
        }
        rank.phase = Phase::Failed;
        self.fail_unregistered(e);
    }

    fn fail_unregistered(&mut self, e: &RankError) {
        self.failed += 1;
        count(&mut self.failures.failed, &e.kind, 1);
        if self.first_failed.is_none() {
            self.first_failed = Some(Instant::now());
            self.failures.first_failure_at = Some(mono_ns());
            self.failures.first = e.text.clone();
        }
    }

    /// The tally to report, with every rank not failed nor done counted at its step.
    fn tally(&self, why: StopReason, ranks: &[Rank]) -> Tally {
        let mut t = self.failures.clone();
        t.why = Some(why);
        t.ranks = ranks.len();
        t.joined = self.joined;
        for r in ranks {
            if !matches!(r.phase, Phase::Failed | Phase::Done) {
                count(&mut t.unfinished, r.phase.word(), 1);
            }
        }
        t
    }
}

/// Runs the client process; its report goes to stdout, one [`Msg`] a line.
pub fn run_client(a: &ClientArgs) -> ExitCode {
    match drive(a) {
        Ok(true) => ExitCode::SUCCESS,
        // Its tally is reported.
        Ok(false) => ExitCode::from(exit::FAILED),
        Err(why) => {
            // The bench may be gone (its pipe closed): then nobody reads this anyway.
            let _ = writeln!(io::stdout(), "{}", Msg::Error(why).to_line());
            ExitCode::from(exit::FAILED)
        }
    }
}

fn say(m: &Msg) -> Result<(), String> {
    let mut out = io::stdout().lock();
    writeln!(out, "{}", m.to_line())
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot report to the bench: {e}"))
}

/// Whether every rank finished (`false`: it stopped short and reported its tally).
fn drive(a: &ClientArgs) -> Result<bool, String> {
    // Each rank is a descriptor: take all the system allows.
    let _ = oxccl::store::tcp::descriptor_limit();
    let q = Queries::new(&a.run, a.ranks, a.rounds);
    let timeout = Duration::from_secs(a.timeout.max(1));
    let bench = bench_lines();
    let mut poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
    let server = SocketAddrV4::new(Ipv4Addr::LOCALHOST, a.port);
    let mut p = Progress {
        joined: 0,
        values: vec![Vec::with_capacity(a.count); a.rounds],
        finished: vec![0; a.rounds],
        finished_at: vec![0; a.rounds],
        failures: Tally::default(),
        failed: 0,
        first_failed: None,
    };
    let mut ranks = Vec::with_capacity(a.count);
    for i in 0..a.count {
        let nonce = a.first + u32::try_from(i).map_err(|_| "too many ranks".to_string())?;
        match connect_from(a.source, server) {
            Ok(mut s) => {
                poll.registry()
                    .register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)
                    .map_err(|e| format!("epoll: {e}"))?;
                ranks.push(Rank::new(s, nonce));
            }
            Err(e) => {
                let doing = format!("connect from {}", a.source);
                p.fail_unregistered(&RankError::io(nonce, &doing, &e));
                ranks.push(Rank::failed(nonce));
            }
        }
    }
    let mut left = 0;
    let mut events = Events::with_capacity(4096);
    let mut chunk = [0u8; 512];
    let mut phase_start = Instant::now();
    let mut started = false;
    while left < a.count {
        if p.joined == a.count && !started {
            say(&Msg::Joined(mono_ns()))?;
            if !wait_for_go(&bench)? {
                say(&Msg::Stopped(p.tally(StopReason::Told, &ranks)))?;
                return Ok(false);
            }
            for r in &mut ranks {
                if let Err(e) = r.start_round(&q, 0) {
                    p.fail(&poll, r, &e);
                }
            }
            started = true;
            phase_start = Instant::now();
        }
        // Settled: no rank can move on (every one failed or joined before the rounds, or
        // failed or done in them), or the failures have had their moment.
        let settled = left + p.failed == a.count || (!started && p.joined + p.failed == a.count);
        let why = match bench.try_recv() {
            Ok(line) if line == STOP => Some(StopReason::Told),
            Ok(line) => return Err(format!("the bench said {line:?}")),
            Err(mpsc::TryRecvError::Disconnected) => return Err("the bench went away".into()),
            Err(mpsc::TryRecvError::Empty) if p.failed > 0 => {
                let waited = p.first_failed.map_or(SETTLE, |t| t.elapsed());
                (settled || waited >= SETTLE).then_some(StopReason::Failed)
            }
            Err(mpsc::TryRecvError::Empty) => {
                (phase_start.elapsed() > timeout).then_some(StopReason::Timeout)
            }
        };
        if let Some(why) = why {
            say(&Msg::Stopped(p.tally(why, &ranks)))?;
            return Ok(false);
        }
        poll.poll(&mut events, Some(Duration::from_millis(100)))
            .map_err(|e| format!("epoll: {e}"))?;
        for ev in events.iter() {
            let rank = &mut ranks[ev.token().0];
            let step = match rank.phase {
                Phase::Connecting => rank.try_join(),
                _ => Ok(true),
            };
            let Progress {
                joined,
                values,
                finished,
                finished_at,
                ..
            } = &mut p;
            let step = step.and_then(|connected| {
                if !connected {
                    return Ok(());
                }
                rank.on_readable(&q, &mut chunk, &mut |e| match e {
                    Event::Joined => *joined += 1,
                    Event::Added { round, value } => values[round].push(value),
                    Event::Finished(round) => {
                        finished[round] += 1;
                        if finished[round] == a.count {
                            finished_at[round] = mono_ns();
                        }
                    }
                })
            });
            if let Err(e) = step {
                p.fail(&poll, rank, &e);
                continue;
            }
            if rank.phase == Phase::Done {
                if let Some(mut s) = rank.stream.take() {
                    // Leaving: the connection closes as the stream drops.
                    let _ = poll.registry().deregister(&mut s);
                    left += 1;
                }
            }
        }
    }
    say(&Msg::Left(mono_ns()))?;
    for (round, values) in p.values.into_iter().enumerate() {
        let at = p.finished_at[round];
        say(&Msg::Round { round, at, values })?;
    }
    Ok(true)
}

/// The bench's lines on stdin, read by a thread of their own so that the loop can look for
/// a [`STOP`] between polls; the channel ends with stdin (the bench gone).
fn bench_lines() -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line.trim().to_string()).is_err() {
                return;
            }
        }
    });
    rx
}

/// Blocks until the bench says go (`true`) or stop (`false`); its end ends this process.
fn wait_for_go(bench: &Receiver<String>) -> Result<bool, String> {
    match bench.recv() {
        Ok(line) if line == GO => Ok(true),
        Ok(line) if line == STOP => Ok(false),
        Ok(line) => Err(format!("the bench said {line:?}")),
        Err(_) => Err("the bench went away before the rounds".into()),
    }
}

/// A non-blocking connection to `server` from `source` (port chosen at connect, so that only
/// the four-tuple need be unique), its connect under way.
fn connect_from(source: Ipv4Addr, server: SocketAddrV4) -> io::Result<mio::net::TcpStream> {
    let inet = |ip: Ipv4Addr, port: u16| {
        // SAFETY: sockaddr_in is plain data, valid when zeroed.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_port = port.to_be();
        sa.sin_addr.s_addr = u32::from_ne_bytes(ip.octets());
        sa
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: socket has no pointer arguments; the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns; it is closed on every error below.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: the option's value is a valid c_int for the call. Where the kernel lacks the
    // option, bind picks the port instead, which also works with a source of our own.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let src = inet(source, 0);
    // SAFETY: `src` is a valid sockaddr_in of `len` bytes, read only.
    if unsafe { libc::bind(fd, (&src as *const libc::sockaddr_in).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let dst = inet(*server.ip(), server.port());
    // SAFETY: as for bind.
    if unsafe { libc::connect(fd, (&dst as *const libc::sockaddr_in).cast(), len) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(mio::net::TcpStream::from_std(std::net::TcpStream::from(
        owned,
    )))
}

//! A client process of the bench (`oxccl store bench-client`, hidden): its share of the
//! ranks on non-blocking sockets driven from one thread by mio. It connects them all at
//! once, says when they joined, waits for `go` on stdin (the bench samples the idle server
//! meanwhile), runs the rounds, closes every connection, and reports (see [`super::messages`]).
//!
//! Its sockets are bound to a loopback source address of its own, so each client process
//! has the whole ephemeral port range to itself.

use super::messages::{Msg, GO};
use super::proc_stat::mono_ns;
use super::rank::{Event, Phase, Queries, Rank};
use crate::exit;
use clap::Args;
use mio::{Events, Interest, Poll, Token};
use std::io::{self, BufRead, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitCode;
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

/// What this process's ranks did, for its report.
struct Tally {
    joined: usize,
    values: Vec<Vec<i64>>,
    finished: Vec<usize>,
    finished_at: Vec<u64>,
}

/// Runs the client process; its report goes to stdout, one [`Msg`] a line.
pub fn run_client(a: &ClientArgs) -> ExitCode {
    match drive(a) {
        Ok(()) => ExitCode::SUCCESS,
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

fn drive(a: &ClientArgs) -> Result<(), String> {
    // Each rank is a descriptor: take all the system allows.
    let _ = oxccl::store::tcp::descriptor_limit();
    let q = Queries::new(&a.run, a.ranks, a.rounds);
    let timeout = Duration::from_secs(a.timeout.max(1));
    let mut poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
    let server = SocketAddrV4::new(Ipv4Addr::LOCALHOST, a.port);
    let mut ranks = Vec::with_capacity(a.count);
    for i in 0..a.count {
        let nonce = a.first + u32::try_from(i).map_err(|_| "too many ranks".to_string())?;
        let mut s = connect_from(a.source, server)
            .map_err(|e| format!("rank {nonce}: connect from {}: {e}", a.source))?;
        poll.registry()
            .register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| format!("epoll: {e}"))?;
        ranks.push(Rank::new(s, nonce));
    }
    let mut t = Tally {
        joined: 0,
        values: vec![Vec::with_capacity(a.count); a.rounds],
        finished: vec![0; a.rounds],
        finished_at: vec![0; a.rounds],
    };
    let mut left = 0;
    let mut events = Events::with_capacity(4096);
    let mut chunk = [0u8; 512];
    let mut phase_start = Instant::now();
    let mut started = false;
    while left < a.count {
        if t.joined == a.count && !started {
            say(&Msg::Joined(mono_ns()))?;
            wait_for_go()?;
            for r in &mut ranks {
                r.start_round(&q, 0)?;
            }
            started = true;
            phase_start = Instant::now();
        }
        if phase_start.elapsed() > timeout {
            return Err(stuck(&ranks, timeout));
        }
        poll.poll(&mut events, Some(Duration::from_millis(100)))
            .map_err(|e| format!("epoll: {e}"))?;
        for ev in events.iter() {
            let rank = &mut ranks[ev.token().0];
            if rank.phase == Phase::Connecting && !rank.try_join()? {
                continue;
            }
            rank.on_readable(&q, &mut chunk, &mut |e| match e {
                Event::Joined => t.joined += 1,
                Event::Added { round, value } => t.values[round].push(value),
                Event::Finished(round) => {
                    t.finished[round] += 1;
                    if t.finished[round] == a.count {
                        t.finished_at[round] = mono_ns();
                    }
                }
            })?;
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
    for (round, values) in t.values.into_iter().enumerate() {
        let at = t.finished_at[round];
        say(&Msg::Round { round, at, values })?;
    }
    Ok(())
}

/// Blocks until the bench says go; its end (the bench gone) ends this process.
fn wait_for_go() -> Result<(), String> {
    let mut line = String::new();
    match io::stdin().lock().read_line(&mut line) {
        Ok(n) if n > 0 && line.trim() == GO => Ok(()),
        Ok(_) => Err("the bench went away before the rounds".into()),
        Err(e) => Err(format!("reading the bench's go: {e}")),
    }
}

/// Why the process gave up: how many ranks stand where.
fn stuck(ranks: &[Rank], timeout: Duration) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for r in ranks {
        let name = match r.phase {
            Phase::Adding(_) => "adding".to_string(),
            Phase::Confirming(_) | Phase::Waiting(_) => "waiting".to_string(),
            p => format!("{p:?}").to_lowercase(),
        };
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    let shown: Vec<String> = counts.iter().map(|(n, c)| format!("{c} {n}")).collect();
    format!(
        "no progress within {} s: ranks {}",
        timeout.as_secs(),
        shown.join(", ")
    )
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

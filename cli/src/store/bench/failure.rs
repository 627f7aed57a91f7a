//! What the bench measured when a server's column failed: the phase and how far into it, what
//! the client processes counted, the server process's state, descriptors and listening
//! socket, the machine's listen limits and counters, and (where it was timed) one reverse
//! lookup of the clients' address. [`observe`] gathers it into a [`Failure`], and
//! [`Failure::render`] says it: measurements only, no cause that was not measured.

use super::messages::{count, StopReason, Tally};
use super::proc_stat::{mono_ns, open_fds, secs_between};
use super::procs::{Owned, Tail};
use oxccl::core::text::Escaped;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// The step of a server's column that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Starting the server process until it prints its port.
    Start,
    /// The ranks connecting and joining.
    Join,
    /// The barriers and the leave.
    Rounds,
    /// Reading each round's counter back.
    Readback,
    /// The set/get throughput measure.
    Ops,
}

impl Phase {
    /// The phase in words ("the join").
    pub fn name(self) -> &'static str {
        match self {
            Phase::Start => "its start",
            Phase::Join => "the join",
            Phase::Rounds => "the rounds",
            Phase::Readback => "the read-back of the counts",
            Phase::Ops => "the ops/s measure",
        }
    }

    /// The phase as one word, for JSON.
    pub fn key(self) -> &'static str {
        match self {
            Phase::Start => "start",
            Phase::Join => "join",
            Phase::Rounds => "rounds",
            Phase::Readback => "readback",
            Phase::Ops => "ops",
        }
    }
}

/// What the bench last heard from one client process, for the counts of a failed phase.
#[derive(Clone, Debug, PartialEq)]
pub enum Heard {
    /// Nothing yet.
    Nothing,
    /// Every one of its ranks joined.
    Joined,
    /// Every one of its ranks finished the rounds and left.
    Left,
    /// It stopped short and reported its ranks' counts.
    Stopped(Tally),
    /// It stopped for a reason of its own (the message).
    Error(String),
    /// Its output ended with no report; how it ended ("exited (exit status: 1)").
    Ended(String),
}

impl Heard {
    /// Whether the process will report nothing more.
    pub fn is_final(&self) -> bool {
        !matches!(self, Heard::Nothing | Heard::Joined)
    }
}

/// The client processes' counts, summed over those that gave them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientCounts {
    /// The ranks asked for.
    pub ranks: usize,
    /// Ranks that joined, over the processes that said.
    pub joined: usize,
    /// Ranks of processes that gave no counts (they ended, or failed on their own).
    pub uncounted: usize,
    /// Failed ranks per kind of error (see [`super::rank::RankError::kind`]).
    pub failed: Vec<(String, usize)>,
    /// Ranks neither failed nor finished when their process stopped, per step.
    pub unfinished: Vec<(String, usize)>,
    /// The client processes, per how each one stopped or stood ("stopped on failed ranks").
    pub processes: Vec<(String, usize)>,
    /// The first failure of a rank, seconds after the phase began (`None`: none failed).
    pub first_failure_s: Option<f64>,
    /// The first failure's message, naming its process ("" if none).
    pub first: String,
    /// The messages of processes that stopped on their own or ended silently.
    pub errors: Vec<String>,
}

impl ClientCounts {
    /// Sums what each client process (`shares[i]` ranks) said, `heard[i]`; times are taken
    /// from `began`, the phase's start on [`mono_ns`]'s clock.
    pub fn sum(shares: &[usize], heard: &[Heard], began: u64) -> ClientCounts {
        let mut c = ClientCounts {
            ranks: shares.iter().sum(),
            ..ClientCounts::default()
        };
        let mut first_at = None;
        for (i, (&share, h)) in shares.iter().zip(heard).enumerate() {
            let how = match h {
                Heard::Nothing => {
                    c.uncounted += share;
                    "had not reported"
                }
                Heard::Joined => {
                    c.joined += share;
                    "had joined every rank and reported nothing since"
                }
                Heard::Left => {
                    c.joined += share;
                    "finished"
                }
                Heard::Stopped(t) => {
                    c.joined += t.joined;
                    for (w, n) in &t.failed {
                        count(&mut c.failed, w, *n);
                    }
                    for (w, n) in &t.unfinished {
                        count(&mut c.unfinished, w, *n);
                    }
                    if let Some(at) = t.first_failure_at {
                        if first_at.is_none_or(|f| at < f) {
                            first_at = Some(at);
                            c.first = format!("client process {i}: {}", t.first);
                        }
                    }
                    match t.why {
                        Some(StopReason::Failed) => "stopped on failed ranks",
                        Some(StopReason::Timeout) => "stopped at their bound",
                        Some(StopReason::Told) => "stopped when told",
                        None => "stopped",
                    }
                }
                Heard::Error(m) => {
                    c.uncounted += share;
                    c.errors.push(format!("client process {i}: {m}"));
                    "stopped on an error of their own"
                }
                Heard::Ended(note) => {
                    c.uncounted += share;
                    c.errors
                        .push(format!("client process {i} {note} without a report"));
                    "ended without a report"
                }
            };
            count(&mut c.processes, how, 1);
        }
        c.first_failure_s = first_at.map(|at| secs_between(began, at));
        c
    }
}

/// The server's listening socket, as `/proc/net/tcp` and `tcp6` show it.
#[derive(Clone, Debug, PartialEq)]
pub struct Listening {
    /// Its port.
    pub port: u16,
    /// Sockets in LISTEN state on that port (0: none).
    pub sockets: usize,
    /// Connections completed and waiting to be accepted, over those sockets.
    pub queued: u64,
}

/// Reverse lookups (getnameinfo with NI_NAMEREQD) of the clients' address, made at once as
/// a server accepting that many clients makes them, each timed: a resolver that answers one
/// lookup at once may drop most of a burst.
#[derive(Clone, Debug, PartialEq)]
pub struct Lookup {
    /// The address looked up.
    pub addr: Ipv4Addr,
    /// How many lookups were made at once.
    pub asked: usize,
    /// How long each answered lookup took, s, fastest first (those not answered within the
    /// bound are missing).
    pub secs: Vec<f64>,
    /// What the first lookup to answer said: the name, or getnameinfo's error (or that none
    /// answered).
    pub answer: Result<String, String>,
}

impl Lookup {
    /// The answered lookup at quantile `q` (0..=1), ms.
    fn ms_at(&self, q: f64) -> f64 {
        let i = ((self.secs.len().saturating_sub(1)) as f64 * q).round() as usize;
        self.secs.get(i).map_or(0.0, |s| s * 1e3)
    }
}

/// A descriptor limit's value (`None`: unlimited).
pub type Limit = Option<u64>;

/// Everything measured when a server's column failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// The server's name ("torch").
    pub server: &'static str,
    /// The phase that failed.
    pub phase: Phase,
    /// From the phase's start until the bench saw the failure, s.
    pub after_s: f64,
    /// The failure the bench saw first, in words.
    pub what: String,
    /// The client processes' counts (`None`: the phase had no client processes).
    pub clients: Option<ClientCounts>,
    /// The server process: "still running", "exited (...)".
    pub state: String,
    /// The last lines the server wrote to stderr.
    pub stderr_tail: Vec<String>,
    /// Its open descriptors (`None`: unreadable, e.g. it exited).
    pub open_fds: Option<usize>,
    /// Its RLIMIT_NOFILE, soft and hard (`None`: unreadable).
    pub nofile: Option<(Limit, Limit)>,
    /// Its listening socket (`None`: its port is not known).
    pub listening: Option<Listening>,
    /// `/proc/sys/net/core/somaxconn`, the cap on a listen backlog.
    pub somaxconn: Option<u64>,
    /// The rise of TcpExt ListenOverflows and ListenDrops (`/proc/net/netstat`, this network
    /// namespace) since the server started.
    pub listen_rise: Option<(u64, u64)>,
    /// A reverse lookup of the clients' address, when one was timed.
    pub lookup: Option<Lookup>,
}

fn limit(l: Limit) -> String {
    l.map_or_else(|| "unlimited".to_string(), |v| v.to_string())
}

fn counts_text(counts: &[(String, usize)]) -> String {
    let parts: Vec<String> = counts.iter().map(|(w, n)| format!("{n} {w}")).collect();
    parts.join(", ")
}

impl Failure {
    /// The failure in words: what was measured, a line per source, nothing guessed.
    pub fn render(&self) -> String {
        let mut s = format!(
            "the {} server failed during {}, {:.3} s after it began: {}",
            self.server,
            self.phase.name(),
            self.after_s,
            Escaped(&self.what)
        );
        if let Some(c) = &self.clients {
            let _ = write!(s, "\n  clients: {} of {} ranks joined", c.joined, c.ranks);
            if c.uncounted > 0 {
                let _ = write!(s, " ({} ranks uncounted)", c.uncounted);
            }
            if !c.failed.is_empty() {
                let _ = write!(s, "; failed ranks: {}", counts_text(&c.failed));
            }
            if !c.unfinished.is_empty() {
                let _ = write!(
                    s,
                    "; unfinished ranks, by step: {}",
                    counts_text(&c.unfinished)
                );
            }
            if let Some(t) = c.first_failure_s {
                let _ = write!(s, "; first failure {t:.3} s into the phase");
                // Said once where it is also the failure the bench saw first.
                if c.first != self.what {
                    let _ = write!(s, ": {}", Escaped(&c.first));
                }
            }
            let _ = write!(s, "; client processes: {}", counts_text(&c.processes));
            for e in &c.errors {
                let _ = write!(s, "\n  {}", Escaped(e));
            }
        }
        let _ = write!(s, "\n  the server process: {}", self.state);
        if let Some(n) = self.open_fds {
            let _ = write!(s, "; {n} open descriptors");
        }
        if let Some((soft, hard)) = self.nofile {
            let _ = write!(
                s,
                "; RLIMIT_NOFILE {} soft, {} hard",
                limit(soft),
                limit(hard)
            );
            if let (Some(n), Some(soft)) = (self.open_fds, soft) {
                if n as u64 >= soft {
                    s.push_str(" (its open descriptors are at the soft limit)");
                }
            }
        }
        if let Some(l) = &self.listening {
            match l.sockets {
                0 => {
                    let _ = write!(
                        s,
                        "; no socket listens on port {} (/proc/net/tcp, tcp6)",
                        l.port
                    );
                }
                _ => {
                    let _ = write!(
                        s,
                        "; {} connections wait in the accept queue of port {}",
                        l.queued, l.port
                    );
                }
            }
        }
        if !self.stderr_tail.is_empty() {
            s.push_str("\n  its stderr ended with:");
            for l in &self.stderr_tail {
                let _ = write!(s, "\n    {}", Escaped(l));
            }
        }
        let mut machine = Vec::new();
        if let Some(m) = self.somaxconn {
            machine.push(format!("net.core.somaxconn {m}"));
        }
        if let Some((over, drops)) = self.listen_rise {
            machine.push(format!(
                "TcpExt ListenOverflows +{over}, ListenDrops +{drops} since the server started"
            ));
        }
        if !machine.is_empty() {
            let _ = write!(s, "\n  this machine: {}", machine.join("; "));
        }
        if let Some(l) = &self.lookup {
            let answer = match &l.answer {
                Ok(name) => format!("answered {}", Escaped(name)),
                Err(e) => Escaped(e).to_string(),
            };
            let _ = write!(
                s,
                "\n  {} reverse lookups (getnameinfo) of {} at once from the bench: {} answered within {} s (median {:.1} ms, slowest {:.1} ms); the first: {answer}",
                l.asked,
                l.addr,
                l.secs.len(),
                LOOKUP_BOUND.as_secs(),
                l.ms_at(0.5),
                l.ms_at(1.0),
            );
        }
        s
    }

    /// The same measurements as one JSON object.
    pub fn json(&self) -> Value {
        let counts = |c: &[(String, usize)]| -> Value {
            c.iter().map(|(w, n)| (w.clone(), json!(n))).collect()
        };
        let clients = self.clients.as_ref().map(|c| {
            json!({
                "ranks": c.ranks,
                "joined": c.joined,
                "uncounted": c.uncounted,
                "failed": counts(&c.failed),
                "unfinished": counts(&c.unfinished),
                "processes": counts(&c.processes),
                "first_failure_s": c.first_failure_s,
                "first_failure": c.first,
                "errors": c.errors,
            })
        });
        json!({
            "phase": self.phase.key(),
            "after_s": self.after_s,
            "what": self.what,
            "clients": clients,
            "server": {
                "state": self.state,
                "stderr_tail": self.stderr_tail,
                "open_fds": self.open_fds,
                "nofile_soft": self.nofile.and_then(|l| l.0),
                "nofile_hard": self.nofile.and_then(|l| l.1),
                "listening": self.listening.as_ref().map(|l| json!({
                    "port": l.port, "sockets": l.sockets, "queued": l.queued,
                })),
            },
            "somaxconn": self.somaxconn,
            "listen_overflows_rise": self.listen_rise.map(|r| r.0),
            "listen_drops_rise": self.listen_rise.map(|r| r.1),
            "reverse_lookup": self.lookup.as_ref().map(|l| json!({
                "addr": l.addr.to_string(),
                "asked": l.asked,
                "answered_secs": l.secs,
                "name": l.answer.as_ref().ok(),
                "error": l.answer.as_ref().err(),
            })),
        })
    }
}

/// Where a phase stopped short: which, when it began and when the failure was seen (both on
/// [`mono_ns`]'s clock), the failure in words, and the client processes' counts.
#[derive(Debug)]
pub struct Stop {
    /// The phase.
    pub phase: Phase,
    /// Its start.
    pub began: u64,
    /// When the bench saw the failure.
    pub at: u64,
    /// The failure in words.
    pub what: String,
    /// The client processes' counts, where the phase had client processes.
    pub clients: Option<ClientCounts>,
}

impl Stop {
    /// A stop seen now, with no client counts.
    pub fn new(phase: Phase, began: u64, what: String) -> Stop {
        Stop {
            phase,
            began,
            at: mono_ns(),
            what,
            clients: None,
        }
    }
}

/// The server process a failure is about.
pub struct Subject<'a> {
    /// The server's name.
    pub server: &'static str,
    /// Its process.
    pub proc: &'a mut Owned,
    /// Its stderr's last lines.
    pub stderr: &'a Tail,
    /// Its port, once known.
    pub port: Option<u16>,
    /// TcpExt ListenOverflows and ListenDrops when it started.
    pub listen0: Option<(u64, u64)>,
}

/// How long an exited server's stderr may take to reach its end.
const TAIL_WAIT: Duration = Duration::from_secs(1);

/// How long the reverse lookup may take before it is reported unanswered.
const LOOKUP_BOUND: Duration = Duration::from_secs(5);

/// Measures the server process and the machine now, for `stop`; `lookup_of` is the address
/// the phase's clients connected from, looked up once and timed (`None`: none).
pub fn observe(s: Subject<'_>, stop: Stop, lookup_of: Option<Ipv4Addr>) -> Failure {
    let pid = s.proc.pid();
    let state = s.proc.exit_note();
    // An exited server's last lines may still be in the pipe; a running one's are read so far.
    let exited = s.proc.child().try_wait().ok().flatten().is_some();
    let tail_wait = if exited { TAIL_WAIT } else { Duration::ZERO };
    Failure {
        server: s.server,
        phase: stop.phase,
        after_s: secs_between(stop.began, stop.at),
        what: stop.what,
        clients: stop.clients,
        state,
        stderr_tail: s.stderr.lines(tail_wait),
        open_fds: open_fds(pid),
        nofile: nofile(pid),
        listening: s.port.map(listening),
        somaxconn: read_trim("/proc/sys/net/core/somaxconn").and_then(|v| v.parse().ok()),
        listen_rise: s
            .listen0
            .zip(listen_counters())
            .map(|((o0, d0), (o1, d1))| (o1.saturating_sub(o0), d1.saturating_sub(d0))),
        lookup: lookup_of.map(reverse_lookup),
    }
}

fn read_trim(path: &str) -> Option<String> {
    Some(std::fs::read_to_string(path).ok()?.trim().to_string())
}

/// A process's RLIMIT_NOFILE from `/proc/<pid>/limits` (its own, whatever it set).
fn nofile(pid: u32) -> Option<(Limit, Limit)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    parse_nofile(&text)
}

fn parse_nofile(limits: &str) -> Option<(Limit, Limit)> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut it = line["Max open files".len()..].split_whitespace();
    let value = |v: &str| -> Option<Limit> {
        match v {
            "unlimited" => Some(None),
            v => v.parse().ok().map(Some),
        }
    };
    Some((value(it.next()?)?, value(it.next()?)?))
}

/// TcpExt ListenOverflows and ListenDrops of this network namespace.
pub fn listen_counters() -> Option<(u64, u64)> {
    parse_listen_counters(&std::fs::read_to_string("/proc/net/netstat").ok()?)
}

fn parse_listen_counters(netstat: &str) -> Option<(u64, u64)> {
    let mut tcp_ext = netstat.lines().filter(|l| l.starts_with("TcpExt:"));
    let names: Vec<&str> = tcp_ext.next()?.split_whitespace().collect();
    let values: Vec<&str> = tcp_ext.next()?.split_whitespace().collect();
    let get = |name: &str| -> Option<u64> {
        let i = names.iter().position(|n| *n == name)?;
        values.get(i)?.parse().ok()
    };
    Some((get("ListenOverflows")?, get("ListenDrops")?))
}

/// The LISTEN sockets on `port` and their accept queues, over IPv4 and IPv6.
fn listening(port: u16) -> Listening {
    let mut l = Listening {
        port,
        sockets: 0,
        queued: 0,
    };
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            for (_, queued) in parse_listeners(&text).filter(|(p, _)| *p == port) {
                l.sockets += 1;
                l.queued += queued;
            }
        }
    }
    l
}

/// Each LISTEN socket of a `/proc/net/tcp` table: its port and its accept queue's length
/// (the rx_queue column, which for a listening socket counts connections not yet accepted).
fn parse_listeners(table: &str) -> impl Iterator<Item = (u16, u64)> + '_ {
    table.lines().skip(1).filter_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // sl, local_address, rem_address, st, tx_queue:rx_queue, ...
        if f.get(3) != Some(&"0A") {
            return None;
        }
        let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
        let queued = u64::from_str_radix(f.get(4)?.split(':').nth(1)?, 16).ok()?;
        Some((port, queued))
    })
}

/// How many reverse lookups are made at once.
const LOOKUP_BURST: usize = 64;

/// Times [`LOOKUP_BURST`] reverse lookups of `addr` made at once, each in a thread of its
/// own, waiting at most [`LOOKUP_BOUND`] in all (a lookup that hangs is left to its thread).
fn reverse_lookup(addr: Ipv4Addr) -> Lookup {
    let (tx, rx) = std::sync::mpsc::channel();
    let start = Instant::now();
    for _ in 0..LOOKUP_BURST {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let began = Instant::now();
            let said = getnameinfo(addr);
            let _ = tx.send((began.elapsed().as_secs_f64(), said));
        });
    }
    drop(tx);
    let mut secs = Vec::new();
    let mut answer = None;
    while secs.len() < LOOKUP_BURST {
        let left = LOOKUP_BOUND.saturating_sub(start.elapsed());
        let Ok((took, said)) = rx.recv_timeout(left) else {
            break;
        };
        secs.push(took);
        answer.get_or_insert(said);
    }
    secs.sort_by(f64::total_cmp);
    Lookup {
        addr,
        asked: LOOKUP_BURST,
        secs,
        answer: answer
            .unwrap_or_else(|| Err(format!("none answered within {} s", LOOKUP_BOUND.as_secs()))),
    }
}

/// The host name of `addr` (NI_NAMEREQD: no numeric fallback), or getnameinfo's error.
fn getnameinfo(addr: Ipv4Addr) -> Result<String, String> {
    // SAFETY: sockaddr_in is plain data, valid when zeroed.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_addr.s_addr = u32::from_ne_bytes(addr.octets());
    let mut host = [0 as libc::c_char; 1025];
    // SAFETY: `sa` is a valid sockaddr_in of the length given; `host` is writable for its
    // length; no service is asked for (null, 0).
    let rc = unsafe {
        libc::getnameinfo(
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            host.as_mut_ptr(),
            host.len() as libc::socklen_t,
            std::ptr::null_mut(),
            0,
            libc::NI_NAMEREQD,
        )
    };
    if rc == 0 {
        // SAFETY: on success getnameinfo wrote a NUL-terminated name into `host`.
        let name = unsafe { std::ffi::CStr::from_ptr(host.as_ptr()) };
        Ok(name.to_string_lossy().into_owned())
    } else {
        // SAFETY: gai_strerror returns a static NUL-terminated string for any code.
        let why = unsafe { std::ffi::CStr::from_ptr(libc::gai_strerror(rc)) };
        Err(format!("no name ({})", why.to_string_lossy()))
    }
}

#[cfg(test)]
mod tests;

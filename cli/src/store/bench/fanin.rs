//! One fan-in against one running server: the client processes are started, every rank
//! joins, the idle server is sampled, the rounds run, every rank leaves, and the ADD replies
//! are checked (each round's, over all ranks, exactly 1..=N).
//!
//! Times come from the client processes' reports and the parent's own readings of one
//! clock: join is from starting the client processes to the last rank joined; barrier r is
//! from the end of round r-1 (for round 0: the go signal) to the last rank done with r;
//! leave is from the end of the last round until the server holds no client connection
//! (its open descriptors back to their count before the clients came).

use super::args::Plan;
use super::error::BenchError;
use super::failure::{ClientCounts, Heard, Phase, Stop};
use super::light::SETTLE;
use super::messages::{Msg, StopReason, GO, STOP};
use super::proc_stat::{cpu_secs, mono_ns, open_fds, rss_kib, secs_between};
use super::procs::{tell, Owned};
use super::server::Server;
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What one fan-in measured.
#[derive(Debug)]
pub struct FanIn {
    /// Ranks that joined.
    pub joined: usize,
    /// Rounds every rank finished.
    pub rounds_completed: usize,
    /// Rounds whose ADD replies were exactly 1..=N.
    pub rounds_exact: usize,
    /// Spawn of the clients to the last rank joined, s.
    pub join_s: f64,
    /// Each barrier's time, s.
    pub barrier_s: Vec<f64>,
    /// End of the last round to the server holding no client connection, s (`None`: it still
    /// held some when the bound passed).
    pub leave_s: Option<f64>,
    /// The server's resident set before the clients came, KiB.
    pub base_rss_kib: u64,
    /// Its resident set with every rank joined and idle, KiB.
    pub idle_rss_kib: u64,
    /// Its CPU time from the clients' start to their leaving, s.
    pub cpu_s: f64,
}

/// A line from client process `i`, or its end (`None`).
type Line = (usize, Option<Msg>);

/// The loopback address client process `i` connects from.
pub fn source(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, u8::try_from(2 + i).unwrap_or(u8::MAX))
}

/// Runs the fan-in of `plan` on `server`; keys live under `run`. A failure is measured:
/// the clients' counts, the server process and the machine (see [`super::failure`]).
pub fn run(plan: &Plan, server: &mut Server, run: &str) -> Result<FanIn, BenchError> {
    fan_in(plan, server, run).map_err(|stop| {
        let connected = stop.clients.is_some().then(|| source(0));
        server.failed(stop, connected)
    })
}

fn fan_in(plan: &Plan, server: &Server, run: &str) -> Result<FanIn, Stop> {
    let pid = server.proc.pid();
    let spawned = mono_ns();
    let unreadable = |phase, began| {
        Stop::new(
            phase,
            began,
            format!("cannot read /proc/{pid} of the server"),
        )
    };
    let base_fds = open_fds(pid).ok_or_else(|| unreadable(Phase::Join, spawned))?;
    let base_rss_kib = rss_kib(pid).ok_or_else(|| unreadable(Phase::Join, spawned))?;
    let cpu0 = cpu_secs(pid).ok_or_else(|| unreadable(Phase::Join, spawned))?;
    let exe = std::env::current_exe().map_err(|e| {
        Stop::new(
            Phase::Join,
            spawned,
            format!("cannot find this tool's binary: {e}"),
        )
    })?;
    let (tx, rx) = mpsc::channel::<Line>();
    let mut clients = Vec::with_capacity(plan.shares.len());
    let mut stdins = Vec::with_capacity(plan.shares.len());
    let mut first = 0usize;
    for (i, &count) in plan.shares.iter().enumerate() {
        let mut cmd = Command::new(&exe);
        cmd.args(["store", "bench-client"])
            .args(["--port", &server.port.to_string()])
            .args(["--source", &source(i).to_string()])
            .args(["--first", &first.to_string()])
            .args(["--count", &count.to_string()])
            .args(["--ranks", &plan.ranks.to_string()])
            .args(["--rounds", &plan.rounds.to_string()])
            .args(["--run", run])
            .args(["--timeout", &plan.timeout.as_secs().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut c = Owned::spawn(&mut cmd, format!("client process {i}"))
            .map_err(|e| Stop::new(Phase::Join, spawned, e.to_string()))?;
        let out = c.child().stdout.take();
        stdins.push(c.child().stdin.take());
        let tx = tx.clone();
        // Ends at the child's end of stdout; a line no client writes is reported as such.
        std::thread::spawn(move || {
            if let Some(out) = out {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let msg = Msg::parse(&line).unwrap_or(Msg::Error(format!(
                        "wrote a line no client writes: {}",
                        oxccl::core::text::Escaped(&line)
                    )));
                    if tx.send((i, Some(msg))).is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send((i, None));
        });
        clients.push(c);
        first += count;
    }
    drop(tx);
    let mut inbox = Inbox {
        rx,
        heard: vec![Heard::Nothing; clients.len()],
        clients: &mut clients,
        stdins,
        shares: &plan.shares,
        // Past the clients' own bound, so that theirs, with their counts, comes first.
        bound: plan.timeout + SETTLE + Duration::from_secs(2),
        client_bound: plan.timeout,
    };
    let mut joined_at = 0;
    for _ in 0..plan.shares.len() {
        match inbox.next() {
            Ok((_, Some(Msg::Joined(t)))) => joined_at = joined_at.max(t),
            Ok((i, m)) => {
                let what = inbox.unexpected(i, m.as_ref());
                return Err(inbox.stop(Phase::Join, spawned, what));
            }
            Err(what) => return Err(inbox.stop(Phase::Join, spawned, what)),
        }
    }
    // The idle server: every rank connected, none sending.
    std::thread::sleep(Duration::from_millis(200));
    let idle_rss_kib = rss_kib(pid).ok_or_else(|| unreadable(Phase::Join, spawned))?;
    let go_at = mono_ns();
    let mut pipes: Vec<&mut ChildStdin> = inbox.stdins.iter_mut().flatten().collect();
    let told = tell(&mut pipes, GO);
    if let Some((i, e)) = told
        .iter()
        .enumerate()
        .find_map(|(i, r)| Some(i).zip(r.as_ref().err()))
    {
        let what = format!("cannot tell client process {i} to go: {e}");
        return Err(inbox.stop(Phase::Rounds, go_at, what));
    }
    let mut left = 0;
    let mut rounds: Vec<Vec<(u64, Vec<i64>)>> = vec![Vec::new(); plan.rounds];
    let mut released_at = None;
    let mut cpu1 = cpu0;
    let mut ended = 0;
    while ended < plan.shares.len() {
        match inbox.next() {
            Ok((_, Some(Msg::Left(_)))) => {
                left += 1;
                if left == plan.shares.len() {
                    // The rounds' lines follow the leave: the server is watched first.
                    released_at = released(pid, base_fds, plan.timeout);
                    cpu1 = cpu_secs(pid).ok_or_else(|| unreadable(Phase::Rounds, go_at))?;
                }
            }
            Ok((_, Some(Msg::Round { round, at, values }))) if round < plan.rounds => {
                rounds[round].push((at, values));
            }
            Ok((i, None)) if inbox.heard[i] == Heard::Left => ended += 1,
            Ok((i, m)) => {
                let what = inbox.unexpected(i, m.as_ref());
                return Err(inbox.stop(Phase::Rounds, go_at, what));
            }
            Err(what) => return Err(inbox.stop(Phase::Rounds, go_at, what)),
        }
    }
    // The end of round r, over every process (each reports every round once).
    let ends: Vec<u64> = rounds
        .iter()
        .map(|r| r.iter().map(|(at, _)| *at).max().unwrap_or(0))
        .collect();
    let mut barrier_s = Vec::with_capacity(plan.rounds);
    let mut prev = go_at;
    for &end in &ends {
        barrier_s.push(secs_between(prev, end));
        prev = end;
    }
    Ok(FanIn {
        joined: plan.ranks,
        // Finished by every rank: a reply for each, whatever their values.
        rounds_completed: rounds
            .iter()
            .filter(|r| r.iter().map(|(_, v)| v.len()).sum::<usize>() == plan.ranks)
            .count(),
        rounds_exact: rounds.iter().filter(|r| exact(r, plan.ranks)).count(),
        join_s: secs_between(spawned, joined_at),
        barrier_s,
        leave_s: released_at.map(|t| secs_between(prev, t)),
        base_rss_kib,
        idle_rss_kib,
        cpu_s: cpu1 - cpu0,
    })
}

/// Whether one round's ADD replies, over every process, are 1..=N, each exactly once.
fn exact(round: &[(u64, Vec<i64>)], ranks: usize) -> bool {
    let mut seen = vec![false; ranks];
    let mut count = 0;
    for v in round.iter().flat_map(|(_, values)| values) {
        let Some(slot) = usize::try_from(*v)
            .ok()
            .and_then(|v| v.checked_sub(1))
            .and_then(|i| seen.get_mut(i))
        else {
            return false;
        };
        if std::mem::replace(slot, true) {
            return false;
        }
        count += 1;
    }
    count == ranks
}

/// When the server first holds no more descriptors than `base` (every client connection
/// closed), polled every millisecond; `None` if not within `timeout`.
fn released(pid: u32, base: usize, timeout: Duration) -> Option<u64> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if open_fds(pid).is_some_and(|n| n <= base) {
            return Some(mono_ns());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// How long the bench waits, after telling the client processes to stop, for their counts.
const REPORT_BOUND: Duration = Duration::from_secs(5);

/// The client processes' lines, each wait bounded, and what each process last said.
struct Inbox<'a> {
    rx: Receiver<Line>,
    clients: &'a mut Vec<Owned>,
    /// Their stdins, open until the end: `go`, or `stop` after a failure.
    stdins: Vec<Option<ChildStdin>>,
    heard: Vec<Heard>,
    shares: &'a [usize],
    /// How long the bench waits for a line.
    bound: Duration,
    /// The client processes' own bound on a phase.
    client_bound: Duration,
}

impl Inbox<'_> {
    /// Notes what `line` says of its process.
    fn hear(&mut self, (i, msg): &Line) {
        let h = &mut self.heard[*i];
        match msg {
            Some(Msg::Joined(_)) => *h = Heard::Joined,
            Some(Msg::Left(_)) => *h = Heard::Left,
            Some(Msg::Stopped(t)) => *h = Heard::Stopped(t.clone()),
            Some(Msg::Error(why)) => *h = Heard::Error(why.clone()),
            Some(Msg::Round { .. }) => {}
            None if !h.is_final() => *h = Heard::Ended(self.clients[*i].exit_note()),
            None => {}
        }
    }

    /// The next line or the end of a process's output; a process that stopped short, or
    /// silence past the bound, is an error (in words).
    fn next(&mut self) -> Result<(usize, Option<Msg>), String> {
        let line = match self.rx.recv_timeout(self.bound) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "no client process reported within {} s",
                    self.bound.as_secs()
                ))
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err("every client process had ended".into())
            }
        };
        self.hear(&line);
        let (i, msg) = line;
        let what = &self.clients[i].what;
        match msg {
            Some(Msg::Stopped(t)) => Err(match t.why {
                Some(StopReason::Timeout) => format!(
                    "{what} reached its bound of {} s for the phase",
                    self.client_bound.as_secs()
                ),
                _ if t.first.is_empty() => format!("{what} stopped with no rank failed"),
                _ => format!("{what}: {}", t.first),
            }),
            Some(Msg::Error(why)) => Err(format!("{what}: {why}")),
            msg => Ok((i, msg)),
        }
    }

    /// Words for a line that does not belong where it came.
    fn unexpected(&self, i: usize, m: Option<&Msg>) -> String {
        let what = &self.clients[i].what;
        match (m, &self.heard[i]) {
            (None, Heard::Ended(note)) => format!("{what} {note}"),
            (None, _) => format!("{what} closed its output"),
            (Some(m), _) => format!(
                "{what} reported {:?}",
                m.to_line().chars().take(60).collect::<String>()
            ),
        }
    }

    /// Ends `phase` (begun at `began`) after the failure `what`: the processes get a moment
    /// to report on their own (their failing ranks settle meanwhile), then those still
    /// going are told to stop and report; their counts are summed.
    fn stop(&mut self, phase: Phase, began: u64, what: String) -> Stop {
        let mut stop = Stop::new(phase, began, what);
        self.collect(SETTLE + Duration::from_millis(500));
        let mut pipes: Vec<&mut ChildStdin> = self
            .stdins
            .iter_mut()
            .zip(&self.heard)
            .filter(|(_, h)| !h.is_final())
            .filter_map(|(s, _)| s.as_mut())
            .collect();
        // A process that ended meanwhile refuses the line; its end is heard anyway.
        tell(&mut pipes, STOP);
        self.collect(REPORT_BOUND);
        stop.clients = Some(ClientCounts::sum(self.shares, &self.heard, began));
        stop
    }

    /// Hears lines until every process said its last or `bound` passed.
    fn collect(&mut self, bound: Duration) {
        let end = Instant::now() + bound;
        while !self.heard.iter().all(Heard::is_final) {
            let wait = end.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok(line) => self.hear(&line),
                Err(_) => return,
            }
        }
    }
}

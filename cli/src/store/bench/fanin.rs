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
use super::messages::{Msg, GO};
use super::proc_stat::{cpu_secs, mono_ns, open_fds, rss_kib, secs_between};
use super::procs::Owned;
use super::server::Server;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
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

/// Runs the fan-in of `plan` on `server`; keys live under `run`. A failure while the ranks
/// join carries `join_hint`, what likely slows this server's accepts ("" if nothing known).
pub fn run(
    plan: &Plan,
    server: &Server,
    run: &str,
    join_hint: &'static str,
) -> Result<FanIn, BenchError> {
    let pid = server.proc.pid();
    let unreadable = || BenchError::Run(format!("cannot read /proc/{pid} of the server"));
    let base_fds = open_fds(pid).ok_or_else(unreadable)?;
    let base_rss_kib = rss_kib(pid).ok_or_else(unreadable)?;
    let cpu0 = cpu_secs(pid).ok_or_else(unreadable)?;
    let exe = std::env::current_exe()
        .map_err(|e| BenchError::Start(format!("cannot find this tool's binary: {e}")))?;
    let (tx, rx) = mpsc::channel::<Line>();
    let spawned = mono_ns();
    let mut clients = Vec::with_capacity(plan.shares.len());
    let mut first = 0usize;
    for (i, &count) in plan.shares.iter().enumerate() {
        let mut cmd = Command::new(&exe);
        cmd.args(["store", "bench-client"])
            .args(["--port", &server.port.to_string()])
            .args(["--source", &format!("127.0.0.{}", 2 + i)])
            .args(["--first", &first.to_string()])
            .args(["--count", &count.to_string()])
            .args(["--ranks", &plan.ranks.to_string()])
            .args(["--rounds", &plan.rounds.to_string()])
            .args(["--run", run])
            .args(["--timeout", &plan.timeout.as_secs().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut c = Owned::spawn(&mut cmd, format!("client process {i}"))?;
        let out = c.child().stdout.take();
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
        clients: &mut clients,
        timeout: plan.timeout,
    };
    let mut joined_at = 0;
    for _ in 0..plan.shares.len() {
        match inbox.next("joining").map_err(|e| e.with_hint(join_hint))? {
            (_, Msg::Joined(t)) => joined_at = joined_at.max(t),
            (i, m) => return Err(inbox.unexpected(i, &m, "joining")),
        }
    }
    // The idle server: every rank connected, none sending.
    std::thread::sleep(Duration::from_millis(200));
    let idle_rss_kib = rss_kib(pid).ok_or_else(unreadable)?;
    let go_at = mono_ns();
    for c in inbox.clients.iter_mut() {
        if let Some(mut stdin) = c.child().stdin.take() {
            writeln!(stdin, "{GO}")
                .map_err(|e| BenchError::Run(format!("cannot tell {} to go: {e}", c.what)))?;
        }
    }
    let mut left = 0;
    let mut rounds: Vec<Vec<(u64, Vec<i64>)>> = vec![Vec::new(); plan.rounds];
    let mut released_at = None;
    let mut cpu1 = cpu0;
    let mut ended = 0;
    while ended < plan.shares.len() {
        match inbox.next_or_end("the rounds")? {
            (_, Some(Msg::Left(_))) => {
                left += 1;
                if left == plan.shares.len() {
                    // The rounds' lines follow the leave: the server is watched first.
                    released_at = released(pid, base_fds, plan.timeout);
                    cpu1 = cpu_secs(pid).ok_or_else(unreadable)?;
                }
            }
            (_, Some(Msg::Round { round, at, values })) if round < plan.rounds => {
                rounds[round].push((at, values));
            }
            (i, Some(m)) => return Err(inbox.unexpected(i, &m, "the rounds")),
            (_, None) => ended += 1,
        }
    }
    if left < plan.shares.len() {
        return Err(BenchError::Run(
            "a client process ended without leaving".into(),
        ));
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

/// The client processes' lines, each wait bounded by the plan's timeout.
struct Inbox<'a> {
    rx: Receiver<Line>,
    clients: &'a mut Vec<Owned>,
    timeout: Duration,
}

impl Inbox<'_> {
    /// The next line or the end of a process's output; `phase` names the wait in errors.
    fn next_or_end(&mut self, phase: &'static str) -> Result<(usize, Option<Msg>), BenchError> {
        match self.rx.recv_timeout(self.timeout) {
            Ok((i, Some(Msg::Error(why)))) => {
                Err(BenchError::Run(format!("{}: {why}", self.clients[i].what)))
            }
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => Err(BenchError::Timeout {
                phase,
                secs: self.timeout.as_secs(),
                hint: "",
            }),
            Err(RecvTimeoutError::Disconnected) => Err(BenchError::Run(format!(
                "every client process ended during {phase}"
            ))),
        }
    }

    /// The next line; a process that ends here failed.
    fn next(&mut self, phase: &'static str) -> Result<(usize, Msg), BenchError> {
        match self.next_or_end(phase)? {
            (i, Some(m)) => Ok((i, m)),
            (i, None) => {
                // Its error line, if any, came first; this one ended silently.
                let note = self.clients[i].exit_note();
                let what = &self.clients[i].what;
                Err(BenchError::Run(format!("{what} {note} during {phase}")))
            }
        }
    }

    fn unexpected(&mut self, i: usize, m: &Msg, phase: &str) -> BenchError {
        BenchError::Run(format!(
            "{} reported {:?} during {phase}",
            self.clients[i].what,
            m.to_line().chars().take(60).collect::<String>()
        ))
    }
}

//! The chaos run's driver: keeps an elastic world of processes training on the mock over a
//! TCP store served by a process of its own, and injects, at random from a seed it prints:
//! kills (with a replacement, sometimes two racing for the rank), stops short and long (a rank
//! that stops answering, then comes back late), joins as a live member, `new`s of a live
//! rank, a frozen store host, a killed store host (the world ends; a new one starts), late
//! and slow ranks. It checks the invariants all along (`checks`) and prints a summary.

use crate::checks::{end_allowed, field, Agreement, Allowed};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

/// The run's settings.
pub struct Settings {
    pub seed: u64,
    pub run_for: Duration,
    pub ranks: u32,
    pub timeout: Duration,
    /// Where every line the processes print goes, tagged with world, rank and part.
    pub log: Option<PathBuf>,
}

/// A small seeded generator (xorshift64*): the same seed, the same run of choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo) + 1))
    }
}

/// A process the driver started.
struct Proc {
    rank: u32,
    world: u32,
    what: &'static str,
    child: Child,
    allowed: Allowed,
    /// Once past this, a process still running is a hang.
    bound: Option<Instant>,
    end: Option<String>,
    stopped: bool,
    judged: bool,
    /// When this process last lost a rank through a work that timed out (the watchdog's
    /// failure: it dumps, dump on timeout being on).
    work_loss: Option<Instant>,
    /// Its output ended (its reader saw the end of the pipe).
    output_ended: bool,
    /// When the driver first saw it exited.
    exited: Option<Instant>,
}

/// What a process's reader sends once its output ended: the process is judged only then,
/// so its last line (how it ended) is never missed.
const OUTPUT_END: &str = "\u{1}output ended";

/// How long an exited process's output may take to end before it is judged anyway.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// What a refused process may take past its timeout: starting, joining the store.
const REFUSAL_SLACK_MS: u64 = 1000;

/// The injected events, counted by kind.
const KINDS: [&str; 8] = [
    "kill",
    "stop_short",
    "stop_long",
    "member_join",
    "stale_new",
    "freeze_store",
    "kill_store",
    "late_rank",
];

pub struct Driver {
    s: Settings,
    rng: Rng,
    exe: PathBuf,
    stop_file: PathBuf,
    procs: Vec<Proc>,
    tx: Sender<(usize, String)>,
    rx: Receiver<(usize, String)>,
    store: Option<Child>,
    port: u16,
    world: u32,
    agree: Agreement,
    pub violations: Vec<String>,
    pub events: BTreeMap<&'static str, u32>,
    /// Recovery times: from a kill to the survivors' first step at the next epoch, ms.
    pub recoveries: Vec<u128>,
    pending_recovery: Option<(u32, Instant, u64)>,
    epoch_seen: BTreeMap<u32, u64>,
    refusals: u32,
    log: Option<std::fs::File>,
    /// The processes' dump folders' parent.
    dumps: PathBuf,
    /// Processes whose failure left a dump.
    dumped: u32,
    /// Replacements that ended before they were admitted (refused, or timed out).
    not_admitted: u32,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(29_611, |a| a.port())
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

impl Driver {
    pub fn new(s: Settings) -> Result<Driver, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let stop_file =
            std::env::temp_dir().join(format!("oxccl-chaos-stop-{}", std::process::id()));
        let _ = std::fs::remove_file(&stop_file);
        let (tx, rx) = channel();
        let log = match &s.log {
            Some(p) => Some(std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?),
            None => None,
        };
        Ok(Driver {
            rng: Rng(s.seed.max(1)),
            exe,
            stop_file,
            procs: Vec::new(),
            tx,
            rx,
            store: None,
            port: 0,
            world: 0,
            agree: Agreement::default(),
            violations: Vec::new(),
            events: KINDS.iter().map(|k| (*k, 0)).collect(),
            recoveries: Vec::new(),
            pending_recovery: None,
            epoch_seen: BTreeMap::new(),
            s,
            refusals: 0,
            log,
            dumps: std::env::temp_dir().join(format!("oxccl-chaos-dumps-{}", std::process::id())),
            dumped: 0,
            not_admitted: 0,
        })
    }

    /// Where process `id` writes its flight recorder's dumps.
    fn dump_dir(&self, id: usize) -> PathBuf {
        self.dumps.join(format!("p{id}"))
    }

    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.s.timeout.as_millis()).unwrap_or(u64::MAX)
    }

    /// Starts the store host, a process of this program.
    fn start_store(&mut self) -> Result<(), String> {
        self.port = free_port();
        let child = Command::new(&self.exe)
            .env("CHAOS_STORE_PORT", self.port.to_string())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting the store host: {e}"))?;
        self.store = Some(child);
        let began = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if began.elapsed() > Duration::from_secs(10) {
                return Err("the store host never listened".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Starts a process of `what` part as global rank `rank`.
    fn spawn(
        &mut self,
        rank: u32,
        role: &str,
        what: &'static str,
        allowed: Allowed,
        delay: Duration,
    ) {
        let mut c = Command::new(&self.exe);
        c.env("RANK", rank.to_string())
            .env("WORLD_SIZE", self.s.ranks.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", self.port.to_string())
            .env("TORCHELASTIC_USE_AGENT_STORE", "True")
            .env("OXCCL_BACKEND", "mock")
            .env("OXCCL_TIMEOUT_MS", self.timeout_ms().to_string())
            .env("CHAOS_ROLE", role)
            .env("CHAOS_STOP", &self.stop_file)
            .env("CHAOS_DELAY_MS", delay.as_millis().to_string())
            .env("OXCCL_TRACE_DIR", self.dump_dir(self.procs.len()))
            .env("OXCCL_DUMP_ON_TIMEOUT", "1")
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("CHAOS_STDERR").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        if self.rng.below(4) == 0 && role == "new" {
            c.env(
                "CHAOS_SLOW_MS",
                self.rng.below(self.timeout_ms() / 10).to_string(),
            );
        }
        let mut child = match c.spawn() {
            Ok(c) => c,
            Err(e) => {
                self.violations
                    .push(format!("could not start rank {rank}: {e}"));
                return;
            }
        };
        let id = self.procs.len();
        if let Some(out) = child.stdout.take() {
            let tx = self.tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send((id, line)).is_err() {
                        return;
                    }
                }
                let _ = tx.send((id, OUTPUT_END.to_string()));
            });
        }
        let bound = match allowed {
            Allowed::Train => None,
            _ => Some(Instant::now() + delay + 2 * self.s.timeout + Duration::from_secs(10)),
        };
        self.procs.push(Proc {
            rank,
            world: self.world,
            what,
            child,
            allowed,
            bound,
            end: None,
            stopped: false,
            judged: false,
            work_loss: None,
            output_ended: false,
            exited: None,
        });
    }

    /// Starts a world: a store host and its ranks (one of them late sometimes).
    fn start_world(&mut self) -> Result<(), String> {
        self.world += 1;
        self.start_store()?;
        let late = (self.rng.below(3) == 0).then(|| self.rng.below(u64::from(self.s.ranks)) as u32);
        for r in 0..self.s.ranks {
            let delay = match late {
                Some(l) if l == r => {
                    *self.events.entry("late_rank").or_default() += 1;
                    self.rng.ms(100, self.timeout_ms() / 2)
                }
                _ => Duration::ZERO,
            };
            self.spawn(r, "new", "member", Allowed::Train, delay);
        }
        println!("chaos: world {} on port {}", self.world, self.port);
        Ok(())
    }

    /// The members now: processes of this world still running whose part is to train or
    /// that were admitted.
    fn live_members(&self) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|&i| {
                let p = &self.procs[i];
                p.world == self.world
                    && !p.judged
                    && p.end.is_none()
                    && !p.stopped
                    && matches!(p.allowed, Allowed::Train)
            })
            .collect()
    }

    /// Reads every line waiting; checks what it says.
    fn drain(&mut self) {
        while let Ok((id, line)) = self.rx.try_recv() {
            let world = self.procs[id].world;
            if line == OUTPUT_END {
                self.procs[id].output_ended = true;
                continue;
            }
            if let Some(log) = &mut self.log {
                let p = &self.procs[id];
                let _ = writeln!(log, "w{world} r{} {}: {line}", p.rank, p.what);
            }
            if line.starts_with("STEP ") {
                if let Some(v) = self.agree.step(world, &line) {
                    self.violations.push(v);
                }
                if let (Some(e), true) = (
                    field(&line, "epoch").and_then(|e| e.parse::<u64>().ok()),
                    world == self.world,
                ) {
                    let seen = self.epoch_seen.entry(world).or_default();
                    if e > *seen {
                        *seen = e;
                    }
                    if let Some((w, at, from)) = self.pending_recovery {
                        if w == world && e > from {
                            self.recoveries.push(at.elapsed().as_millis());
                            self.pending_recovery = None;
                        }
                    }
                }
            } else if line.starts_with("JOINED ") && self.procs[id].allowed == Allowed::Replacement
            {
                // The admitted one of a pair trains from here.
                self.procs[id].allowed = Allowed::Train;
                self.procs[id].bound = None;
            } else if line.starts_with("LOST ") && line.contains(" work=true") {
                self.procs[id].work_loss = Some(Instant::now());
            } else if line.starts_with("END ") {
                self.procs[id].end = Some(line);
            }
        }
    }

    /// Reaps ended processes and checks their ends and bounds.
    fn reap(&mut self, stopping: bool) {
        // A refusal comes within the process's own timeout (and its start).
        let refusal_bound = self.timeout_ms() + REFUSAL_SLACK_MS;
        for p in self.procs.iter_mut().filter(|p| !p.judged) {
            match p.child.try_wait() {
                Ok(Some(_))
                    if !p.output_ended
                        && *p.exited.get_or_insert_with(Instant::now) + OUTPUT_GRACE
                            > Instant::now() => {}
                Ok(Some(st)) => {
                    let end = p.end.get_or_insert_with(|| "END none".into()).clone();
                    if let Err(v) = end_allowed(p.allowed, st.code(), &end, stopping) {
                        self.violations.push(format!(
                            "world {} rank {} ({}): {v}",
                            p.world, p.rank, p.what
                        ));
                    }
                    if p.allowed == Allowed::Replacement && !end.starts_with("END ok") {
                        self.not_admitted += 1;
                    }
                    if end.starts_with("END InvalidArgument") || end.starts_with("END Timeout") {
                        self.refusals += 1;
                        let ms: u64 = field(&end, "ms").and_then(|m| m.parse().ok()).unwrap_or(0);
                        if ms > refusal_bound {
                            self.violations.push(format!(
                                "world {} rank {} ({}): refused after {ms} ms, past its timeout",
                                p.world, p.rank, p.what
                            ));
                        }
                    }
                    p.judged = true;
                }
                _ if p.bound.is_some_and(|b| Instant::now() > b) => {
                    self.violations.push(format!(
                        "world {} rank {} ({}): still running past its bound",
                        p.world, p.rank, p.what
                    ));
                    signal(p.child.id(), "-KILL");
                    let _ = p.child.wait();
                    p.end = Some("END hung".into());
                    p.judged = true;
                }
                _ => {}
            }
        }
    }

    /// Waits `d`, reading and checking meanwhile.
    fn idle(&mut self, d: Duration, stopping: bool) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.drain();
            self.reap(stopping);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.drain();
        self.reap(stopping);
    }

    fn pick_member(&mut self) -> Option<usize> {
        let live = self.live_members();
        (live.len() > 2).then(|| live[self.rng.below(live.len() as u64) as usize])
    }

    /// One injected event.
    fn inject(&mut self) -> Result<(), String> {
        let t = self.s.timeout;
        let kind = match self.rng.below(100) {
            0..=24 => "kill",
            25..=39 => "stop_short",
            40..=49 => "stop_long",
            50..=64 => "member_join",
            65..=79 => "stale_new",
            80..=93 => "freeze_store",
            _ => "kill_store",
        };
        let Some(victim) = self.pick_member() else {
            // Too few members to lose one: bring the world back to size first.
            return self.refill();
        };
        let (rank, pid) = (self.procs[victim].rank, self.procs[victim].child.id());
        *self.events.entry(kind).or_default() += 1;
        println!("chaos: {kind} (rank {rank})");
        if let Some(log) = &mut self.log {
            let _ = writeln!(log, "chaos: {kind} (rank {rank})");
        }
        match kind {
            "kill" => {
                signal(pid, "-KILL");
                self.procs[victim].allowed = Allowed::AnyEnd;
                self.procs[victim].bound = Some(Instant::now() + Duration::from_secs(5));
                let from = *self.epoch_seen.get(&self.world).unwrap_or(&0);
                self.pending_recovery = Some((self.world, Instant::now(), from));
                let d = self.rng.ms(0, 2 * t.as_millis() as u64);
                self.idle(d, false);
                let racing = self.rng.below(3) == 0;
                let allowed = Allowed::Replacement;
                self.spawn(rank, "join", "replacement", allowed, Duration::ZERO);
                if racing {
                    self.spawn(rank, "join", "racing replacement", allowed, Duration::ZERO);
                }
            }
            "stop_short" => {
                signal(pid, "-STOP");
                let d = self.rng.ms(50, t.as_millis() as u64 / 4);
                self.idle(d, false);
                signal(pid, "-CONT");
            }
            "stop_long" => {
                signal(pid, "-STOP");
                self.procs[victim].stopped = true;
                self.procs[victim].allowed = Allowed::AnyEnd;
                let from = *self.epoch_seen.get(&self.world).unwrap_or(&0);
                self.pending_recovery = Some((self.world, Instant::now(), from));
                let stopped_at = Instant::now();
                let survivors: Vec<usize> = self
                    .live_members()
                    .into_iter()
                    .filter(|&i| i != victim)
                    .collect();
                self.idle(2 * t + Duration::from_secs(2), false);
                // A survivor whose work timed out on the stopped rank dumped (dump on timeout);
                // one that found the loss at an init had no work in flight to dump.
                for i in survivors {
                    let p = &self.procs[i];
                    let json = self.dump_dir(i).join(format!("rank_{}.json", p.rank));
                    let by_work = p.work_loss.is_some_and(|at| at >= stopped_at);
                    match json.is_file() {
                        true => self.dumped += 1,
                        false if p.end.is_some() || !by_work => {}
                        false => self.violations.push(format!(
                            "world {} rank {} ({}): its collective timed out with rank {rank} stopped, and it left no dump at {}",
                            p.world,
                            p.rank,
                            p.what,
                            json.display()
                        )),
                    }
                }
                signal(pid, "-CONT");
                // Back late: it must learn it is out and end within its bound.
                self.procs[victim].bound = Some(Instant::now() + t + Duration::from_secs(10));
                self.idle(Duration::from_millis(500), false);
                self.spawn(
                    rank,
                    "join",
                    "replacement",
                    Allowed::Replacement,
                    Duration::ZERO,
                );
            }
            "member_join" => self.spawn(
                rank,
                "join",
                "join as a live member",
                Allowed::Refused("rank"),
                Duration::ZERO,
            ),
            "stale_new" => self.spawn(
                rank,
                "new",
                "new of a live rank",
                Allowed::Refused("store"),
                Duration::ZERO,
            ),
            "freeze_store" => {
                let store = self.store.as_ref().map(Child::id);
                if let Some(s) = store {
                    signal(s, "-STOP");
                    let d = self.rng.ms(100, t.as_millis() as u64 / 4);
                    self.idle(d, false);
                    signal(s, "-CONT");
                }
            }
            _ => {
                // The world ends with its store: every process of it must end within its bound.
                if let Some(mut s) = self.store.take() {
                    let _ = s.kill();
                    let _ = s.wait();
                }
                let bound = Instant::now() + 2 * t + Duration::from_secs(15);
                for p in self
                    .procs
                    .iter_mut()
                    .filter(|p| p.world == self.world && !p.judged)
                {
                    p.allowed = Allowed::AnyEnd;
                    p.bound = Some(bound);
                }
                self.pending_recovery = None;
                while self
                    .procs
                    .iter()
                    .any(|p| p.world == self.world && !p.judged)
                {
                    self.idle(Duration::from_millis(200), false);
                }
                self.start_world()?;
            }
        }
        Ok(())
    }

    /// Starts replacements for ranks that no live process holds.
    fn refill(&mut self) -> Result<(), String> {
        let held: Vec<u32> = self
            .live_members()
            .iter()
            .map(|&i| self.procs[i].rank)
            .collect();
        if held.is_empty() {
            // Nobody left to admit anyone: a new world.
            if let Some(mut s) = self.store.take() {
                let _ = s.kill();
                let _ = s.wait();
            }
            return self.start_world();
        }
        for r in 0..self.s.ranks {
            if !held.contains(&r) {
                self.spawn(
                    r,
                    "join",
                    "replacement",
                    Allowed::Replacement,
                    Duration::ZERO,
                );
            }
        }
        Ok(())
    }

    /// The whole run; the summary's lines.
    pub fn run(&mut self) -> Result<(), String> {
        println!(
            "chaos: seed {} ranks {} timeout {:?} for {:?}",
            self.s.seed, self.s.ranks, self.s.timeout, self.s.run_for
        );
        let began = Instant::now();
        self.start_world()?;
        self.idle(Duration::from_secs(2), false);
        while began.elapsed() < self.s.run_for {
            self.inject()?;
            let pause = self.rng.ms(500, self.timeout_ms());
            self.idle(pause, false);
            let left: Vec<u32> = self
                .live_members()
                .iter()
                .map(|&i| self.procs[i].rank)
                .collect();
            if (left.len() as u32) < self.s.ranks.saturating_sub(1) {
                self.refill()?;
                self.idle(self.s.timeout, false);
            }
        }
        // Stop: every process still running ends on its own.
        std::fs::write(&self.stop_file, b"").map_err(|e| e.to_string())?;
        let bound = Instant::now() + 2 * self.s.timeout + Duration::from_secs(15);
        for p in self.procs.iter_mut().filter(|p| !p.judged) {
            p.bound = Some(p.bound.map_or(bound, |b| {
                b.min(bound).max(Instant::now() + Duration::from_secs(1))
            }));
        }
        while self.procs.iter().any(|p| !p.judged) {
            self.idle(Duration::from_millis(200), true);
        }
        if let Some(mut s) = self.store.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = std::fs::remove_file(&self.stop_file);
        let _ = std::fs::remove_dir_all(&self.dumps);
        self.summary(began.elapsed());
        Ok(())
    }

    fn summary(&self, took: Duration) {
        let events: Vec<String> = self
            .events
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        let mut rec = self.recoveries.clone();
        rec.sort_unstable();
        let pick = |q: usize| {
            rec.get(rec.len().saturating_sub(1) * q / 100)
                .copied()
                .unwrap_or(0)
        };
        println!(
            "chaos summary: seed {} ran {:.0} s, worlds {}, processes {}, steps {}, refusals {}, replacements not admitted {}, failures dumped {}, events {}",
            self.s.seed,
            took.as_secs_f64(),
            self.world,
            self.procs.len(),
            self.agree.steps,
            self.refusals,
            self.not_admitted,
            self.dumped,
            events.join(" ")
        );
        println!(
            "chaos recoveries: {} (ms: median {}, p90 {}, max {})",
            rec.len(),
            pick(50),
            pick(90),
            pick(100)
        );
        for v in &self.violations {
            println!("chaos VIOLATION: {v}");
        }
        println!("chaos verdict: {} violations", self.violations.len());
    }
}

/// Serves the store until killed (the store host's process).
pub fn serve_store(port: u16) -> ! {
    match oxccl::store::TcpServer::bind("127.0.0.1", port) {
        Ok(server) => {
            let _keep = server;
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        Err(e) => {
            eprintln!("chaos store host: {e}");
            std::process::exit(1)
        }
    }
}

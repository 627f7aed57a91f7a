//! Every rank's dump after a hang, whatever rank times out and whoever hosts the store: ranks
//! are child processes of this test binary on the mock world spanning processes, bootstrapped
//! through `env://` (rank 0 hosts the TCP store, as under mpirun, srun or a hand-written
//! launcher) or under torchrun (its agent hosts the store and ends every worker once one
//! exits). One rank never joins the second all_reduce; the ranks that time out dump, signal
//! the others and keep their process (and the store) alive until every rank reported its
//! dump; the idle rank, and ranks blocked in `Work::wait`, dump on the signal.
//!
//! Each run asserts that every rank's JSON and pickled dump exist, that `oxccl trace` names
//! the rank that never joined and the sequence number, and that PyTorch's analyzer accepts the
//! directory without `--allow-incomplete-ranks` and reports the same. A last case kills the
//! store's host: the survivor dumps on its own failure and `oxccl trace` says why rank 0's
//! dump is missing. Another freezes the store (every call blocks past the whole ending): the
//! rank that times out has its dump on disk at once, and its note ends up with the store's
//! error.

use oxccl::launch::{init_process_group, WithProcessGroup};
use oxccl::pg::PgBackend;
use oxccl::pg::ProcessGroup;
use oxccl::recorder::reader::{analyze, read_dump_dir, render_text};
use oxccl::{ReduceOp, Result};
use oxccl_testkit::ranks::{self, free_port, rank_command, wait_all, Ran};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "dump_ending/frozen_store.rs"]
mod frozen_store;
mod torch_env;

const CHILD: &str = "OXCCL_DUMP_ENDING_CHILD";
/// A directory where each rank leaves `first_<rank>` once its first all_reduce completed.
const MARK: &str = "OXCCL_DUMP_ENDING_MARK";
const DEADLINE: Duration = Duration::from_secs(120);
/// The timeout of the ranks that time out.
const TIMEOUT_MS: u64 = 2000;
/// How long an idle rank stays away (it must have dumped well before: the signal comes about
/// `TIMEOUT_MS` in, and it looks every `OXCCL_COORD_CHECK_MS`).
const IDLE: Duration = Duration::from_secs(9);

/// Who hangs how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// Rank 0, the store's host, times out; rank 1 is idle.
    HostTimesOut,
    /// The last rank times out; another (not the host) is idle (with 2 ranks, the host).
    PeerTimesOut,
    /// Two ranks time out at once.
    TwoTimeOut,
    /// As `HostTimesOut`, under torchrun: its agent hosts the store.
    Torchrun,
    /// As `HostTimesOut`, under a mode that keeps the process (clean up only): the rank that
    /// timed out gets the error back and returns from its program at once; its exit waits.
    HostReturns,
}

/// What a rank does after the first all_reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Issues the second all_reduce and times out (the group's timeout).
    Times,
    /// Never issues it: sleeps, then leaves.
    Idle,
    /// Issues it and waits in `Work::wait` with a longer timeout of its own.
    Waits,
    /// Waits for a receive from rank 0 that never comes (times out with the group's timeout).
    Receives,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::HostTimesOut => "host",
            Case::PeerTimesOut => "peer",
            Case::TwoTimeOut => "two",
            Case::Torchrun => "torchrun",
            Case::HostReturns => "returns",
        }
    }

    fn parse(s: &str) -> Case {
        [
            Case::HostTimesOut,
            Case::PeerTimesOut,
            Case::TwoTimeOut,
            Case::Torchrun,
            Case::HostReturns,
        ]
        .into_iter()
        .find(|c| c.name() == s)
        .unwrap_or_else(|| panic!("unknown case {s:?}"))
    }

    fn role(self, n: u32, rank: u32) -> Role {
        match (self, n, rank) {
            (Case::HostTimesOut | Case::Torchrun | Case::HostReturns, _, 0) => Role::Times,
            (Case::HostTimesOut | Case::Torchrun | Case::HostReturns, _, 1) => Role::Idle,
            (Case::PeerTimesOut, n, r) if r == n - 1 => Role::Times,
            (Case::PeerTimesOut, 2, 0) => Role::Idle,
            (Case::PeerTimesOut, _, 1) => Role::Idle,
            (Case::TwoTimeOut, 2, 1) => Role::Receives,
            (Case::TwoTimeOut, _, 0 | 2) => Role::Times,
            (Case::TwoTimeOut, _, 1) => Role::Idle,
            _ => Role::Waits,
        }
    }

    /// The collective sequence number the hang is at: the second all_reduce (the third where
    /// a point-to-point warm-up comes first).
    fn hang_seq(self, n: u32) -> u64 {
        if self == Case::TwoTimeOut && n == 2 {
            3
        } else {
            2
        }
    }

    /// The rank that never joins the hanging all_reduce.
    fn absent(self, n: u32) -> u32 {
        (0..n)
            .find(|&r| matches!(self.role(n, r), Role::Idle | Role::Receives))
            .unwrap()
    }
}

struct Scenario {
    case: Case,
}

impl WithProcessGroup for Scenario {
    type Output = ();
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<()> {
        let (me, n) = (pg.global_rank(), pg.size());
        let mut b = pg.upload(&[1.0f32; 64])?;
        pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
        let role = self.case.role(n, me);
        if self.case == Case::TwoTimeOut && n == 2 {
            // A send/receive first, so the receive that hangs later needs no new connection
            // (NCCL makes one on a pair's first point-to-point call, and blocks the calling
            // thread until the peer takes part). After a second all_reduce: PyTorch's analyzer
            // takes a point-to-point entry whose p2p sequence number equals the collective
            // sequence number of the entry before it for a coalesced block of both, and fails.
            pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
            match me {
                0 => pg.send(&b, 1)?.wait()?,
                _ => pg.recv(&mut b, 0)?.wait()?,
            }
        }
        println!("RESULT rank={me} first=ok role={role:?}");
        if let Ok(mark) = std::env::var(MARK) {
            std::fs::write(Path::new(&mark).join(format!("first_{me}")), b"")
                .expect("the mark directory");
        }
        match role {
            Role::Times => {
                let r = pg.all_reduce(&mut b, ReduceOp::Sum)?.wait();
                // The watchdog ends the process (the default mode) before the wait returns.
                println!("RESULT rank={me} returned={}", r.is_err());
            }
            Role::Idle => {
                std::thread::sleep(IDLE);
                println!("RESULT rank={me} idle=done");
            }
            Role::Waits => {
                pg.set_timeout(Duration::from_secs(8));
                let r = pg.all_reduce(&mut b, ReduceOp::Sum)?.wait();
                println!("RESULT rank={me} waited_err={}", r.is_err());
            }
            Role::Receives => {
                let r = pg.recv(&mut b, 0)?.wait();
                println!("RESULT rank={me} received_err={}", r.is_err());
            }
        }
        Ok(())
    }
}

#[test]
fn child() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    if let Err(e) = init_process_group(Scenario {
        case: Case::parse(&case),
    }) {
        println!("CHILD ERROR {e}");
        std::process::exit(3);
    }
}

fn dump_dir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxccl-dump-ending-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The variables every rank gets: the timeout, dumps on timeout into `dir`.
fn dump_env(dir: &Path, coord_ms: Option<u64>) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("OXCCL_TIMEOUT_MS", TIMEOUT_MS.to_string()),
        ("OXCCL_DUMP_ON_TIMEOUT", "1".to_string()),
        ("OXCCL_TRACE_DIR", dir.display().to_string()),
    ];
    if let Some(ms) = coord_ms {
        v.push(("OXCCL_COORD_CHECK_MS", ms.to_string()));
    }
    v
}

/// `n` ranks of `case` by `env://`, rank 0 hosting the store.
fn run_env(case: Case, n: u32, dir: &Path) -> Vec<Ran> {
    let port = free_port();
    let kids = (0..n)
        .map(|r| {
            let mut cmd = rank_command(CHILD, case.name(), r, n, port);
            cmd.envs(dump_env(dir, Some(200)))
                .env("OXCCL_BACKEND", backend());
            if case == Case::HostReturns {
                cmd.env("OXCCL_ASYNC_ERROR_HANDLING", "2");
            }
            cmd.spawn().unwrap()
        })
        .collect();
    wait_all(kids, DEADLINE, case.name(), None)
}

/// The backend the ranks use: the mock spanning processes, or what
/// `OXCCL_DUMP_ENDING_BACKEND` names (`nccl` on GPUs: `scripts/gpu-x2.sh`'s item i25.dumps).
fn backend() -> String {
    std::env::var("OXCCL_DUMP_ENDING_BACKEND").unwrap_or_else(|_| "mock".into())
}

/// What `oxccl trace DIR` reports, from the recorder's reader (what the tool prints): the
/// dumps' report, after a line per unreadable dump.
fn oxccl_trace(dir: &Path) -> String {
    let read = read_dump_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut text = String::new();
    for (path, why) in &read.unreadable {
        text += &format!("unreadable dump {}: {why}\n", path.display());
    }
    text + &render_text(&analyze(&read.dumps))
}

/// PyTorch's analyzer on `dir`, without `--allow-incomplete-ranks`: its output, or `None`
/// (with a message) without the torch venv.
fn fr_trace(dir: &Path) -> Option<String> {
    let py = torch_env::python()?;
    let out = Command::new(py)
        .args(["-m", "torch.distributed.flight_recorder.fr_trace"])
        .arg(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "fr_trace refused {}:\n{text}",
        dir.display()
    );
    Some(text)
}

/// Every rank's dumps exist; both analyzers name `absent` as the rank that never joined
/// collective `seq`.
fn assert_complete(what: &str, dir: &Path, n: u32, absent: u32, seq: u64) {
    for r in 0..n {
        for f in [format!("rank_{r}.json"), format!("trace_{r}")] {
            assert!(
                dir.join(&f).is_file(),
                "{what}: no {f} in {}: {:?}",
                dir.display(),
                std::fs::read_dir(dir)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            );
        }
    }
    let text = oxccl_trace(dir);
    assert!(
        text.contains(&format!("{n} rank(s) dumped"))
            && text.contains(&format!("hang at collective seq {seq}"))
            && text.contains(&format!("rank {absent}: never issued collective seq {seq}")),
        "{what}: oxccl trace:\n{text}"
    );
    assert!(!text.contains("never dumped"), "{what}:\n{text}");
    if let Some(out) = fr_trace(dir) {
        assert!(
            out.contains(&format!(
                "Not all ranks joining collective, sequence number: {seq}"
            )) && out.contains(&format!("missing ranks: {{{absent}}}")),
            "{what}: fr_trace:\n{out}"
        );
    }
}

/// The ranks that timed out were ended by their watchdog (SIGABRT, the default mode) only
/// after the others' dumps: each of those is there (checked by `assert_complete`), and no
/// timed-out rank returned to the program.
fn assert_ended(what: &str, case: Case, ran: &[Ran]) {
    let n = ran.len() as u32;
    for r in ran {
        if case.role(n, r.rank) == Role::Times {
            assert_eq!(
                r.signal,
                Some(libc::SIGABRT),
                "{what}: rank {} must be ended by its watchdog\n{}",
                r.rank,
                r.out
            );
            assert!(!r.out.contains("returned="), "{what}: rank {}", r.rank);
        }
    }
}

fn env_case(case: Case, n: u32) {
    let what = format!("{}-{n}", case.name());
    let dir = dump_dir(&what);
    let ran = run_env(case, n, &dir);
    if case == Case::HostReturns {
        // The error came back to the program, which returned from `main`; the exit waited for
        // the other rank's dump (checked below), then the process ended normally.
        assert_eq!(ran[0].code, Some(0), "{what}: rank 0\n{}", ran[0].out);
        assert_eq!(
            ranks::field(&ran[0].out, "returned"),
            Some("true"),
            "{what}\n{}",
            ran[0].out
        );
    } else {
        assert_ended(&what, case, &ran);
    }
    assert_complete(&what, &dir, n, case.absent(n), case.hang_seq(n));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn store_host_times_out_while_a_peer_is_idle_2() {
    env_case(Case::HostTimesOut, 2);
}

#[test]
fn store_host_times_out_while_a_peer_is_idle_4() {
    env_case(Case::HostTimesOut, 4);
}

#[test]
fn a_peer_times_out_2() {
    env_case(Case::PeerTimesOut, 2);
}

#[test]
fn a_peer_times_out_4() {
    env_case(Case::PeerTimesOut, 4);
}

#[test]
fn the_host_returns_from_its_program_after_the_error_2() {
    env_case(Case::HostReturns, 2);
}

#[test]
fn two_ranks_time_out_at_once_2() {
    env_case(Case::TwoTimeOut, 2);
}

#[test]
fn two_ranks_time_out_at_once_4() {
    env_case(Case::TwoTimeOut, 4);
}

/// Under torchrun (its agent store, its agent ending every worker once one exits), with the
/// default coordination interval.
fn torchrun_case(n: u32) {
    let Some(torchrun) = torch_env::venv_program("torchrun") else {
        return;
    };
    let what = format!("torchrun-{n}");
    let dir = dump_dir(&what);
    let mut cmd = Command::new(torchrun);
    cmd.args(["--no-python", "--nproc_per_node", &n.to_string()])
        .args(["--master_port", &free_port().to_string()])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, Case::Torchrun.name())
        .env("OXCCL_BACKEND", backend())
        .envs(dump_env(&dir, None))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in [
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "LOCAL_RANK",
    ] {
        cmd.env_remove(v);
    }
    let ran = wait_all(vec![cmd.spawn().unwrap()], DEADLINE, &what, None);
    // The agent reports the worker that failed (rank 0, SIGABRT) and fails itself.
    assert_ne!(
        ran[0].code,
        Some(0),
        "{what}: torchrun succeeded\n{}",
        ran[0].out
    );
    assert_complete(&what, &dir, n, Case::Torchrun.absent(n), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn under_torchrun_2() {
    torchrun_case(2);
}

#[test]
fn under_torchrun_4() {
    torchrun_case(4);
}

/// The store's host is killed after the first all_reduce: the survivor's second one fails
/// on its own, it dumps (noting that the store is unreachable) and ends; `oxccl trace` names
/// rank 0 as missing and says why it thinks so.
#[test]
fn store_host_killed_the_survivor_dumps_and_the_analysis_says_why() {
    let dir = dump_dir("killed");
    let mark = dump_dir("killed-mark");
    std::fs::create_dir_all(&mark).unwrap();
    let port = free_port();
    // Rank 0 (the host) is idle, rank 1 times out.
    let case = Case::PeerTimesOut;
    let mut kids = (0..2)
        .map(|r| {
            let mut cmd = rank_command(CHILD, case.name(), r, 2, port);
            cmd.envs(dump_env(&dir, Some(200)))
                .env("OXCCL_BACKEND", backend())
                .env(MARK, &mark);
            cmd.spawn().unwrap()
        })
        .collect::<Vec<_>>();
    // Once both finished the first all_reduce, rank 0 is killed.
    let began = std::time::Instant::now();
    while !(mark.join("first_0").exists() && mark.join("first_1").exists()) {
        if began.elapsed() > Duration::from_secs(60)
            || kids.iter_mut().any(|k| !matches!(k.try_wait(), Ok(None)))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signals a child this test started.
    unsafe { libc::kill(kids[0].id() as i32, libc::SIGKILL) };
    let ran = wait_all(kids, DEADLINE, "killed", None);
    assert_eq!(ran[0].signal, Some(libc::SIGKILL), "{}", ran[0].out);
    assert_eq!(ran[1].signal, Some(libc::SIGABRT), "{}", ran[1].out);
    assert!(dir.join("rank_1.json").is_file() && dir.join("trace_1").is_file());
    assert!(!dir.join("rank_0.json").exists());
    let text = oxccl_trace(&dir);
    assert!(
        text.contains("never dumped: rank 0")
            && text.contains("rank 0: rank 1 could not reach the store when it dumped"),
        "oxccl trace:\n{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&mark);
}

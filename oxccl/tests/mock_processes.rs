//! The mock world across processes: ranks as child processes of this test binary, bootstrapped
//! through `env://` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and the TCP store, the backend
//! chosen by `OXCCL_BACKEND=mock` through `oxccl::launch::init_process_group`.
//!
//! A child is this binary run with `--exact child --nocapture` and `OXCCL_MP_CHILD` naming
//! its scenario; without that variable the `child` test does nothing.

#[path = "mock_processes/faults.rs"]
mod faults;
#[path = "mock_processes/one_sided.rs"]
mod one_sided;
#[path = "mock_processes/ops.rs"]
mod ops;
mod torch_env;

use oxccl_testkit::ranks::{self, field, free_port, rank_command, wait_all, Ran};

use oxccl::launch::{init_process_group, WithProcessGroup};
use oxccl::pg::PgBackend;
use oxccl::pg::ProcessGroup;
use oxccl::{Error, ReduceOp, Result};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const CHILD: &str = "OXCCL_MP_CHILD";
/// The process group's timeout in the children.
const PG_TIMEOUT_MS: u64 = 15_000;
/// How long a test waits for its children before killing them (a hang fails, never blocks CI).
const DEADLINE: Duration = Duration::from_secs(120);

fn variant(e: &Error) -> &'static str {
    match e {
        Error::Remote { .. } => "Remote",
        Error::Timeout { .. } => "Timeout",
        Error::Mismatch { .. } => "Mismatch",
        Error::Aborted { .. } => "Aborted",
        Error::Backend { .. } => "Backend",
        Error::InvalidState { .. } => "InvalidState",
        _ => "Other",
    }
}

/// Every rank but `skip` says it is done; rank 0 (which hosts the store) waits for them.
fn finish<B: PgBackend>(pg: &ProcessGroup<B>, skip: Option<u32>) -> Result<()> {
    let s = pg.store();
    let set = s.set(&format!("done/{}", pg.global_rank()), b"1");
    // Rank 0 hosts the store and leaves as soon as it has seen every key: the confirmation of
    // the last rank's set may find the store gone although the set landed (rank 0 waited for it).
    match set {
        Err(Error::Remote { .. }) if pg.global_rank() != 0 => return Ok(()),
        other => other?,
    }
    if pg.global_rank() == 0 {
        let keys: Vec<String> = (0..pg.size())
            .filter(|r| Some(*r) != skip)
            .map(|r| format!("done/{r}"))
            .collect();
        s.wait(
            &keys.iter().map(String::as_str).collect::<Vec<_>>(),
            Duration::from_secs(60),
        )?;
    }
    Ok(())
}

/// A child's work, by scenario.
struct Scenario(String);

impl WithProcessGroup for Scenario {
    type Output = ();
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<()> {
        let me = pg.global_rank();
        let parts: Vec<&str> = self.0.split(':').collect();
        match parts.as_slice() {
            ["ops"] => {
                let mut n = ops::all_ops::<f32, B>(&pg)?;
                n += ops::all_ops::<f64, B>(&pg)?;
                n += ops::all_ops::<i32, B>(&pg)?;
                n += ops::all_ops::<i64, B>(&pg)?;
                println!("RESULT rank={me} checked={n}");
                finish(&pg, None)
            }
            ["one_sided"] => {
                let rounds = one_sided::ring(&pg)?;
                println!("RESULT rank={me} rounds={rounds}");
                finish(&pg, None)
            }
            ["subgroups"] => {
                // Blocks of 2: {0, 1} and {2, 3}; each all_reduces its members' ranks.
                let (mine, _all) = pg.new_subgroups(2)?;
                let mut b = mine.upload(&[me as f32; 8])?;
                mine.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
                let got = mine.download(&b)?;
                let base = me / 2 * 2;
                assert_eq!(got, vec![(2 * base + 1) as f32; 8], "subgroup of rank {me}");
                println!("RESULT rank={me} sub={}", got[0]);
                finish(&pg, None)
            }
            ["mismatch"] => {
                let len = if me == 1 { 6 } else { 4 };
                let mut b = pg.upload(&vec![1.0f32; len])?;
                let r = pg.all_reduce(&mut b, ReduceOp::Sum)?.wait();
                println!(
                    "RESULT rank={me} err={}",
                    r.as_ref().err().map_or("none", variant)
                );
                if let Err(e) = r {
                    println!("DETAIL rank={me} {e}");
                }
                finish(&pg, None)
            }
            ["kill", how, victim] => {
                let victim: u32 = victim.parse().unwrap();
                let mut b = pg.upload(&[1.0f32; 1024])?;
                pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
                if me == victim {
                    // The survivors are inside the next all_reduce by now.
                    std::thread::sleep(Duration::from_millis(400));
                    println!("VICTIM rank={me} {how}");
                    match *how {
                        "abort" => {
                            // Alive and connected: peers learn of the abort, not of an exit.
                            pg.abort("aborted by the test");
                            std::thread::sleep(Duration::from_secs(2));
                            return Ok(());
                        }
                        "exit0" => std::process::exit(0),
                        "exit1" => std::process::exit(1),
                        // SAFETY: signals this process; the default actions end it.
                        "sigterm" => unsafe { libc::kill(libc::getpid(), libc::SIGTERM) },
                        // SAFETY: as above; the parent kills it once the others are done.
                        "sigstop" => unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) },
                        // SAFETY: as above.
                        _ => unsafe { libc::kill(libc::getpid(), libc::SIGKILL) },
                    };
                    std::thread::sleep(Duration::from_secs(60));
                }
                let start = Instant::now();
                let r = pg.all_reduce(&mut b, ReduceOp::Sum)?.wait();
                let ms = start.elapsed().as_millis();
                println!(
                    "RESULT rank={me} err={} ms={ms}",
                    r.as_ref().err().map_or("none", variant)
                );
                if let Err(e) = r {
                    println!("DETAIL rank={me} {e}");
                }
                Ok(())
            }
            other => panic!("unknown scenario {other:?}"),
        }
    }
}

#[test]
fn child() {
    let Ok(scenario) = std::env::var(CHILD) else {
        return;
    };
    let _ = env_logger::try_init();
    if let Some(kind) = scenario.strip_prefix("fault:") {
        if let Err(e) = faults::fault_child(kind) {
            println!("CHILD ERROR {e}");
            std::process::exit(3);
        }
        return;
    }
    if let Err(e) = init_process_group(Scenario(scenario)) {
        println!("CHILD ERROR {e}");
        std::process::exit(3);
    }
}

fn spawn(rank: u32, n: u32, port: u16, scenario: &str, timeout_ms: u64) -> Child {
    // `nb:<scenario>`: the scenario with nonblocking communicators.
    let (scenario, nonblocking) = match scenario.strip_prefix("nb:") {
        Some(rest) => (rest, true),
        None => (scenario, false),
    };
    let mut cmd = rank_command(CHILD, scenario, rank, n, port);
    cmd.env("OXCCL_TIMEOUT_MS", timeout_ms.to_string())
        .env("OXCCL_ASYNC_ERROR_HANDLING", "0");
    if nonblocking {
        cmd.env("OXCCL_NONBLOCKING", "1");
    }
    if scenario == "one_sided" {
        // Signals and windows' puts: NCCL 2.29.2+ imitated.
        cmd.env("OXCCL_MOCK_VERSION", "2.32.3");
    }
    cmd.spawn().unwrap()
}

/// Runs `n` ranks of `scenario`; kills them all past [`DEADLINE`] (and fails).
fn run(n: u32, scenario: &str) -> Vec<Ran> {
    run_with(n, scenario, PG_TIMEOUT_MS, None)
}

/// [`run`] with the group timeout `timeout_ms`, killing rank `reap` once all others exited
/// (a rank that stopped answering); then checks that nothing leaked.
fn run_with(n: u32, scenario: &str, timeout_ms: u64, reap: Option<u32>) -> Vec<Ran> {
    let shm_before = shm_entries();
    let port = free_port();
    let kids: Vec<Child> = (0..n)
        .map(|r| spawn(r, n, port, scenario, timeout_ms))
        .collect();
    let ran = wait_all(
        kids,
        DEADLINE,
        &format!("{scenario} on {n} processes"),
        reap,
    );
    let pids: Vec<u32> = ran.iter().map(|r| r.pid).collect();
    assert_no_leaks(&pids, &shm_before);
    ran
}

fn shm_entries() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// No socket of the children's mock hosts is left (abstract names `@oxccl-mock-<pid>-…`),
/// and /dev/shm holds no entry it did not hold before (the segments are memfds).
fn assert_no_leaks(pids: &[u32], shm_before: &[String]) {
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    for pid in pids {
        let name = format!("@oxccl-mock-{pid}-");
        assert!(!unix.contains(&name), "socket {name}… left behind");
    }
    let new: Vec<String> = shm_entries()
        .into_iter()
        .filter(|e| !shm_before.contains(e) && e.contains("oxccl"))
        .collect();
    assert!(new.is_empty(), "shared memory left in /dev/shm: {new:?}");
}

#[test]
fn every_op_and_type_on_two_three_and_four_processes() {
    for n in [2u32, 3, 4] {
        for r in run(n, "ops") {
            assert_eq!(r.code, Some(0), "rank {} of {n}:\n{}", r.rank, r.out);
            let checked: usize = field(&r.out, "checked").unwrap().parse().unwrap();
            // 14 results per type on the root ranks, 12 elsewhere; 4 types.
            assert!(
                checked >= 4 * 12,
                "rank {} of {n} checked {checked}",
                r.rank
            );
        }
    }
}

#[test]
fn one_sided_puts_and_signals_cross_processes_in_a_ring() {
    for n in [2u32, 3] {
        for r in run(n, "one_sided") {
            assert_eq!(r.code, Some(0), "rank {} of {n}:\n{}", r.rank, r.out);
            let rounds: usize = field(&r.out, "rounds").unwrap().parse().unwrap();
            assert_eq!(rounds, one_sided::ROUNDS, "rank {} of {n}", r.rank);
        }
    }
}

#[test]
fn a_mismatch_across_processes_fails_every_rank() {
    for r in run(3, "mismatch") {
        assert_eq!(r.code, Some(0), "rank {}:\n{}", r.rank, r.out);
        assert_eq!(
            field(&r.out, "err"),
            Some("Mismatch"),
            "rank {}:\n{}",
            r.rank,
            r.out
        );
    }
}

/// A rank dies mid-collective; every survivor's wait ends with `Remote` well within its timeout.
fn killed(n: u32, how: &str, victim: u32) -> Vec<Ran> {
    let ran = run(n, &format!("kill:{how}:{victim}"));
    for r in &ran {
        if r.rank == victim {
            let (code, sig) = match how {
                "exit0" | "abort" => (Some(0), None),
                "exit1" => (Some(1), None),
                "sigterm" => (None, Some(libc::SIGTERM)),
                _ => (None, Some(libc::SIGKILL)),
            };
            assert_eq!((r.code, r.signal), (code, sig), "victim {how}:\n{}", r.out);
            continue;
        }
        assert_eq!(r.code, Some(0), "survivor {} ({how}):\n{}", r.rank, r.out);
        assert_eq!(
            field(&r.out, "err"),
            Some("Remote"),
            "survivor {} ({how}):\n{}",
            r.rank,
            r.out
        );
        let ms: u64 = field(&r.out, "ms").unwrap().parse().unwrap();
        assert!(
            ms < PG_TIMEOUT_MS + 2_000,
            "survivor {} waited {ms} ms",
            r.rank
        );
    }
    ran
}

#[test]
fn a_rank_exiting_0_gives_survivors_remote() {
    killed(3, "exit0", 2);
}

#[test]
fn a_rank_exiting_1_gives_survivors_remote() {
    killed(3, "exit1", 1);
}

#[test]
fn a_rank_killed_by_sigterm_gives_survivors_remote() {
    killed(4, "sigterm", 3);
}

#[test]
fn a_rank_killed_by_sigkill_gives_survivors_remote() {
    killed(3, "sigkill", 2);
}

#[test]
fn the_host_rank_killed_by_sigkill_gives_survivors_remote() {
    killed(3, "sigkill", 0);
}

/// The per-rank lines of `ddp_step`'s output, sorted.
fn rank_lines(out: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(out)
        .lines()
        .filter(|l| l.starts_with("rank "))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn ddp_step_under_torchrun_prints_what_the_threads_print_and_the_right_average() {
    let Some(torchrun) = torch_env::venv_program("torchrun") else {
        return;
    };
    let exe = ranks::built_example(env!("CARGO_MANIFEST_DIR"), "ddp_step");
    let threads = Command::new(&exe)
        .env_remove("RANK")
        .env_remove("OXCCL_BACKEND")
        .output()
        .unwrap();
    assert!(threads.status.success());
    let procs = Command::new(torchrun)
        .args([
            "--no-python",
            "--nproc_per_node",
            "4",
            "--master_port",
            &free_port().to_string(),
        ])
        .arg(&exe)
        .env("OXCCL_BACKEND", "mock")
        .output()
        .unwrap();
    assert!(
        procs.status.success(),
        "{}",
        String::from_utf8_lossy(&procs.stderr)
    );
    let (t, p) = (rank_lines(&threads.stdout), rank_lines(&procs.stdout));
    assert_eq!(t.len(), 4, "{t:?}");
    assert_eq!(p, t);
    // The values themselves: bucket b (4 + b values) of rank r holds r + b, so its average
    // over 4 ranks is b + 1.5 on every rank.
    let want: Vec<f32> = (0..3)
        .flat_map(|b| std::iter::repeat_n(b as f32 + 1.5, 4 + b))
        .collect();
    for line in &p {
        let grads = line
            .split("averaged gradients [")
            .nth(1)
            .and_then(|rest| rest.split(']').next())
            .unwrap_or_else(|| panic!("no averaged gradients in {line:?}"));
        let got: Vec<f32> = grads
            .split(", ")
            .map(|x| {
                x.parse()
                    .unwrap_or_else(|e| panic!("{x:?} in {line:?}: {e}"))
            })
            .collect();
        assert_eq!(got, want, "{line}");
    }
}

/// A rank that stops answering (SIGSTOP: alive, connection open) is seen through the group's
/// timeout: every survivor's wait ends with `Timeout` (its own) or `Remote` (a peer that timed
/// out first and aborted), never before the timeout and within some slack after it.
#[test]
fn a_rank_that_stops_answering_gives_survivors_timeout() {
    let timeout_ms = 3_000;
    let ran = run_with(3, "kill:sigstop:2", timeout_ms, Some(2));
    for r in ran.iter().filter(|r| r.rank != 2) {
        assert_eq!(r.code, Some(0), "survivor {}:\n{}", r.rank, r.out);
        assert!(
            matches!(field(&r.out, "err"), Some("Timeout" | "Remote")),
            "survivor {}:\n{}",
            r.rank,
            r.out
        );
        let ms: u64 = field(&r.out, "ms").unwrap().parse().unwrap();
        assert!(
            (timeout_ms..timeout_ms + 3_000).contains(&ms),
            "survivor {} waited {ms} ms",
            r.rank
        );
    }
}

/// The fault plan across processes: a planned failure or loss of rank 1 fails it with
/// `Backend` and its peers with `Remote`; a planned delay only delays.
#[test]
fn the_fault_plan_applies_across_processes() {
    for kind in ["fail", "lose"] {
        for r in run(3, &format!("fault:{kind}")) {
            assert_eq!(r.code, Some(0), "rank {} ({kind}):\n{}", r.rank, r.out);
            let want = if r.rank == 1 { "Backend" } else { "Remote" };
            assert_eq!(
                field(&r.out, "err"),
                Some(want),
                "rank {} ({kind}):\n{}",
                r.rank,
                r.out
            );
        }
    }
    for r in run(3, "fault:delay") {
        assert_eq!(r.code, Some(0), "rank {} (delay):\n{}", r.rank, r.out);
        assert_eq!(
            field(&r.out, "err"),
            Some("none"),
            "rank {}:\n{}",
            r.rank,
            r.out
        );
        assert_eq!(
            field(&r.out, "first"),
            Some("Some(9.0)"),
            "rank {}:\n{}",
            r.rank,
            r.out
        );
        let ms: u64 = field(&r.out, "ms").unwrap().parse().unwrap();
        assert!(
            ms >= 450,
            "rank {} waited only {ms} ms for a 500 ms delay",
            r.rank
        );
    }
}

/// Subgroups across processes of a group with no bound device: made by their members through
/// the store, as in one process (`tests/mock_processes_split.rs` has them made by split), each
/// reduces its own members only.
#[test]
fn subgroups_across_processes_reduce_their_members() {
    for r in run(4, "subgroups") {
        assert_eq!(r.code, Some(0), "rank {}:\n{}", r.rank, r.out);
        let want = if r.rank < 2 { "1" } else { "5" };
        assert_eq!(
            field(&r.out, "sub"),
            Some(want),
            "rank {}:\n{}",
            r.rank,
            r.out
        );
    }
}

/// Nonblocking communicators across processes (`OXCCL_NONBLOCKING=1`): every op still right.
#[test]
fn every_op_with_nonblocking_communicators_on_three_processes() {
    for r in run(3, "nb:ops") {
        assert_eq!(r.code, Some(0), "rank {}:\n{}", r.rank, r.out);
        let checked: usize = field(&r.out, "checked").unwrap().parse().unwrap();
        assert!(checked >= 4 * 12, "rank {} checked {checked}", r.rank);
    }
}

/// A rank aborted (its process alive): survivors get `Remote` at once, not at its exit.
#[test]
fn a_rank_aborted_gives_survivors_remote_before_it_exits() {
    for r in killed(3, "abort", 1).iter().filter(|r| r.rank != 1) {
        let ms: u64 = field(&r.out, "ms").unwrap().parse().unwrap();
        assert!(
            ms < 1_500,
            "survivor {} waited {ms} ms: the abort was not seen",
            r.rank
        );
        assert!(
            r.out.contains("aborted by the test"),
            "survivor {}:\n{}",
            r.rank,
            r.out
        );
    }
}

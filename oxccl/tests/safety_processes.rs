//! Seed cases 15 and 30, which need processes: ranks are child processes of this test binary
//! (`--exact child`), bootstrapped through `env://` and the TCP store, on the mock world spanning
//! processes (`OXCCL_BACKEND=mock`, `oxccl::launch::init_process_group`).

use oxccl::launch::{init_process_group, WithProcessGroup};
use oxccl::pg::PgBackend;
use oxccl::pg::ProcessGroup;
use oxccl::recorder::reader;
use oxccl::{Error, ReduceOp, Result};
use oxccl_testkit::ranks::{field, free_port, rank_command, wait_all};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const CHILD: &str = "OXCCL_SAFETY_CHILD";
const DEADLINE: Duration = Duration::from_secs(90);

struct Scenario(String);

impl WithProcessGroup for Scenario {
    type Output = ();
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<()> {
        let me = pg.global_rank();
        let mut b = pg.upload(&[1.0f32; 256])?;
        pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
        println!("FIRST rank={me} ok");
        match self.0.split(':').collect::<Vec<_>>().as_slice() {
            // Case 15: rank 1 leaves after the first all_reduce; rank 0's second one, waited
            // with 3 s, errors; rank 0 then still allocates and copies.
            ["death", how] => {
                if me == 1 {
                    std::thread::sleep(Duration::from_millis(300));
                    match *how {
                        "exit0" => std::process::exit(0),
                        "exit1" => std::process::exit(1),
                        // SAFETY: signals this process; the default actions end it.
                        "sigterm" => unsafe { libc::kill(libc::getpid(), libc::SIGTERM) },
                        // SAFETY: as above.
                        _ => unsafe { libc::kill(libc::getpid(), libc::SIGKILL) },
                    };
                    std::thread::sleep(Duration::from_secs(60));
                }
                if me == 0 {
                    let began = Instant::now();
                    let r = pg
                        .all_reduce(&mut b, ReduceOp::Sum)?
                        .wait_timeout(Duration::from_secs(3));
                    let ms = began.elapsed().as_millis();
                    let kind = match &r {
                        Ok(()) => "none",
                        Err(Error::Remote { .. }) => "Remote",
                        Err(Error::Timeout { .. }) => "Timeout",
                        Err(Error::Aborted { .. }) => "Aborted",
                        Err(_) => "Other",
                    };
                    let fresh = pg.upload(&[7.0f32; 16])?;
                    let back = pg.download(&fresh)?;
                    println!(
                        "RESULT rank=0 err={kind} ms={ms} alloc_ok={}",
                        back == vec![7.0; 16]
                    );
                } else {
                    // Rank 2 stays for the second all_reduce, which fails for it too.
                    let r = pg
                        .all_reduce(&mut b, ReduceOp::Sum)?
                        .wait_timeout(Duration::from_secs(3));
                    println!("RESULT rank={me} failed={}", r.is_err());
                }
                Ok(())
            }
            // Case 30: rank 1 is stuck on its second op (rank 0 never issues it); the group's
            // timeout (1 s) makes rank 1's watchdog dump, signal the other ranks through the
            // store and end the process; rank 0 sees the signal, dumps too, and exits 0.
            // "slowdump": rank 1's dump cannot be written (its temporary file is a FIFO nobody
            // reads), so only OXCCL_WAIT_TIMEOUT_DUMP_MS lets it end.
            [scenario @ ("dump" | "slowdump")] => {
                if me == 1 && *scenario == "slowdump" {
                    let dir = std::env::var("OXCCL_TRACE_DIR").unwrap();
                    std::fs::create_dir_all(&dir).unwrap();
                    let fifo = format!("{dir}/.oxccl-part-{}-1-pickle.tmp", std::process::id());
                    let c = std::ffi::CString::new(fifo).unwrap();
                    // SAFETY: a valid NUL-terminated path; mkfifo only creates the file.
                    let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
                    println!("RESULT rank=1 fifo={}", made == 0);
                }
                if me == 1 {
                    let _stuck = pg.all_reduce(&mut b, ReduceOp::Sum)?;
                    std::thread::sleep(Duration::from_secs(30));
                    println!("RESULT rank=1 still alive");
                } else {
                    std::thread::sleep(Duration::from_secs(4));
                    println!("RESULT rank=0 done");
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
    if scenario == "heartbeat" {
        // The monitor watches the watchdog; a watchdog that stops making passes (here: stopped)
        // is taken as stuck, and the process is ended.
        let dog = oxccl::watchdog::Watchdog::global();
        oxccl::watchdog::HeartbeatMonitor::start(Duration::from_millis(300));
        dog.stop(Duration::from_secs(1));
        std::thread::sleep(Duration::from_secs(10));
        println!("RESULT still alive");
        return;
    }
    if let Err(e) = init_process_group(Scenario(scenario)) {
        println!("CHILD ERROR {e}");
        std::process::exit(3);
    }
}

/// Runs `n` ranks with the extra variables; returns (exit code, signal, stdout) by rank.
fn run(
    n: u32,
    scenario: &str,
    extra: &[(&str, String)],
) -> Vec<(Option<i32>, Option<i32>, String)> {
    let port = free_port();
    let kids: Vec<Child> = (0..n)
        .map(|r| {
            let mut cmd = rank_command(CHILD, scenario, r, n, port);
            cmd.envs(extra.iter().map(|(k, v)| (*k, v.as_str())));
            cmd.spawn().unwrap()
        })
        .collect();
    wait_all(kids, DEADLINE, scenario, None)
        .into_iter()
        .map(|r| (r.code, r.signal, r.out))
        .collect()
}

#[test]
fn case_15_peer_death() {
    let env = [
        ("OXCCL_TIMEOUT_MS", "20000".to_string()),
        ("OXCCL_ASYNC_ERROR_HANDLING", "0".to_string()),
    ];
    for how in ["exit0", "exit1", "sigterm", "sigkill"] {
        let ran = run(3, &format!("death:{how}"), &env);
        let (code0, _, out0) = &ran[0];
        assert_eq!(*code0, Some(0), "{how}: rank 0\n{out0}");
        let err = field(out0, "err").unwrap_or("?");
        assert!(
            matches!(err, "Remote" | "Timeout"),
            "{how}: rank 0 saw {err}"
        );
        let ms: u64 = field(out0, "ms").unwrap().parse().unwrap();
        assert!(ms < 3000 + 2000, "{how}: rank 0 waited {ms} ms");
        assert_eq!(field(out0, "alloc_ok"), Some("true"), "{how}");
        let (_, _, out2) = &ran[2];
        assert_eq!(field(out2, "failed"), Some("true"), "{how}: rank 2\n{out2}");
        // Rank 1 died the way the case says, before any result of its own.
        let (code1, signal1, out1) = &ran[1];
        let want = match how {
            "exit0" => (Some(0), None),
            "exit1" => (Some(1), None),
            "sigterm" => (None, Some(libc::SIGTERM)),
            _ => (None, Some(libc::SIGKILL)),
        };
        assert_eq!((*code1, *signal1), want, "{how}: rank 1\n{out1}");
        assert!(!out1.contains("RESULT"), "{how}: rank 1 lived on\n{out1}");
    }
}

/// Case 16 end to end: a blocking-wait variable that is not 0 or 1 fails the group's
/// construction (`init_process_group`), naming the variable and the value; nothing runs.
#[test]
fn case_16_bad_boolean_fails_init_process_group() {
    for bad in ["abc", "-1", "2147483647", "4294967295"] {
        let ran = run(1, "dump", &[("OXCCL_BLOCKING_WAIT", bad.to_string())]);
        let (code, _, out) = &ran[0];
        assert_eq!(*code, Some(3), "{bad}: {out}");
        let line = out
            .lines()
            .find(|l| l.contains("CHILD ERROR"))
            .unwrap_or_else(|| panic!("{bad}: no error\n{out}"));
        assert!(
            line.contains("OXCCL_BLOCKING_WAIT") && line.contains(bad),
            "{bad}: {line}"
        );
        assert!(!out.contains("FIRST"), "{bad}: the group was made\n{out}");
    }
}

/// `(collective seq, state)` of each entry of `rank`'s JSON dump in `dir`, oldest first.
fn dumped_states(dir: &Path, rank: u32) -> Vec<(u64, String)> {
    let file = dir.join(format!("rank_{rank}.json"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    reader::parse_dump(&text, Some(rank))
        .unwrap()
        .entries
        .iter()
        .map(|e| (e.collective_seq, e.state.clone()))
        .collect()
}

/// Case 30 as c10d's test_timeout_dumps: group timeout 1 s; rank 1 is stuck on its second
/// all_reduce, times out, writes trace_1 holding seq 1 completed and seq 2 started (timing on)
/// or scheduled (off), and is ended by its watchdog (SIGABRT, c10d's -6); the healthy rank 0
/// exits 0 without a dump (c10d's healthy rank has left before the signal; here it does not
/// look for the signal within its life: the coordination check every 60 s).
#[test]
fn case_30_timeout_dump() {
    for timing in [false, true] {
        let dir =
            std::env::temp_dir().join(format!("oxccl-case30-{}-{timing}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut env = vec![
            ("OXCCL_TIMEOUT_MS", "1000".to_string()),
            ("OXCCL_DUMP_ON_TIMEOUT", "1".to_string()),
            ("OXCCL_COORD_CHECK_MS", "60000".to_string()),
            ("OXCCL_TRACE_DIR", dir.display().to_string()),
        ];
        if timing {
            env.push(("OXCCL_ENABLE_TIMING", "1".to_string()));
        }
        let ran = run(2, "dump", &env);
        let (code0, _, out0) = &ran[0];
        assert_eq!(*code0, Some(0), "timing={timing}: rank 0\n{out0}");
        assert_eq!(
            field(out0, "rank"),
            Some("0"),
            "rank 0 ran to its end\n{out0}"
        );
        assert!(
            !dir.join("trace_0").exists() && !dir.join("rank_0.json").exists(),
            "timing={timing}: the healthy rank dumped"
        );
        let (code1, signal1, out1) = &ran[1];
        assert_eq!(
            (*code1, *signal1),
            (None, Some(libc::SIGABRT)),
            "timing={timing}: rank 1 must be ended by its watchdog\n{out1}"
        );
        assert!(!out1.contains("still alive"), "rank 1 was not stopped");
        assert!(dir.join("trace_1").exists(), "timing={timing}: no trace_1");
        let want = if timing { "started" } else { "scheduled" };
        assert_eq!(
            dumped_states(&dir, 1),
            vec![(1, "completed".to_string()), (2, want.to_string())],
            "timing={timing}"
        );
        // The analysis names rank 1's stop at seq 2 and rank 0 as the one without a dump.
        let dumps = reader::read_dump_dir(&dir).unwrap();
        let text = reader::render_text(&reader::analyze(&dumps.dumps));
        assert!(
            text.contains("hang at collective seq 2")
                && text.contains("stopped: rank 1 at seq 2 nccl:all_reduce")
                && text.contains("never dumped: rank 0"),
            "{text}"
        );
        remove(&dir);
    }
}

/// Case 30 as c10d's test_timeout_dumps_on_stuck_ranks: the same stuck rank 1, and a
/// healthy rank 0 that stays and looks for the signal 5 times a second: it dumps too (its
/// one all_reduce, completed) and exits 0.
#[test]
fn case_30_healthy_rank_dumps_on_the_signal() {
    let dir = std::env::temp_dir().join(format!("oxccl-case30s-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let env = [
        ("OXCCL_TIMEOUT_MS", "1000".to_string()),
        ("OXCCL_DUMP_ON_TIMEOUT", "1".to_string()),
        // Rank 0 looks for rank 1's signal 5 times a second (it leaves 4 s in).
        ("OXCCL_COORD_CHECK_MS", "200".to_string()),
        ("OXCCL_TRACE_DIR", dir.display().to_string()),
    ];
    let ran = run(2, "dump", &env);
    let (code0, _, out0) = &ran[0];
    assert_eq!(*code0, Some(0), "rank 0\n{out0}");
    let (code1, signal1, out1) = &ran[1];
    assert_eq!(
        (*code1, *signal1),
        (None, Some(libc::SIGABRT)),
        "rank 1 must be ended by its watchdog\n{out1}"
    );
    assert!(!out1.contains("still alive"), "rank 1 was not stopped");
    for r in 0..2 {
        assert!(dir.join(format!("trace_{r}")).exists(), "no trace_{r}");
    }
    // Rank 0 never timed out: it dumped on rank 1's signal, its recorder holding the one
    // all_reduce it issued, completed.
    assert_eq!(dumped_states(&dir, 0), vec![(1, "completed".to_string())]);
    assert_eq!(
        dumped_states(&dir, 1),
        vec![(1, "completed".to_string()), (2, "scheduled".to_string())]
    );
    let dumps = reader::read_dump_dir(&dir).unwrap();
    let text = reader::render_text(&reader::analyze(&dumps.dumps));
    assert!(
        text.contains("2 rank(s) dumped") && text.contains("rank 1 at seq 2"),
        "{text}"
    );
    remove(&dir);
}

#[test]
fn a_dump_that_cannot_finish_delays_the_end_only_by_its_limit() {
    let dir = std::env::temp_dir().join(format!("oxccl-slowdump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let env = [
        ("OXCCL_TIMEOUT_MS", "1000".to_string()),
        ("OXCCL_DUMP_ON_TIMEOUT", "1".to_string()),
        ("OXCCL_WAIT_TIMEOUT_DUMP_MS", "300".to_string()),
        ("OXCCL_TRACE_DIR", dir.display().to_string()),
    ];
    let began = Instant::now();
    let ran = run(2, "slowdump", &env);
    let took = began.elapsed();
    let (code1, signal1, out1) = &ran[1];
    assert_eq!(field(out1, "fifo"), Some("true"), "{out1}");
    assert_eq!(
        *signal1,
        Some(libc::SIGABRT),
        "rank 1: {code1:?} {signal1:?}\n{out1}"
    );
    assert!(!out1.contains("still alive"), "rank 1 was not stopped");
    // Without the limit the dump would block rank 1 for the default 60 s.
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert_eq!(ran[0].0, Some(0), "rank 0\n{}", ran[0].2);
    remove(&dir);
}

fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn heartbeat_monitor_ends_a_process_whose_watchdog_is_stuck() {
    use std::os::unix::process::ExitStatusExt;
    let began = Instant::now();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "heartbeat")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stdout}{stderr}");
    assert!(!stdout.contains("still alive"));
    assert!(stderr.contains("made no pass"), "{stderr}");
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "took {:?}",
        began.elapsed()
    );
}

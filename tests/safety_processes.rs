//! Seed cases 15 and 30, which need processes: ranks are child processes of this test binary
//! (`--exact child`), bootstrapped through `env://` and the TCP store, on the mock world spanning
//! processes (`OXCCL_BACKEND=mock`, `oxccl::launch::init_process_group`).

use oxccl::buffer::Memory;
use oxccl::launch::{init_process_group, WithProcessGroup};
use oxccl::pg::ProcessGroup;
use oxccl::{Error, ReduceOp, Result};
use ranks::{field, free_port, rank_command, wait_all};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

mod ranks;

const CHILD: &str = "OXCCL_SAFETY_CHILD";
const DEADLINE: Duration = Duration::from_secs(90);

struct Scenario(String);

impl WithProcessGroup for Scenario {
    type Output = ();
    fn run<B: Memory>(self, pg: ProcessGroup<B>) -> Result<()> {
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
    }
}

#[test]
fn case_30_timeout_dump() {
    let dir = std::env::temp_dir().join(format!("oxccl-case30-{}", std::process::id()));
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
    assert!(
        code1 != &Some(0),
        "rank 1 must stop with an error: {code1:?} {signal1:?}"
    );
    assert!(!out1.contains("still alive"), "rank 1 was not stopped");
    assert!(
        dir.join("trace_1").exists() && dir.join("rank_1.json").exists(),
        "rank 1 dumped"
    );
    // Rank 0 never timed out: it dumped on rank 1's signal (the coordination check), its
    // recorder holding the one all_reduce it issued, completed.
    assert!(
        dir.join("trace_0").exists() && dir.join("rank_0.json").exists(),
        "the healthy rank did not dump on the signal"
    );
    let dump0 = oxccl::trace::parse_dump(
        &std::fs::read_to_string(dir.join("rank_0.json")).unwrap(),
        Some(0),
    )
    .unwrap();
    let states0: Vec<(u64, String)> = dump0
        .entries
        .iter()
        .map(|e| (e.collective_seq, e.state.clone()))
        .collect();
    assert_eq!(states0, vec![(1, "completed".to_string())]);
    let dump = oxccl::trace::parse_dump(
        &std::fs::read_to_string(dir.join("rank_1.json")).unwrap(),
        Some(1),
    )
    .unwrap();
    let states: Vec<(u64, String)> = dump
        .entries
        .iter()
        .map(|e| (e.collective_seq, e.state.clone()))
        .collect();
    assert!(
        states.iter().any(|(s, st)| *s == 1 && st == "completed"),
        "{states:?}"
    );
    assert!(
        states
            .iter()
            .any(|(s, st)| *s == 2 && (st == "started" || st == "scheduled")),
        "{states:?}"
    );
    // The analysis names rank 1's stop at seq 2.
    let dumps = oxccl::trace::read_dump_dir(&dir).unwrap();
    let analysis = oxccl::trace::analyze(&dumps.dumps);
    let text = oxccl::trace::render_text(&analysis);
    assert!(text.contains('1'), "{text}");
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

//! Faults with real processes: ranks are child processes of this test binary (torchrun's
//! environment, loopback only) that bootstrap through the TCP store and make their process
//! group on the mock backend. One rank is killed (SIGKILL, by itself, at a chosen point):
//!
//! - rank 0 dies after the rendezvous but before writing the communicator's unique id, the
//!   store being the agent's (hosted by this test): the other ranks fail with a timeout that
//!   names rank 0 as the one that never wrote it;
//! - rank 0 hosts the store and dies: the other ranks, blocked on the store, fail at once
//!   (well within their timeout) with an error naming the store.
//!
//! A child is this binary run with `--exact child --nocapture` and `OXCCL_FAULT_CHILD` set;
//! without that variable the `child` test does nothing.

use oxccl::core::Device;
use oxccl::launch::Bootstrap;
use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::tcp::ServerOptions;
use oxccl::store::TcpServer;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "OXCCL_FAULT_CHILD";
/// The process group's timeout in the children: the bound on waiting for the unique id.
const PG_TIMEOUT: Duration = Duration::from_secs(3);

/// What a child does: bootstrap, then (unless it is the one to die) make the group.
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let b = match Bootstrap::from_env() {
        Ok(b) => b,
        Err(e) => {
            println!("CHILD BOOTSTRAP-ERROR {e}");
            std::process::exit(4);
        }
    };
    if mode == "boot" {
        // Bootstrap only (the store's rendezvous); the others' joins are counted by rank 0.
        println!("CHILD OK");
        return;
    }
    if mode == "die" {
        // A crash mid-bootstrap: no destructor, no goodbye to the store.
        // SAFETY: kill(2) on our own pid with a valid signal number.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    let opts = PgOptions {
        timeout: PG_TIMEOUT,
        bound_device: Some(Device(b.rank)),
        watchdog: false,
        ..PgOptions::default()
    };
    match ProcessGroup::new(
        MockBackend::new(),
        b.store.clone(),
        b.rank,
        b.world_size,
        opts,
    ) {
        Ok(_) => println!("CHILD OK"),
        Err(e) => {
            println!("CHILD ERROR {e}");
            std::process::exit(3);
        }
    }
}

fn spawn(mode: &str, rank: u32, world: u32, port: u16, agent_store: bool) -> Child {
    spawn_with(mode, rank, world, port, agent_store, &[])
}

fn spawn_with(
    mode: &str,
    rank: u32,
    world: u32,
    port: u16,
    agent_store: bool,
    extra: &[(&'static str, String)],
) -> Child {
    let mut vars = oxccl_testkit::launchers::torchrun(rank, world, port);
    if !extra.iter().any(|(k, _)| *k == "OXCCL_TIMEOUT_MS") {
        vars.push(("OXCCL_TIMEOUT_MS".into(), "20000".into()));
    }
    vars.extend(oxccl_testkit::launchers::vars(extra));
    if agent_store {
        vars.push(("TORCHELASTIC_RUN_ID".into(), "faults".into()));
        vars.push(("TORCHELASTIC_USE_AGENT_STORE".into(), "True".into()));
    }
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env_clear()
        .env(CHILD, mode)
        .envs(vars)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for every child (killing all after 60 s): each one's exit code (`None`: killed by
/// a signal) and `CHILD` line.
fn finish(children: Vec<Child>) -> Vec<(Option<i32>, String)> {
    let start = Instant::now();
    let mut slots: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut out = vec![(None, String::new()); slots.len()];
    while slots.iter().any(Option::is_some) {
        if start.elapsed() > Duration::from_secs(60) {
            for c in slots.iter_mut().flatten() {
                let _ = c.kill();
            }
            panic!("children did not finish in 60 s");
        }
        for (i, slot) in slots.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            if c.try_wait().unwrap().is_some() {
                let o = slot.take().unwrap().wait_with_output().unwrap();
                let stdout = String::from_utf8_lossy(&o.stdout);
                let line = stdout
                    .lines()
                    .find_map(|l| l.find("CHILD ").map(|at| l[at..].to_string()))
                    .unwrap_or_else(|| String::from_utf8_lossy(&o.stderr).into_owned());
                out[i] = (o.status.code(), line);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    out
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn a_rank_killed_during_bootstrap_is_named_by_the_others() {
    // The agent's store, as torchrun hosts it.
    let server = TcpServer::bind_with("127.0.0.1", 0, ServerOptions::default()).unwrap();
    let port = server.port();
    let t0 = Instant::now();
    let children = vec![
        spawn("die", 0, 3, port, true),
        spawn("live", 1, 3, port, true),
        spawn("live", 2, 3, port, true),
    ];
    let results = finish(children);
    let elapsed = t0.elapsed();
    assert_eq!(results[0].0, None, "rank 0 was killed: {:?}", results[0]);
    for (r, (code, line)) in results.iter().enumerate().skip(1) {
        assert_eq!(*code, Some(3), "rank {r}: {line}");
        assert!(line.contains("CHILD ERROR"), "rank {r}: {line}");
        assert!(
            line.contains(&format!("rank {r} waited for the unique id"))
                && line.contains("which rank 0 writes"),
            "rank {r} does not name the missing rank: {line}"
        );
    }
    // Bounded by the group's timeout, not the store's 20 s.
    assert!(
        elapsed < PG_TIMEOUT + Duration::from_secs(12),
        "{elapsed:?}"
    );
}

#[test]
fn the_store_host_killed_fails_the_others_within_their_timeout() {
    let port = free_port();
    let t0 = Instant::now();
    // Rank 0 hosts the store (no agent store) and dies once every rank has joined.
    let children = vec![
        spawn("die", 0, 3, port, false),
        spawn("live", 1, 3, port, false),
        spawn("live", 2, 3, port, false),
    ];
    let results = finish(children);
    let elapsed = t0.elapsed();
    assert_eq!(results[0].0, None, "rank 0 was killed: {:?}", results[0]);
    for (r, (code, line)) in results.iter().enumerate().skip(1) {
        // Either while joining (bootstrap) or while waiting for the id: an error, not a hang.
        assert!(
            matches!(code, Some(3) | Some(4)),
            "rank {r}: {code:?} {line}"
        );
        assert!(
            line.contains("store") || line.contains("127.0.0.1"),
            "rank {r}: the error does not name the store: {line}"
        );
    }
    assert!(
        elapsed < PG_TIMEOUT + Duration::from_secs(12),
        "{elapsed:?}"
    );
}

#[test]
fn a_store_token_admits_the_job_and_refuses_a_rank_without_it() {
    let token = |t: &str| {
        vec![
            ("OXCCL_STORE_TOKEN", t.to_string()),
            ("OXCCL_TIMEOUT_MS", "3000".to_string()),
        ]
    };
    // Rank 0 hosts the store with the job's token; every rank presents it.
    let port = free_port();
    let ok = vec![
        spawn_with("boot", 0, 3, port, false, &token("job-secret")),
        spawn_with("boot", 1, 3, port, false, &token("job-secret")),
        spawn_with("boot", 2, 3, port, false, &token("job-secret")),
    ];
    for (r, (code, line)) in finish(ok).iter().enumerate() {
        assert_eq!((*code, line.as_str()), (Some(0), "CHILD OK"), "rank {r}");
    }
    // A rank with another token is refused (and rank 0 times out waiting for it).
    let port = free_port();
    let t0 = Instant::now();
    let mixed = vec![
        spawn_with("boot", 0, 2, port, false, &token("job-secret")),
        spawn_with("boot", 1, 2, port, false, &token("stale")),
    ];
    let results = finish(mixed);
    assert_eq!(results[1].0, Some(4), "{:?}", results[1]);
    assert!(
        results[1].1.contains("OXCCL_STORE_TOKEN"),
        "{:?}",
        results[1]
    );
    assert_eq!(results[0].0, Some(4), "{:?}", results[0]);
    assert!(results[0].1.contains("1/2 joined"), "{:?}", results[0]);
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

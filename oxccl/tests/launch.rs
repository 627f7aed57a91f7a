//! Bootstrap end to end: ranks as child processes of this test binary, started with the
//! environment torchrun, Slurm or a file:// job would give them, on loopback only.
//!
//! A child is this binary run with `--exact child --nocapture` and `OXCCL_LAUNCH_CHILD` set;
//! without that variable the `child` test does nothing.

use oxccl::launch::{Bootstrap, EnvVars, InitMethod, Launcher};
use oxccl::store::{Store, TcpStore, TcpStoreOptions};
use oxccl::Error;
use oxccl_testkit::launchers::{self, vars};
use oxccl_testkit::ranks::free_port;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);
const CHILD: &str = "OXCCL_LAUNCH_CHILD";

fn arg_of(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument { arg, .. } => arg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// The rank's work: rank 0 sets a value, every rank reads it and counts itself in, and each
/// waits until all counted before checking the counter; rank 0 leaves last (it may host the
/// store). Prints one line the parent checks.
fn rank_work(b: &Bootstrap) -> oxccl::Result<()> {
    let s = &b.store;
    if b.rank == 0 {
        s.set("greeting", b"hello")?;
    }
    assert_eq!(s.get("greeting", TIMEOUT)?, b"hello");
    s.add("count", 1)?;
    s.set(&format!("arrived/{}", b.rank), b"1")?;
    let arrived: Vec<String> = (0..b.world_size).map(|r| format!("arrived/{r}")).collect();
    s.wait(
        &arrived.iter().map(String::as_str).collect::<Vec<_>>(),
        TIMEOUT,
    )?;
    let count = s.add("count", 0)?;
    println!(
        "CHILD rank={} world={} local={:?} device={} launcher={:?} count={}",
        b.rank, b.world_size, b.local_rank, b.device.0, b.launcher, count
    );
    s.set(&format!("done/{}", b.rank), b"1")?;
    if b.rank == 0 {
        let done: Vec<String> = (0..b.world_size).map(|r| format!("done/{r}")).collect();
        s.wait(
            &done.iter().map(String::as_str).collect::<Vec<_>>(),
            TIMEOUT,
        )?;
    }
    Ok(())
}

/// What a child does, by `OXCCL_LAUNCH_CHILD`: `env` (Bootstrap::from_env) or `file:<path>`
/// with the explicit rank and size of `OXCCL_TEST_RANK`/`OXCCL_TEST_WORLD`.
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let result = if mode == "env" {
        Bootstrap::from_env()
    } else if let Some(url) = mode.strip_prefix("init:") {
        let num = |v: &str| std::env::var(v).ok().and_then(|s| s.parse().ok());
        InitMethod::parse(url).and_then(|init| {
            Bootstrap::new(
                &init,
                num("OXCCL_TEST_RANK"),
                num("OXCCL_TEST_WORLD"),
                TIMEOUT,
            )
        })
    } else {
        panic!("unknown child mode {mode}");
    };
    // The bootstrap (and the store server rank 0 may host) lives to the end of this match.
    match result.and_then(|b| rank_work(&b).map(|()| b)) {
        Ok(b) if b.rank == 0 => {
            // Rank 0 may host the store: it stays, the server with it, until the parent saw
            // every other rank exit (closing this stdin), or a rank's last answer (the ping
            // after its `done` set) could be cut off by the server going.
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            drop(b);
        }
        Ok(_) => {}
        Err(e) => {
            println!("CHILD ERROR {e}");
            std::process::exit(3);
        }
    }
}

/// Starts one child with exactly `vars` (and the mode), nothing inherited.
fn spawn(mode: &str, vars: &[(String, String)]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env_clear()
        .env(CHILD, mode)
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for every child (killing all of them after the timeout); their `CHILD` lines, in
/// rank order of spawning.
fn finish(children: Vec<Child>) -> Vec<String> {
    let start = Instant::now();
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut lines = vec![String::new(); children.len()];
    while children.iter().any(Option::is_some) {
        // Every rank but the first is gone: let the first (the store's host) leave.
        if children.iter().skip(1).all(Option::is_none) {
            if let Some(Some(c)) = children.first_mut() {
                drop(c.stdin.take());
            }
        }
        if start.elapsed() > Duration::from_secs(60) {
            for c in children.iter_mut().flatten() {
                let _ = c.kill();
            }
            panic!("children did not finish in 60 s");
        }
        for (i, slot) in children.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            if c.try_wait().unwrap().is_some() {
                let out = slot.take().unwrap().wait_with_output().unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "child {i} failed: {}\n{stdout}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
                // The harness prints `test child ... ` before the line, on the same line.
                lines[i] = stdout
                    .lines()
                    .find_map(|l| l.find("CHILD ").map(|at| l[at..].to_string()))
                    .unwrap_or_default();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    lines
}

/// Three `env://` children, rank r given `vars_of(r)`: each must see its rank, a world of 3,
/// local rank and device r, `launcher`, and the shared store's count.
fn three_by_env(launcher: &str, vars_of: impl Fn(u32) -> Vec<(String, String)>) {
    let children = (0..3).map(|r| spawn("env", &vars_of(r))).collect();
    for (r, line) in finish(children).iter().enumerate() {
        assert_eq!(
            line,
            &format!(
                "CHILD rank={r} world=3 local=Some({r}) device={r} launcher={launcher} count=3"
            )
        );
    }
}

#[test]
fn env_torchrun_three_processes() {
    let port = free_port();
    three_by_env("Torchrun", |r| launchers::torchrun(r, 3, port));
}

#[test]
fn env_slurm_three_processes() {
    let port = free_port();
    three_by_env("Slurm", |r| launchers::slurm(r, 3, port));
}

/// Whether a listener holds `127.0.0.1:port` now (binding it fails as in use).
fn held(port: u16) -> bool {
    matches!(
        std::net::TcpListener::bind(("127.0.0.1", port)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse
    )
}

/// srun without MASTER_PORT: the ranks meet on the port the job and step ids give. Rank 0 is
/// started first and seen holding that port before the others start; ids whose port another
/// program holds (before or during the start) are replaced by the next ones, so a busy port
/// cannot fail the test. The job ids come from this process's id, so that copies of this
/// test running at once on one host try different ports.
#[test]
fn env_slurm_without_master_port_meets_on_the_derived_port() {
    use oxccl::rules::launch::slurm_port;
    let first_job = 1_000 + std::process::id() % 1_000_000;
    for attempt in 0..20u32 {
        let (job, step) = (first_job + attempt, attempt % 3);
        let port = slurm_port(job, step);
        if held(port) {
            continue;
        }
        let mut rank0 = spawn("env", &launchers::slurm_step(0, 3, job, step));
        let began = Instant::now();
        let listening = loop {
            if held(port) {
                break true;
            }
            if rank0.try_wait().unwrap().is_some() {
                break false;
            }
            assert!(
                began.elapsed() < TIMEOUT,
                "rank 0 neither listened on {port} nor exited"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        if !listening {
            let out = rank0.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            // Taken between the check and the bind: the next ids.
            if stdout.contains("CHILD ERROR invalid argument `MASTER_PORT`: expected set, to replace the port Slurm job") {
                continue;
            }
            panic!(
                "rank 0 exited before listening on {port}: {}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut children = vec![rank0];
        children.extend((1..3).map(|r| spawn("env", &launchers::slurm_step(r, 3, job, step))));
        for (r, line) in finish(children).iter().enumerate() {
            assert_eq!(
                line,
                &format!(
                    "CHILD rank={r} world=3 local=Some({r}) device={r} launcher=Slurm count=3"
                )
            );
        }
        return;
    }
    panic!("20 job steps' ports were all held by other programs");
}

/// A port the Slurm rule derived that another program holds: rank 0's error names
/// `MASTER_PORT` (the way out) and the job step.
#[test]
fn a_taken_derived_port_names_master_port() {
    use oxccl::rules::launch::slurm_port;
    let first_job = 500_000 + std::process::id() % 1_000_000;
    let (job, _listener) = (first_job..first_job + 100)
        .find_map(|job| {
            std::net::TcpListener::bind(("127.0.0.1", slurm_port(job, 0)))
                .ok()
                .map(|l| (job, l))
        })
        .expect("a free port among 100 job steps");
    let env = EnvVars::from_pairs(launchers::slurm_step(0, 1, job, 0));
    let e = Bootstrap::with_env(&InitMethod::Env, None, None, TIMEOUT, &env).unwrap_err();
    assert_eq!(arg_of(&e), "MASTER_PORT", "{e}");
    assert!(
        e.to_string().contains(&format!("Slurm job {job} step 0")),
        "{e}"
    );
}

/// Three processes as `mpirun` (Open MPI) and MPICH's Hydra start them: their own rank
/// variables, the master from MASTER_ADDR/MASTER_PORT (neither launcher sets one).
#[test]
fn env_open_mpi_and_mpich_three_processes() {
    for (launcher, rank, size, local) in [
        (
            "OpenMpi",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
        ),
        ("Mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ] {
        let port = free_port().to_string();
        three_by_env(launcher, |r| {
            vars(&[
                (rank, r.to_string()),
                (size, "3".into()),
                (local, r.to_string()),
                ("MASTER_ADDR", "127.0.0.1".into()),
                ("MASTER_PORT", port.clone()),
            ])
        });
    }
}

#[test]
fn file_three_processes() {
    let path: PathBuf =
        std::env::temp_dir().join(format!("oxccl-launch-{}-file", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mode = format!("init:file://{}", path.display());
    let children = (0..3)
        .map(|r| {
            spawn(
                &mode,
                &vars(&[
                    ("OXCCL_TEST_RANK", r.to_string()),
                    ("OXCCL_TEST_WORLD", "3".into()),
                ]),
            )
        })
        .collect();
    for (r, line) in finish(children).iter().enumerate() {
        assert_eq!(
            line,
            &format!("CHILD rank={r} world=3 local=None device=0 launcher=Explicit count=3")
        );
    }
    // The last of the three removed the file.
    assert!(!path.exists());
}

#[test]
fn agent_store_every_rank_is_a_client() {
    // The "agent": a server this test hosts, as torchrun's agent would.
    let agent = TcpStore::new(TcpStoreOptions::server("127.0.0.1", 0)).unwrap();
    let port = agent.port().to_string();
    let children = (0..2)
        .map(|r| {
            spawn(
                "env",
                &vars(&[
                    ("RANK", r.to_string()),
                    ("WORLD_SIZE", "2".into()),
                    ("TORCHELASTIC_RUN_ID", "test".into()),
                    ("TORCHELASTIC_USE_AGENT_STORE", "True".into()),
                    ("MASTER_ADDR", "127.0.0.1".into()),
                    ("MASTER_PORT", port.clone()),
                ]),
            )
        })
        .collect();
    let lines = finish(children);
    assert_eq!(
        lines[0],
        "CHILD rank=0 world=2 local=None device=0 launcher=Torchrun count=2"
    );
    // Rank 0 hosted nothing: its keys are in the agent's store.
    assert_eq!(agent.get("greeting", TIMEOUT).unwrap(), b"hello");
    assert_eq!(agent.add("count", 0).unwrap(), 2);
}

#[test]
fn tcp_bootstrap_in_threads() {
    let port = free_port();
    let init = InitMethod::parse(&format!("tcp://127.0.0.1:{port}")).unwrap();
    // Every rank keeps its bootstrap until all are done: rank 0's holds the store server,
    // and its going would cut off another rank's last answer.
    let all_done = std::sync::Arc::new(std::sync::Barrier::new(2));
    let ranks: Vec<_> = (0..2u32)
        .map(|r| {
            let (init, all_done) = (init.clone(), all_done.clone());
            std::thread::spawn(move || {
                let b = Bootstrap::with_env(&init, Some(r), Some(2), TIMEOUT, &EnvVars::default())
                    .unwrap();
                assert_eq!((b.launcher, b.rank, b.device.0), (Launcher::Explicit, r, 0));
                let worked = rank_work(&b);
                all_done.wait();
                worked.unwrap();
            })
        })
        .collect();
    ranks.into_iter().for_each(|t| t.join().unwrap());
}

#[test]
fn conflicting_environment_names_both_variables() {
    let env = EnvVars::from_pairs([
        ("RANK", "1"),
        ("WORLD_SIZE", "3"),
        ("SLURM_PROCID", "2"),
        ("SLURM_NTASKS", "3"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "1"),
    ]);
    let e = Bootstrap::with_env(&InitMethod::Env, None, None, TIMEOUT, &env).unwrap_err();
    assert_eq!(arg_of(&e), "RANK");
    let text = e.to_string();
    assert!(
        text.contains("RANK=1") && text.contains("SLURM_PROCID=2"),
        "{text}"
    );
}

/// Runs one child that must fail; its `CHILD ERROR` line.
fn failing_child(vars: &[(&str, &std::ffi::OsStr)]) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env_clear()
        .env(CHILD, "env")
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let at = stdout.find("CHILD ERROR ").expect("an error line");
    stdout[at..].lines().next().unwrap_or_default().to_string()
}

#[test]
fn bad_process_environments_fail_with_named_variables() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    // Conflicting launchers, through the real process environment.
    let line = failing_child(&[
        ("RANK", OsStr::new("1")),
        ("WORLD_SIZE", OsStr::new("3")),
        ("SLURM_PROCID", OsStr::new("2")),
        ("SLURM_NTASKS", OsStr::new("3")),
    ]);
    assert_eq!(
        line,
        "CHILD ERROR invalid argument `RANK`: expected RANK=1 to agree with SLURM_PROCID=2"
    );
    // A value that is not UTF-8 is an error naming its variable, not a panic.
    let line = failing_child(&[
        ("RANK", OsStr::from_bytes(b"\xff")),
        ("WORLD_SIZE", OsStr::new("1")),
    ]);
    assert!(
        line.starts_with("CHILD ERROR invalid argument `RANK`"),
        "{line}"
    );
    // A malformed OXCCL_* variable fails the bootstrap (its timeout is read there).
    let line = failing_child(&[
        ("RANK", OsStr::new("0")),
        ("WORLD_SIZE", OsStr::new("1")),
        ("OXCCL_TIMEOUT_MS", OsStr::new("10s")),
    ]);
    assert!(
        line.starts_with("CHILD ERROR invalid argument `OXCCL_TIMEOUT_MS`"),
        "{line}"
    );
}

#[test]
fn env_init_needs_master_address_and_port() {
    let env = EnvVars::from_pairs([("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "1")]);
    let e = Bootstrap::with_env(&InitMethod::Env, None, None, TIMEOUT, &env).unwrap_err();
    assert_eq!(arg_of(&e), "MASTER_ADDR");
    let env = EnvVars::from_pairs([("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "h")]);
    let e = Bootstrap::with_env(&InitMethod::Env, None, None, TIMEOUT, &env).unwrap_err();
    assert_eq!(arg_of(&e), "MASTER_PORT");
    // Under srun with no job id either: the error names the variables that would give it.
    let env = EnvVars::from_pairs([
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_NODELIST", "h"),
    ]);
    let e = Bootstrap::with_env(&InitMethod::Env, None, None, TIMEOUT, &env).unwrap_err();
    assert_eq!(arg_of(&e), "MASTER_PORT");
    assert!(e.to_string().contains("SLURM_JOB_ID"), "{e}");
    let e = Bootstrap::with_env(&InitMethod::Env, None, None, TIMEOUT, &EnvVars::default())
        .unwrap_err();
    assert_eq!(arg_of(&e), "RANK");
}

#[test]
fn init_methods_parse() {
    assert_eq!(InitMethod::parse("env://").unwrap(), InitMethod::Env);
    assert_eq!(
        InitMethod::parse("tcp://10.1.2.3:29500").unwrap(),
        InitMethod::Tcp {
            host: "10.1.2.3".into(),
            port: 29500
        }
    );
    assert_eq!(
        InitMethod::parse("tcp://[::1]:80").unwrap(),
        InitMethod::Tcp {
            host: "::1".into(),
            port: 80
        }
    );
    assert_eq!(
        "file:///tmp/x store".parse::<InitMethod>().unwrap(),
        InitMethod::File {
            path: "/tmp/x store".into()
        }
    );
    for url in ["env://", "tcp://h:1", "tcp://[::1]:2", "file:///a/b"] {
        assert_eq!(InitMethod::parse(url).unwrap().to_string(), url);
    }
    for (url, why) in [
        ("gloo://h:1", "unknown scheme `gloo`"),
        ("h:1", "no `scheme://`"),
        ("", "no `scheme://`"),
        ("env://x", "nothing may follow env://"),
        ("tcp://host", "a port after the host"),
        ("tcp://host:", "a port after the host"),
        ("tcp://:29500", "a host before the port"),
        ("tcp://h:0", "a port in 1..=65535"),
        ("tcp://h:65536", "a port in 1..=65535"),
        ("tcp://h:+1", "a port in 1..=65535"),
        ("tcp://h:port", "a port in 1..=65535"),
        ("tcp://h:1/x", "a bare host:port"),
        ("tcp://h:1?rank=0", "a bare host:port"),
        ("tcp://::1:80", "an IPv6 address in brackets"),
        ("tcp://[::1:80", "an IPv6 address closed by `]`"),
        ("tcp://[::1]80", "a port after the address"),
        ("file://tmp/x", "an absolute path"),
        ("file://", "an absolute path"),
    ] {
        let e = InitMethod::parse(url).unwrap_err();
        assert_eq!(arg_of(&e), "init_method", "{url}");
        assert!(e.to_string().contains(why), "{url}: {e}");
    }
}

/// The table of process-group variables lives on one page, `docs/ENVIRONMENT.md` (the README
/// and the guide link to it): that page lists every variable of
/// `oxccl_rules::env::VARIABLES` with the same default (the table
/// `oxccl_rules::env::write_markdown_table` writes), and the README keeps no copy of it.
#[test]
fn environment_table_matches_variables() {
    use oxccl::rules::env::VARIABLES;
    fn rows(text: &str) -> Vec<Vec<&str>> {
        text.lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| l.split('|').map(str::trim).collect())
            .collect()
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let copied: Vec<&str> = VARIABLES
        .iter()
        .map(|(name, _, _)| *name)
        .filter(|name| {
            let cell = format!("`{name}`");
            rows(&readme)
                .iter()
                .any(|r| r.get(1) == Some(&cell.as_str()))
        })
        .collect();
    assert!(
        copied.is_empty(),
        "the README has rows of the variables' table ({copied:?}): it links to docs/ENVIRONMENT.md"
    );
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/ENVIRONMENT.md"
    ))
    .unwrap();
    let rows = rows(&text);
    let mut found = 0;
    for (name, default, _) in VARIABLES {
        let cell = format!("`{name}`");
        if let Some(row) = rows.iter().find(|r| r.get(1) == Some(&cell.as_str())) {
            found += 1;
            assert_eq!(
                row.get(2),
                Some(default),
                "docs/ENVIRONMENT.md default of {name}"
            );
        }
    }
    assert!(
        found == VARIABLES.len(),
        "docs/ENVIRONMENT.md lists {found} of the {} process-group variables",
        VARIABLES.len()
    );
}

/// docs/ENVIRONMENT.md's table of PyTorch's names is the one
/// `oxccl_rules::env::write_torch_markdown_table` writes from `TORCH_VARIABLES`, whole.
#[test]
fn environment_doc_table_matches_torch_variables() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/ENVIRONMENT.md"
    ))
    .unwrap();
    let mut table = String::new();
    oxccl::rules::env::write_torch_markdown_table(&mut table).unwrap();
    assert!(
        doc.contains(&format!("\n\n{table}\n")),
        "docs/ENVIRONMENT.md's table differs from this one:\n{table}"
    );
}

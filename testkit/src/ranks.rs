//! Ranks as child processes of a test binary: each child is the binary itself re-run as its
//! `child` test with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR/PORT…) and the mock
//! backend spanning processes; the parent waits for all of them under a deadline (a hang fails
//! the test, never blocks CI) and reads the `RESULT key=value` lines they print.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free port below the kernel's ephemeral range (32768 on), so that no client connection of
/// a concurrently running test takes it as its source port before rank 0 binds it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for _ in 0..1000 {
        let k = NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(7919) ^ seed;
        let port = 20_000 + (k % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..32000");
}

/// What one child did.
pub struct Ran {
    /// Its rank (its place in the children waited for).
    pub rank: u32,
    /// Its process id.
    pub pid: u32,
    /// Its exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Its standard output.
    pub out: String,
}

/// The command of rank `rank` of `n`: this binary's `child` test with `scenario` in the
/// variable `child_var`, torchrun's variables for a store at 127.0.0.1:`port`, and the mock.
pub fn rank_command(child_var: &str, scenario: &str, rank: u32, n: u32, port: u16) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(child_var, scenario)
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", n.to_string())
        .env("LOCAL_WORLD_SIZE", n.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("OXCCL_BACKEND", "mock")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in [
        "TORCHELASTIC_USE_AGENT_STORE",
        "SLURM_PROCID",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "GROUP_RANK",
    ] {
        cmd.env_remove(v);
    }
    cmd
}

/// Waits for every child, killing them all past `deadline` (and failing); with `reap`, kills
/// that rank once all the others exited (a rank that stopped answering).
pub fn wait_all(
    mut kids: Vec<Child>,
    deadline: Duration,
    what: &str,
    reap: Option<u32>,
) -> Vec<Ran> {
    use std::os::unix::process::ExitStatusExt;
    let pids: Vec<u32> = kids.iter().map(Child::id).collect();
    let start = Instant::now();
    while kids.iter_mut().any(|k| k.try_wait().unwrap().is_none()) {
        if start.elapsed() > deadline {
            for k in &mut kids {
                let _ = k.kill();
            }
            panic!("{what} hung past {deadline:?}");
        }
        if let Some(r) = reap {
            let others_done = kids
                .iter_mut()
                .enumerate()
                .all(|(i, k)| i as u32 == r || k.try_wait().unwrap().is_some());
            if others_done {
                let _ = kids[r as usize].kill();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kids.into_iter()
        .zip(pids)
        .zip(0..)
        .map(|((k, pid), rank)| {
            let o = k.wait_with_output().unwrap();
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            eprintln!(
                "--- rank {rank} ({:?}) ---\n{out}{}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            Ran {
                rank,
                pid,
                code: o.status.code(),
                signal: o.status.signal(),
                out,
            }
        })
        .collect()
}

/// The value of `key` on a child's `RESULT key=value …` line.
pub fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines()
        .filter_map(|l| l.find("RESULT ").map(|i| &l[i..]))
        .flat_map(|l| l.split_whitespace())
        .find_map(|w| w.strip_prefix(key).and_then(|w| w.strip_prefix('=')))
}

/// Builds example `name` of the package in `package_dir` (the test's own:
/// `env!("CARGO_MANIFEST_DIR")`) with cargo, as the test runs, and returns its path: the
/// examples folder beside the running test binary's `deps/`.
pub fn built_example(package_dir: impl AsRef<Path>, name: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--example", name])
        .current_dir(package_dir.as_ref())
        .status()
        .unwrap();
    assert!(built.success());
    // target/<profile>/deps/<this test> → target/<profile>/examples/<name>
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples")
        .join(name)
}

//! GPU tests that run a rank per process: the test binary starts itself once per rank, with
//! the rank's role, place and the group's unique id in its environment.

use oxccl::core::Backend as _;
use oxccl::{Nccl, UniqueId};
use std::process::Command;
use std::time::{Duration, Instant};

/// `id` as hex text (for the environment).
pub fn hex(id: &UniqueId) -> String {
    id.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// The id `hex` wrote.
pub fn unhex(s: &str) -> UniqueId {
    let bytes: Vec<u8> = (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    UniqueId::from_bytes(&bytes).unwrap()
}

/// What a child process was started for: its role, rank, group size and the group's id
/// (`None` when this process is not such a child).
pub fn child() -> Option<(String, u32, u32, UniqueId)> {
    let role = std::env::var("OXCCL_CHILD_ROLE").ok()?;
    let r = std::env::var("OXCCL_CHILD_RANK").ok()?.parse().ok()?;
    let n = std::env::var("OXCCL_CHILD_SIZE").ok()?.parse().ok()?;
    let id = unhex(&std::env::var("OXCCL_CHILD_ID").ok()?);
    Some((role, r, n, id))
}

/// Starts one child process per rank running the test `entry` of this binary in `role`, with
/// the library at `lib` (or the default) and `env` set for each rank (given the rank), and
/// collects their outputs. A child that hangs is killed after `limit`, so a hang fails the test
/// instead of CI.
pub fn spawn_ranks(
    n: u32,
    entry: &str,
    role: &str,
    lib: Option<&str>,
    env: &dyn Fn(u32) -> Vec<(String, String)>,
    limit: Duration,
) -> Vec<(u32, std::process::Output)> {
    let id = match lib {
        Some(p) => Nccl::open(p).unwrap().unique_id().unwrap(),
        None => Nccl::load().unwrap().unique_id().unwrap(),
    };
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|r| {
            let mut cmd = Command::new(&exe);
            cmd.args(["--exact", entry, "--nocapture", "--test-threads=1"])
                .env("OXCCL_CHILD_ROLE", role)
                .env("OXCCL_CHILD_RANK", r.to_string())
                .env("OXCCL_CHILD_SIZE", n.to_string())
                .env("OXCCL_CHILD_ID", hex(&id))
                .envs(env(r));
            if let Some(p) = lib {
                cmd.env("OXCCL_NCCL_LIBRARY", p);
            }
            (
                r,
                cmd.stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let deadline = Instant::now() + limit;
    children
        .into_iter()
        .map(|(r, mut c)| {
            while c.try_wait().unwrap().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            (r, c.wait_with_output().unwrap())
        })
        .collect()
}

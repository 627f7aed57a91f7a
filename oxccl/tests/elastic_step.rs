//! `examples/elastic_step` on the mock world across processes: four ranks, rank 2 SIGKILLed
//! mid-step, the survivors train on, a replacement joins; the example checks the weights and
//! steps itself, this checks its verdict and its times against the goals (back to training
//! within the group's timeout + 2 s, training at four within 5 s of the replacement's start).

#[path = "torch_env/mod.rs"]
mod torch_env;

use oxccl_testkit::ranks;
use std::process::Command;

/// The number before `unit` that follows `lead` in `line`.
fn number(line: &str, lead: &str) -> u64 {
    let rest = line
        .split(lead)
        .nth(1)
        .unwrap_or_else(|| panic!("no `{lead}` in {line:?}"));
    rest.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after `{lead}` in {line:?}"))
}

/// The mock imitating NCCL 2.28.3 (its default): no revoke, so an abort and a new
/// communicator through the store, for the loss and for the join.
#[test]
fn survivors_train_through_a_kill_and_a_replacement_joins() {
    run(None);
}

/// The mock imitating NCCL 2.32.3: a revoke and a shrink across processes for the loss, a
/// grow across processes for the join (each member says so).
#[test]
fn survivors_shrink_and_the_replacement_joins_by_a_grow_across_processes() {
    let out = run(Some("2.32.3"));
    let grows = out
        .lines()
        .filter(|l| l.contains("grows the communicator from 3 to 4 ranks"))
        .count();
    assert_eq!(grows, 3, "{out}");
}

/// Under torchrun, an agent per rank (`--nnodes 4 --nproc-per-node 1 --max-restarts 0`):
/// the lost rank's agent fails and leaves, the others' workers train on, the replacement
/// joins from outside any agent. Skips, saying so, without torch's venv (fails under CI).
#[test]
fn under_torchrun_an_agent_per_rank_keeps_the_survivors() {
    let Some(torchrun) = torch_env::venv_program("torchrun") else {
        return;
    };
    let out = run_with(None, Some(&torchrun));
    // The lost rank's agent reported its worker's SIGKILL; the survivors' agents, left in
    // their exit barrier, were ended by the launcher.
    assert!(out.contains("exitcode  : -9"), "{out}");
    assert!(out.contains("agent waits in its exit barrier"), "{out}");
}

/// Runs the example (`OXCCL_MOCK_VERSION` = `version`), checks its verdict, returns what it
/// printed on both streams.
fn run(version: Option<&str>) -> String {
    run_with(version, None)
}

/// [`run`], each rank started under an agent of `torchrun` when given.
fn run_with(version: Option<&str>, torchrun: Option<&std::path::Path>) -> String {
    let exe = ranks::built_example(env!("CARGO_MANIFEST_DIR"), "elastic_step");
    let timeout_ms = 10_000;
    let mut cmd = Command::new(&exe);
    match torchrun {
        Some(t) => cmd.env("ELASTIC_TORCHRUN", t),
        None => cmd.env_remove("ELASTIC_TORCHRUN"),
    };
    cmd.env_remove("RANK")
        .env("OXCCL_BACKEND", "mock")
        .env("OXCCL_TIMEOUT_MS", timeout_ms.to_string())
        .env("RUST_LOG", "info");
    match version {
        Some(v) => cmd.env("OXCCL_MOCK_VERSION", v),
        None => cmd.env_remove("OXCCL_MOCK_VERSION"),
    };
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdict = stdout
        .lines()
        .find(|l| l.starts_with("elastic_step: weights equal on all 4 ranks"))
        .unwrap_or_else(|| panic!("no verdict in:\n{stdout}"));
    let back = number(verdict, "survivors training again ");
    assert!(back <= timeout_ms + 2_000, "{verdict}");
    let four = number(verdict, "replacement training at 4 ranks ");
    assert!(four <= 5_000, "{verdict}");
    // Every rank's last line: the last step, four ranks, one loss and one admission.
    let finals: Vec<&str> = stdout.lines().filter(|l| l.starts_with("final ")).collect();
    assert_eq!(finals.len(), 4, "{stdout}");
    for f in &finals {
        assert!(f.contains("step 60 size 4 epoch 2"), "{f}");
    }
    format!("{stdout}{}", String::from_utf8_lossy(&out.stderr))
}

//! The two examples as torchrun runs them (`--no-python`, one process per rank, the mock
//! spanning the processes without a GPU), at 2 and 4 ranks, against one rank: tensor
//! parallelism gives one rank's logits and greedy tokens, data parallelism one rank's weights
//! with the whole batch. Skips, saying so, without torch's venv (fails under CI).

#[path = "../../oxccl/tests/torch_env/mod.rs"]
mod torch_env;

use oxccl_testkit::ranks;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Each `rank R <what> [v, ...]` line of `out`, by rank.
fn values(out: &str, what: &str) -> BTreeMap<usize, Vec<f64>> {
    out.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("rank ")?;
            let (rank, rest) = rest.split_once(' ')?;
            let list = rest
                .strip_prefix(what)?
                .trim()
                .strip_prefix('[')?
                .strip_suffix(']')?;
            let v = list
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| {
                    s.trim()
                        .parse::<f64>()
                        .unwrap_or_else(|e| panic!("{s}: {e} in {l}"))
                })
                .collect();
            Some((rank.parse().ok()?, v))
        })
        .collect()
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The example alone on one rank (threads mode, world 1).
fn one_rank(exe: &Path) -> String {
    stdout_of(
        Command::new(exe)
            .arg("1")
            .env_remove("RANK")
            .env("OXCCL_BACKEND", "mock"),
    )
}

fn under_torchrun(torchrun: &Path, exe: &Path, n: u32) -> String {
    stdout_of(
        Command::new(torchrun)
            .args(["--no-python", "--nproc-per-node", &n.to_string()])
            .args(["--master-port", &ranks::free_port().to_string()])
            .arg(exe)
            .env("OXCCL_BACKEND", "mock"),
    )
}

/// Every rank of `many` has `what` within `tol` of rank 0 of `one`; the largest difference.
fn close(one: &str, many: &str, what: &str, n: u32, tol: f64) -> f64 {
    let want = values(one, what)
        .remove(&0)
        .unwrap_or_else(|| panic!("no {what} in:\n{one}"));
    let got = values(many, what);
    assert_eq!(
        got.len(),
        n as usize,
        "{what} lines of {n} ranks in:\n{many}"
    );
    let mut worst = 0f64;
    for (r, v) in got {
        assert_eq!(v.len(), want.len(), "rank {r} {what}");
        for (a, b) in v.iter().zip(&want) {
            worst = worst.max((a - b).abs());
        }
        assert!(
            worst <= tol,
            "rank {r} of {n}: {what} differ by {worst} from one rank"
        );
    }
    worst
}

#[test]
fn tp_llama_under_torchrun_gives_one_ranks_logits_and_tokens() {
    let Some(torchrun) = torch_env::venv_program("torchrun") else {
        return;
    };
    let exe = ranks::built_example(env!("CARGO_MANIFEST_DIR"), "tp_llama");
    let one = one_rank(&exe);
    for n in [2, 4] {
        let many = under_torchrun(&torchrun, &exe, n);
        let worst = close(&one, &many, "logits", n, 1e-4);
        let tokens = values(&one, "tokens").remove(&0).unwrap();
        for (r, t) in values(&many, "tokens") {
            assert_eq!(t, tokens, "rank {r} of {n}: greedy tokens");
        }
        eprintln!(
            "tp_llama: {n} processes, logits within {worst:e} of one rank, tokens {tokens:?}"
        );
    }
}

#[test]
fn dp_train_under_torchrun_reaches_one_ranks_weights() {
    let Some(torchrun) = torch_env::venv_program("torchrun") else {
        return;
    };
    let exe = ranks::built_example(env!("CARGO_MANIFEST_DIR"), "dp_train");
    let one = one_rank(&exe);
    let losses = values(&one, "losses").remove(&0).unwrap();
    assert!(
        losses.last().unwrap() < &(losses[0] / 4.0),
        "the loss falls: {losses:?}"
    );
    for n in [2, 4] {
        let many = under_torchrun(&torchrun, &exe, n);
        let worst = close(&one, &many, "weights", n, 1e-5);
        close(&one, &many, "losses", n, 1e-5);
        eprintln!("dp_train: {n} processes, weights within {worst:e} of one rank");
    }
}

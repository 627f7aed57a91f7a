//! `oxccl perf` as a launcher starts it, a process per rank (torchrun, Slurm's srun, Open
//! MPI's mpirun), on the mock world spanning the processes (`--backend mock`, so the test
//! means the same on a GPU machine): every rank bootstraps from its launcher's variables,
//! rank 0 reports the merged results, the others print nothing, and a wrong result on one
//! rank makes rank 0 exit 1.

mod common;

use common::ALL_COLLECTIVES;
use oxccl_testkit::launchers::{slurm, torchrun, vars, LAUNCH_VARS};
use oxccl_testkit::ranks::free_port;
use serde_json::Value;
use std::process::{Child, Command, Output, Stdio};

/// Rank `r`'s `oxccl perf ARGS` with `vars`.
fn spawn(vars: &[(String, String)], args: &[&str]) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_oxccl"));
    for v in LAUNCH_VARS {
        c.env_remove(v);
    }
    c.arg("perf")
        .args(args)
        .args(["--backend", "mock"])
        .envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("oxccl runs")
}

/// Every rank's output, in rank order.
fn run(n: u32, vars_of: impl Fn(u32) -> Vec<(String, String)>, args: &[&str]) -> Vec<Output> {
    let children: Vec<Child> = (0..n).map(|r| spawn(&vars_of(r), args)).collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("oxccl ends"))
        .collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Rank 0's JSON report, after checking every rank exited 0 and only rank 0 printed.
fn report(outs: &[Output]) -> Value {
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(&o.stderr));
        if r > 0 {
            assert!(o.stdout.is_empty(), "rank {r} printed: {}", text(&o.stdout));
        }
    }
    serde_json::from_slice(&outs[0].stdout).expect("rank 0 prints one JSON object")
}

/// The measured places of `rows` (in and out of place where timed): each has a time and
/// 0 wrong elements.
fn assert_all_right(v: &Value, colls: &[&str]) {
    assert_eq!(v["wrong_total"], 0, "wrong_total");
    let rows = v["results"].as_array().expect("results");
    for c in colls {
        let mine: Vec<&Value> = rows.iter().filter(|r| r["collective"] == *c).collect();
        assert!(!mine.is_empty(), "no row of {c}");
        for r in mine {
            let timed: Vec<&Value> = [&r["in_place"], &r["out_of_place"]]
                .into_iter()
                .filter(|p| !p.is_null())
                .collect();
            assert!(!timed.is_empty(), "{c}: neither place timed: {r}");
            for p in timed {
                assert!(p["time_us"].as_f64().is_some_and(|t| t > 0.0), "{r}");
                assert_eq!(p["wrong"], 0, "{r}");
            }
        }
    }
}

#[test]
fn torchrun_two_processes_run_every_collective_and_rank_0_reports() {
    let port = free_port();
    let outs = run(
        2,
        |r| torchrun(r, 2, port),
        &[
            "all", "-b", "64", "-e", "4K", "-f", "8", "-c", "1", "--json",
        ],
    );
    let v = report(&outs);
    assert_eq!(v["backend"], "mock");
    assert_eq!(v["mode"], "process per rank");
    assert_eq!(v["ranks"], 2);
    assert_eq!(v["launcher"], "Torchrun");
    assert!(v["first_line"]
        .as_str()
        .is_some_and(|l| l.starts_with("mock world") && l.contains("one process per rank")));
    assert_all_right(&v, &ALL_COLLECTIVES);
}

#[test]
fn slurm_and_open_mpi_processes_bootstrap_and_report() {
    let port = free_port();
    let args = [
        "all_reduce",
        "alltoall",
        "-b",
        "96",
        "-e",
        "96",
        "-c",
        "1",
        "--json",
    ];
    let v = report(&run(3, |r| slurm(r, 3, port), &args));
    assert_eq!(
        (v["launcher"].as_str(), v["ranks"].as_u64()),
        (Some("Slurm"), Some(3))
    );
    assert_all_right(&v, &["all_reduce", "alltoall"]);

    let port = free_port();
    let ompi = move |r: u32| {
        vars(&[
            ("OMPI_COMM_WORLD_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_SIZE", "2".into()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", port.to_string()),
        ])
    };
    let v = report(&run(2, ompi, &args));
    assert_eq!(
        (v["launcher"].as_str(), v["ranks"].as_u64()),
        (Some("OpenMpi"), Some(2))
    );
    assert_all_right(&v, &["all_reduce", "alltoall"]);
}

#[test]
fn a_wrong_result_on_rank_0_makes_rank_0_exit_1_and_the_others_0() {
    let port = free_port();
    let outs = run(
        2,
        |r| torchrun(r, 2, port),
        &[
            "all_reduce",
            "-b",
            "64",
            "-e",
            "64",
            "-c",
            "1",
            "--inject-error",
        ],
    );
    assert_eq!(outs[0].status.code(), Some(1), "{}", text(&outs[0].stderr));
    assert!(text(&outs[0].stderr).contains("wrong elements"));
    assert_eq!(outs[1].status.code(), Some(0), "{}", text(&outs[1].stderr));
    assert!(outs[1].stdout.is_empty());
}

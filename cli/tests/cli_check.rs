//! `oxccl check` on the mock world: every case right, the table and JSON, and exit 1 when a
//! result is wrong.

mod common;

use common::oxccl;
use serde_json::Value;

#[test]
fn every_case_passes_and_is_listed() {
    let o = oxccl(&["check", "--json", "-g", "3", "--count", "60"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["backend"], "mock");
    assert_eq!(v["failed"], 0);
    let rows = v["results"].as_array().unwrap();
    // 3 reducing collectives × 12 types × 5 ops + 6 others × 12 types, each in the one
    // placement the process group has.
    assert_eq!(rows.len(), 3 * 12 * 5 + 6 * 12);
    assert_eq!(v["cases"], rows.len());
    assert!(rows.iter().all(|r| r["ok"] == true && r["wrong"] == 0));
    assert!(rows.iter().any(|r| r["collective"] == "reduce_scatter"
        && r["type"] == "f8e5m2"
        && r["redop"] == "avg"));
    assert!(rows
        .iter()
        .any(|r| r["collective"] == "all_reduce" && r["placement"] == "in-place"));
}

#[test]
fn table_and_a_forced_wrong_result() {
    let ok = oxccl(&["check", "all_reduce", "-d", "bfloat16", "-o", "sum"]);
    assert_eq!(ok.status.code(), Some(0));
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(out.starts_with("# mock world"), "{out}");
    assert!(
        out.contains("all_reduce") && out.contains("bfloat16") && out.contains(" ok"),
        "{out}"
    );
    assert!(out.contains("# 0 of 1 cases wrong"), "{out}");

    let bad = oxccl(&[
        "check",
        "all_reduce",
        "-d",
        "bfloat16",
        "-o",
        "sum",
        "--inject-error",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    let out = String::from_utf8_lossy(&bad.stdout);
    assert!(
        out.contains("WRONG") && out.contains("# 1 of 1 cases wrong"),
        "{out}"
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(
        oxccl(&["check", "-g", "2", "-r", "2"]).status.code(),
        Some(2)
    );
    assert_eq!(oxccl(&["check", "nonsense"]).status.code(), Some(2));
    assert_eq!(oxccl(&["frobnicate"]).status.code(), Some(2));
    let help = oxccl(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for cmd in [
        "info",
        "perf",
        "check",
        "store",
        "trace",
        "Examples:",
        "Exit codes",
    ] {
        assert!(text.contains(cmd), "{cmd} missing from --help: {text}");
    }
}

/// A library without fp8 (NCCL before 2.24.3, imitated by the mock): fp8 reductions are
/// listed as skipped with the library's reason, the moves run (as uint8) and are right, and
/// the run passes; a wrong result still fails it.
#[test]
fn what_the_library_cannot_run_is_skipped_not_failed() {
    let args = [
        "check",
        "--json",
        "-d",
        "f8e4m3",
        "--mock-version",
        "2.23.4",
    ];
    let o = oxccl(&args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["first_line"]
            .as_str()
            .unwrap()
            .ends_with("imitating NCCL 2.23.4"),
        "{}",
        v["first_line"]
    );
    let rows = v["results"].as_array().unwrap();
    let moves = [
        "all_gather",
        "broadcast",
        "alltoall",
        "gather",
        "scatter",
        "sendrecv",
    ];
    let ran: Vec<&str> = rows
        .iter()
        .map(|r| r["collective"].as_str().unwrap())
        .collect();
    assert_eq!(ran, moves);
    assert!(rows
        .iter()
        .all(|r| r["ok"] == true && r["type"] == "f8e4m3"));
    let skipped = v["skipped"].as_array().unwrap();
    // The three reductions × five operators.
    assert_eq!(skipped.len(), 3 * 5);
    for s in skipped {
        assert!(
            ["all_reduce", "reduce_scatter", "reduce"].contains(&s["collective"].as_str().unwrap()),
            "{s}"
        );
        assert_eq!(
            s["why"], "float8 is unavailable: needs NCCL 2.24.3, loaded 2.23.4",
            "{s}"
        );
    }
    // On the release that has fp8, nothing is skipped.
    let now = oxccl(&["check", "--json", "-d", "f8e4m3", "all_reduce"]);
    let v: Value = serde_json::from_slice(&now.stdout).unwrap();
    assert_eq!(v["skipped"].as_array().unwrap().len(), 0);
    assert_eq!(v["cases"], 5);

    let mut bad = args.to_vec();
    bad.push("--inject-error");
    let o = oxccl(&bad);
    assert_eq!(o.status.code(), Some(1));
}

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

//! `oxccl perf` on the mock world (forced with `--backend mock`, so the test means the same on
//! a GPU machine): its first line, columns, values, JSON schema, SVG chart and exit codes;
//! and `oxccl ping-pong`'s table there.

mod common;

use common::oxccl;
use serde_json::Value;
use std::process::Output;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(args: &[&str]) -> Value {
    let o = oxccl(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("perf --json prints one JSON object")
}

#[test]
fn table_says_mock_first_and_has_nccl_tests_columns() {
    let o = oxccl(&[
        "perf",
        "--backend",
        "mock",
        "-b",
        "8",
        "-e",
        "1K",
        "-n",
        "2",
        "-w",
        "1",
        "-c",
        "1",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = stdout(&o);
    let mut lines = out.lines();
    assert!(lines.next().unwrap().starts_with("# mock world"), "{out}");
    for col in [
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
    ] {
        assert!(out.contains(col), "column {col} missing: {out}");
    }
    // 8 B .. 1 KiB by ×2 = 8 sizes, one pg row each, float sum, in place only.
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("pg "))
        .collect();
    assert_eq!(rows.len(), 8, "{out}");
    let first: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(
        &first[..7],
        ["pg", "all_reduce", "8", "2", "float", "sum", "-1"]
    );
    assert_eq!(
        &first[7..11],
        ["N/A", "N/A", "N/A", "N/A"],
        "no out-of-place all_reduce in c10d's API"
    );
    assert_eq!(first[14], "0", "checked, nothing wrong: {}", rows[0]);
    assert!(out.contains("# Avg bus bandwidth (pg) :"), "{out}");
    // A short run writes no progress line to a stderr that is not a terminal (one every 10 s).
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn nccl_without_a_gpu_is_an_environment_error_in_one_line() {
    if oxccl::nccl::require_driver().is_ok() {
        println!("skipped: this machine has a CUDA driver");
        return;
    }
    for cmd in ["perf", "check"] {
        let o = oxccl(&[cmd, "--backend", "nccl"]);
        assert_eq!(o.status.code(), Some(3), "{cmd}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("--backend mock") || err.contains("nvidia-nccl-cu12"),
            "{err}"
        );
    }
    // Auto falls back to the mock and says why in its first line.
    let o = oxccl(&["perf", "-e", "8"]);
    assert_eq!(o.status.code(), Some(0));
    let first = stdout(&o).lines().next().unwrap_or_default().to_owned();
    assert!(
        first.starts_with("# mock world (no NCCL run: no "),
        "{first}"
    );
}

#[test]
fn json_schema_values_and_bus_bandwidth_formula() {
    let v = json(&[
        "perf",
        "all_gather",
        "broadcast",
        "--backend",
        "mock",
        "-g",
        "4",
        "-b",
        "64",
        "-e",
        "256",
        "-n",
        "2",
        "-w",
        "0",
        "-c",
        "1",
        "--json",
    ]);
    assert_eq!(v["backend"], "mock");
    assert_eq!(v["ranks"], 4);
    assert_eq!(v["layers"], serde_json::json!(["pg"]));
    let rows = v["results"].as_array().unwrap();
    // 64, 128, 256 for two collectives.
    assert_eq!(rows.len(), 6);
    for r in rows {
        assert_eq!(r["layer"], "pg");
        assert_eq!(r["type"], "float");
        let size = r["size"].as_u64().unwrap();
        assert_eq!(r["count"].as_u64().unwrap() * 4, size);
        let (cell, factor) = match r["collective"].as_str().unwrap() {
            "all_gather" => (&r["out_of_place"], 0.75),
            "broadcast" => {
                assert_eq!(r["root"], 0);
                (&r["in_place"], 1.0)
            }
            other => panic!("unexpected {other}"),
        };
        let t = cell["time_us"].as_f64().unwrap();
        let alg = cell["algbw_gbps"].as_f64().unwrap();
        let bus = cell["busbw_gbps"].as_f64().unwrap();
        assert!(t > 0.0);
        assert!((alg - size as f64 / (t * 1e-6) / 1e9).abs() <= 1e-9 * alg.max(1.0));
        assert!((bus - alg * factor).abs() <= 1e-12 + 1e-9 * bus);
        assert_eq!(cell["wrong"], 0);
    }
    assert_eq!(v["wrong_total"], 0);
    assert!(v["avg_busbw_gbps"]["pg"].as_f64().unwrap() > 0.0);
}

#[test]
fn every_collective_runs_and_checks_on_the_mock() {
    let v = json(&[
        "perf",
        "all",
        "--backend",
        "mock",
        "-g",
        "3",
        "-b",
        "96",
        "-e",
        "96",
        "-n",
        "1",
        "-w",
        "0",
        "-c",
        "1",
        "-d",
        "int32",
        "-o",
        "max",
        "-r",
        "2",
        "--json",
    ]);
    let names: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["collective"].as_str().unwrap())
        .collect();
    assert_eq!(names, common::ALL_COLLECTIVES);
    assert_eq!(v["wrong_total"], 0);
    assert_eq!(v["redop"], "max");
}

#[test]
fn a_wrong_result_exits_1() {
    let o = oxccl(&[
        "perf",
        "--backend",
        "mock",
        "-b",
        "8",
        "-e",
        "16",
        "-n",
        "1",
        "-c",
        "1",
        "--inject-error",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("wrong elements"));
}

#[test]
fn usage_and_environment_errors_have_their_codes() {
    let bad = oxccl(&["perf", "all_reduce", "-d", "float128"]);
    assert_eq!(bad.status.code(), Some(2));
    let inverted = oxccl(&["perf", "--backend", "mock", "-b", "1M", "-e", "8"]);
    assert_eq!(inverted.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&inverted.stderr).contains("-b"));
    let huge = oxccl(&["perf", "--backend", "mock", "-e", "1G"]);
    assert_eq!(huge.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&huge.stderr).contains("256M"));
    let raw = oxccl(&["perf", "--backend", "mock", "--layer", "raw"]);
    assert_eq!(raw.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&raw.stderr).contains("--layer pg"));
    let root = oxccl(&[
        "perf",
        "broadcast",
        "--backend",
        "mock",
        "-g",
        "2",
        "-r",
        "5",
    ]);
    assert_eq!(root.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&root.stderr).contains("-r 5"));
}

#[test]
fn svg_has_one_series_per_layer_and_collective() {
    let dir = std::env::temp_dir().join(format!("oxccl-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("perf.svg");
    let o = oxccl(&[
        "perf",
        "all_reduce",
        "alltoall",
        "--backend",
        "mock",
        "-b",
        "8",
        "-e",
        "4K",
        "-n",
        "1",
        "--svg",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(svg.starts_with("<?xml"));
    assert_eq!(balanced_tags(&svg), Ok(()), "{svg}");
    // Two panels (busbw, latency) × two series (pg all_reduce, pg alltoall).
    assert_eq!(
        svg.matches("<polyline class=\"series\" data-layer=\"pg\"")
            .count(),
        4
    );
    assert_eq!(svg.matches("data-collective=\"all_reduce\"").count(), 2);
    assert!(svg.contains("busbw (GB/s, log)") && svg.contains("latency (us, log)"));
    // 8 B .. 4 KiB is 10 points per series.
    let pts = svg
        .split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert_eq!(pts.split_whitespace().count(), 10);
}

/// Every opened tag closes, in order (a small XML well-formedness check, no parser crate).
fn balanced_tags(s: &str) -> Result<(), String> {
    let mut stack = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').ok_or("unclosed <")?;
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.ends_with('/') {
            continue;
        }
        let name = tag
            .trim_start_matches('/')
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_owned();
        if tag.starts_with('/') {
            if stack.pop() != Some(name.clone()) {
                return Err(format!("</{name}> closes nothing open"));
            }
        } else {
            stack.push(name);
        }
    }
    if stack.is_empty() {
        Ok(())
    } else {
        Err(format!("left open: {stack:?}"))
    }
}

/// -G on the mock: the pg layer captures each timed loop (ProcessGroup::capture) and launches
/// the graph; every collective runs and checks, in both placements where the pg has them.
#[test]
fn graphs_run_every_collective_through_the_pg_capture_on_the_mock() {
    let v = json(&[
        "perf",
        "all",
        "--backend",
        "mock",
        "-g",
        "3",
        "-G",
        "3",
        "-b",
        "96",
        "-e",
        "96",
        "-n",
        "2",
        "-w",
        "1",
        "-c",
        "1",
        "--json",
    ]);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 9, "{v}");
    assert_eq!(v["wrong_total"], 0);
    for r in results {
        assert_eq!(r["layer"], "pg");
        let timed = ["in_place", "out_of_place"]
            .iter()
            .any(|p| r[p]["time_us"].as_f64().is_some_and(|t| t > 0.0));
        assert!(timed, "a timed pg sample: {r}");
    }
}

#[test]
fn ping_pong_on_the_mock_reports_every_size_to_1_mib() {
    let o = oxccl(&["ping-pong", "--backend", "mock", "-n", "2", "-w", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    let rows: Vec<Vec<f64>> = out
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("bytes"))
        .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
        .collect();
    let sizes: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    let want: Vec<f64> = (3..=20).map(|p| f64::from(1u32 << p)).collect();
    assert_eq!(sizes, want, "{out}");
    assert!(
        rows.iter()
            .all(|r| r.len() == 3 && r[1] > 0.0 && r[2] > 0.0),
        "{out}"
    );
    let past = oxccl(&["ping-pong", "--backend", "mock", "-b", "64", "-e", "8"]);
    assert!(!past.status.success());
    assert!(
        String::from_utf8_lossy(&past.stderr).contains("-b 64 is above -e 8"),
        "{}",
        String::from_utf8_lossy(&past.stderr)
    );
}

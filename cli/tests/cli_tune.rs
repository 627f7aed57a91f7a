//! `oxccl tune` and `-R` / `--tuned` on perf's pg layer, on the mock world: the file written
//! is a valid tune table covering every tuned collective from 0 bytes to the end, the process
//! group reads it back, and bad arguments are usage errors naming what to change.

mod common;

use oxccl::core::{DataType, OpKind};
use oxccl::rules::tune::{RegMode, COLLECTIVES};
use std::process::Output;

/// `oxccl perf --backend mock` with `args`.
fn perf(args: &[&str]) -> Output {
    common::oxccl(&[&["perf", "--backend", "mock"], args].concat())
}

/// `oxccl tune --backend mock` with `args`.
fn tune(args: &[&str]) -> Output {
    common::oxccl(&[&["tune", "--backend", "mock"], args].concat())
}

/// `perf(args)`, which must succeed with no wrong element; its stdout.
fn perf_right(args: &[&str]) -> String {
    let o = perf(args);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("# wrong elements: 0"), "{stdout}");
    stdout
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("oxccl-cli-tune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn tune_on_the_mock_writes_a_table_the_group_reads() {
    let out = tmp("all.tune");
    let o = tune(&[
        "all",
        "-b",
        "8",
        "-e",
        "4K",
        "-n",
        "4",
        "--rounds",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("# written to"), "{stdout}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("# oxccl tune on mock world"), "{text}");
    let t = oxccl::pg::load_tune_file(&out).unwrap();
    // Six tuned collectives (gather, scatter, sendrecv are not), each covered from 0 to the
    // end without a gap, with one of the three modes.
    let tuned: Vec<OpKind> = t.rows().iter().filter_map(|r| r.coll).collect();
    for k in [
        OpKind::AllReduce,
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::AllToAll,
    ] {
        assert!(tuned.contains(&k), "{k:?} missing from\n{text}");
        let rows: Vec<_> = t.rows().iter().filter(|r| r.coll == Some(k)).collect();
        assert_eq!(rows[0].min_bytes, 0);
        assert_eq!(rows.last().unwrap().max_bytes, u64::MAX);
        for w in rows.windows(2) {
            assert_eq!(w[0].max_bytes + 1, w[1].min_bytes, "{text}");
            assert_ne!(w[0].mode, w[1].mode, "neighbours of one mode are merged");
        }
    }
    assert!(!tuned.contains(&OpKind::Gather) && !tuned.contains(&OpKind::Send));
    assert!(t.rows().iter().all(|r| r.dtype.is_none()));
    assert!(COLLECTIVES.contains(&OpKind::AllReduce));
    // Every size measured has a comment line with the three modes' times and the choice.
    let measured = text
        .lines()
        .filter(|l| l.starts_with("# all_reduce "))
        .count();
    assert_eq!(measured, 10, "8 B to 4 KiB: 10 sizes\n{text}");
    // The choice written for each measured size is what the table gives for its bytes (an
    // all_reduce of float32 moves its size in bytes).
    for l in text.lines().filter(|l| l.starts_with("# all_reduce ")) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let bytes = parse_human(f[2]);
        let best = RegMode::parse(f[f.len() - 1]).unwrap();
        assert_eq!(
            t.lookup(OpKind::AllReduce, DataType::Float32, bytes),
            best,
            "{l}"
        );
    }
    let _ = std::fs::remove_file(&out);
}

/// "8B", "4KiB", "1MiB" as bytes.
fn parse_human(s: &str) -> u64 {
    for (suffix, unit) in [
        ("KiB", 1u64 << 10),
        ("MiB", 1 << 20),
        ("GiB", 1 << 30),
        ("B", 1),
    ] {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<u64>().unwrap() * unit;
        }
    }
    panic!("size {s}")
}

#[test]
fn tune_refuses_what_it_cannot_measure() {
    let o = tune(&["sendrecv", "gather"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("none of the collectives given is tuned"), "{e}");
    // It measures every mode itself, without graphs: -R and -G are no options of its.
    for flag in ["-R", "-G"] {
        let o = tune(&[flag, "1"]);
        assert_eq!(o.status.code(), Some(2), "{flag}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(flag));
    }
    let o = perf(&["--out", "x.tune"]);
    assert_eq!(o.status.code(), Some(2), "--out is tune's");
}

/// An output path that names a FIFO, a directory or a device, or a file in a folder that
/// does not exist, is refused before anything is measured (a FIFO would block the write for
/// ever; a missing folder would lose the run's result), for tune's `--out` and perf's
/// `--json-out` and `--svg` alike.
#[test]
fn outputs_that_are_no_regular_files_are_refused_at_once() {
    let fifo = tmp("out.fifo");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let dir = tmp("out.dir");
    std::fs::create_dir_all(&dir).unwrap();
    let lost = tmp("no-such-folder").join("table.tune");
    for (path, kind) in [
        (fifo.to_str().unwrap(), "special file"),
        (dir.to_str().unwrap(), "directory"),
        ("/dev/null", "special file"),
        (lost.to_str().unwrap(), "does not exist"),
    ] {
        let began = std::time::Instant::now();
        let o = tune(&["-e", "64", "--out", path]);
        assert_eq!(o.status.code(), Some(2), "--out {path}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("--out") && e.contains(kind), "{e}");
        assert!(o.stdout.is_empty(), "nothing measured before the refusal");
        for flag in ["--json-out", "--svg"] {
            let o = perf(&["-e", "64", flag, path]);
            assert_eq!(o.status.code(), Some(2), "{flag} {path}");
            let e = String::from_utf8_lossy(&o.stderr);
            assert!(e.contains(flag) && e.contains(kind), "{e}");
        }
        assert!(began.elapsed() < std::time::Duration::from_secs(30));
    }
    let _ = std::fs::remove_file(&fifo);
}

#[test]
fn r_on_the_pg_layer_runs_and_checks_on_the_mock() {
    for r in ["1", "2"] {
        let stdout = perf_right(&[
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "-b",
            "8",
            "-e",
            "1K",
            "-n",
            "2",
            "-R",
            r,
        ]);
        assert!(!stdout.contains("N/A     0"), "{stdout}");
    }
    // A wrong result is still caught through CommBuf buffers.
    let o = perf(&["-e", "64", "-R", "2", "--inject-error"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn tuned_runs_the_pg_layer_under_a_written_table() {
    let out = tmp("for-tuned.tune");
    std::fs::write(
        &out,
        "oxccl-tune 1\nall_reduce * 0 64 window\nall_reduce * 65 max registered\n",
    )
    .unwrap();
    perf_right(&[
        "all_reduce",
        "-b",
        "8",
        "-e",
        "1K",
        "-n",
        "2",
        "--tuned",
        out.to_str().unwrap(),
    ]);
    // A bad table is a usage error naming the line and field; -R with --tuned is refused.
    std::fs::write(&out, "oxccl-tune 1\nall_reduce * 0 64 fastest\n").unwrap();
    let o = perf(&["--tuned", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("line 2, field `mode`"), "{e}");
    let o = perf(&["-R", "1", "--tuned", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_file(&out);
}

/// -R with -G on the pg layer (the mock world): each arm runs the operation once (the table
/// registers the buffers or makes their windows), then captures the timed loop; every tuned
/// collective checks with 0 wrong, and a wrong result is still caught through the graphs.
#[test]
fn registration_with_graphs_runs_the_pg_layer_on_the_mock() {
    for r in ["1", "2"] {
        let stdout = perf_right(&[
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "broadcast",
            "alltoall",
            "-b",
            "8",
            "-e",
            "4K",
            "-n",
            "3",
            "-G",
            "4",
            "-R",
            r,
            "--layer",
            "all",
        ]);
        assert!(stdout.contains("      pg  alltoall"), "{stdout}");
    }
    let o = perf(&["-e", "64", "-G", "2", "-R", "2", "--inject-error"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn tune_json_is_one_object_with_the_points_and_the_table() {
    let out = tmp("json.tune");
    let o = tune(&[
        "all_reduce",
        "-b",
        "8",
        "-e",
        "64",
        "-n",
        "2",
        "--rounds",
        "1",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert!(
        v["measured"].as_str().unwrap().contains("mock world"),
        "{v}"
    );
    assert_eq!(v["written_to"], out.to_str().unwrap());
    let points = v["points"].as_array().unwrap();
    // 8, 16, 32 and 64 bytes, each timed in the three modes, the best one named.
    assert_eq!(points.len(), 4, "{v}");
    for p in points {
        assert_eq!(p["collective"], "all_reduce");
        for m in ["plain_us", "registered_us", "window_us"] {
            assert!(p[m].as_f64().unwrap() > 0.0, "{p}");
        }
        assert!(["plain", "registered", "window"].contains(&p["best"].as_str().unwrap()));
    }
    // The table in the JSON is the file's table.
    let t = oxccl::pg::load_tune_file(&out).unwrap();
    let rows = v["table"].as_array().unwrap();
    assert_eq!(rows.len(), t.rows().len());
    for (j, r) in rows.iter().zip(t.rows()) {
        assert_eq!(j["mode"], r.mode.name());
        assert_eq!(j["min_bytes"], r.min_bytes);
        assert_eq!(j["max_bytes"], r.max_bytes);
    }
}

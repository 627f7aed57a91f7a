//! `oxccl trace` end to end: rings filled as the process group fills them, dumped per rank
//! with the writer into a directory, read back and analyzed; and the CLI's exit codes.

use oxccl::core::op::OpKind;
use oxccl::recorder::reader::{
    analyze, read_dump_dir, render_text, report_json, Culprit, MismatchKind, Reason,
};
use oxccl::recorder::{write_dump, DumpMeta};
use oxccl::rules::recorder::{
    profiling_name, FlightRecorder, PgConfig, TensorMeta, TraceRecord, TraceState,
};
use oxccl::DataType;
use std::path::{Path, PathBuf};
use std::process::Command;
use TraceState::{Completed as Done, Scheduled as Sched, Started};

const WORLD: u32 = 64;

/// A collective as one rank issued it, and the last state its events showed.
#[derive(Clone, Copy)]
struct Op(OpKind, &'static [u64], DataType, TraceState);

/// `rank`'s ring after `ops` on the default group: collective seqs from 1, one op id each,
/// completed works retired (what the watchdog does).
fn ring(rank: u32, ops: &[Op]) -> FlightRecorder {
    let mut r = FlightRecorder::new(2000);
    r.add_pg(PgConfig {
        id: 0,
        name: "0".into(),
        desc: "default_pg".into(),
        ranks: (0..WORLD).collect(),
    });
    for (i, &Op(kind, sizes, dtype, state)) in ops.iter().enumerate() {
        let seq = i as u64 + 1;
        let t = TensorMeta::new(sizes, dtype);
        let id = r
            .record(TraceRecord {
                pg_id: 0,
                collective_seq: seq,
                p2p_seq: 0,
                op_id: seq,
                profiling_name: profiling_name(kind, rank, None),
                inputs: vec![t.clone()],
                outputs: vec![t],
                time_created_ns: seq * 1_000_000,
                timeout_ms: 1000,
                is_p2p: false,
                timing: false,
            })
            .unwrap();
        if state >= Started {
            r.update_state(id, Started, seq * 1_000_000 + 10);
        }
        if state == Done {
            r.update_state(id, Done, seq * 1_000_000 + 20);
            r.retire(id);
        }
    }
    r
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxccl-trace-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Dumps `ranks` (rank, ops) into `dir`.
fn dump_all(dir: &Path, ranks: impl IntoIterator<Item = (u32, Vec<Op>)>) {
    for (rank, ops) in ranks {
        write_dump(dir, &DumpMeta::new(rank, WORLD), &ring(rank, &ops), false).unwrap();
    }
}

/// The healthy program: 10 collectives; the stuck point's state depends on the scenario.
fn program() -> Vec<(OpKind, &'static [u64])> {
    use OpKind::*;
    vec![
        (AllReduce, &[1024]),
        (AllReduce, &[1024]),
        (AllGather, &[256]),
        (AllReduce, &[1024]),
        (AllReduce, &[1024]),
        (Broadcast, &[64]),
        (AllReduce, &[1024]),
        (AllGather, &[256]),
        (AllReduce, &[1024]),
        (AllReduce, &[1024]),
    ]
}

/// `ops` with the ones before `stuck` (0-based) completed, `stuck` started, the rest scheduled.
fn with_states(ops: &[(OpKind, &'static [u64])], stuck: usize) -> Vec<Op> {
    ops.iter()
        .enumerate()
        .map(|(i, &(k, s))| {
            let st = match i.cmp(&stuck) {
                std::cmp::Ordering::Less => Done,
                std::cmp::Ordering::Equal => Started,
                std::cmp::Ordering::Greater => Sched,
            };
            Op(k, s, DataType::Float32, st)
        })
        .collect()
}

/// The exit code of `oxccl trace DIR` (with `--json`).
fn run_cli(dir: &Path, json: bool) -> Option<i32> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl"));
    cmd.arg("trace").arg(dir);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("oxccl runs").status.code()
}

// 64 ranks; rank 17 skips the all_reduce at seq 5, so its seq 5 is the broadcast the others
// issue at seq 6: everyone hangs at seq 5 and the op there differs on rank 17 alone.
#[test]
fn rank_64_skipping_an_all_reduce_is_found_by_the_mismatch() {
    let dir = tmp_dir("skip64");
    let healthy = program();
    let mut skipped = healthy.clone();
    skipped.remove(4);
    dump_all(
        &dir,
        (0..WORLD).map(|r| {
            let ops = if r == 17 { &skipped } else { &healthy };
            (r, with_states(ops, 4))
        }),
    );
    let read = read_dump_dir(&dir).unwrap();
    assert!(read.unreadable.is_empty(), "{:?}", read.unreadable);
    assert_eq!(read.dumps.len(), 64);
    let a = analyze(&read.dumps);
    assert_eq!((a.world_size, a.missing.len()), (Some(64), 0));
    let g = &a.groups[0];
    assert_eq!(g.hang_seq, Some(5));
    assert_eq!(
        a.culprits,
        vec![Culprit {
            rank: 17,
            pg: "0".into(),
            reason: Reason::Mismatch {
                seq: 5,
                kind: MismatchKind::Op
            }
        }]
    );
    let first = &g.mismatches[0];
    assert_eq!(
        (first.found.op.as_str(), first.expected.op.as_str()),
        ("nccl:broadcast", "nccl:all_reduce")
    );
    assert_eq!(first.expected.input_sizes, vec![vec![1024]]);
    // Every later mismatch is rank 17's too (the shift).
    assert!(g.mismatches.iter().all(|m| m.rank == 17));
    let text = render_text(&a);
    assert!(
        text.contains("stopped: ranks 0-16, 18-63 at seq 5 nccl:all_reduce"),
        "{text}"
    );
    assert!(
        text.contains("rank 17: issued a different op at collective seq 5"),
        "{text}"
    );
    let v = report_json(&a);
    assert_eq!(v["culprits"][0]["rank"], 17);
    assert_eq!(v["culprits"][0]["reason"], "mismatch");
    assert_eq!(run_cli(&dir, false), Some(1));
    assert_eq!(run_cli(&dir, true), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}

// 64 ranks, all_reduces only: rank 17 skips one, so NCCL pairs its ops with the others' next
// ones; all complete until the others' last, which rank 17 never issues.
#[test]
fn rank_64_skipping_one_of_identical_all_reduces_never_issues_the_last() {
    let dir = tmp_dir("skip64same");
    let healthy: Vec<(OpKind, &'static [u64])> = vec![(OpKind::AllReduce, &[1024]); 10];
    let skipped = &healthy[..9];
    dump_all(
        &dir,
        (0..WORLD).map(|r| {
            if r == 17 {
                (r, with_states(skipped, 9))
            } else {
                (r, with_states(&healthy, 9))
            }
        }),
    );
    let a = analyze(&read_dump_dir(&dir).unwrap().dumps);
    assert_eq!(a.groups[0].hang_seq, Some(10));
    assert!(a.groups[0].mismatches.is_empty());
    assert_eq!(
        a.culprits,
        vec![Culprit {
            rank: 17,
            pg: "0".into(),
            reason: Reason::NeverIssued {
                seq: 10,
                op: "nccl:all_reduce".into(),
                last_enqueued: Some(9)
            }
        }]
    );
    assert!(render_text(&a).contains("rank 17: never issued collective seq 10"));
    assert_eq!(run_cli(&dir, false), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rank_that_never_dumped_is_named_from_the_world_size() {
    let dir = tmp_dir("nodump");
    let ops = program();
    dump_all(
        &dir,
        (0..WORLD)
            .filter(|&r| r != 40)
            .map(|r| (r, with_states(&ops, 2))),
    );
    let a = analyze(&read_dump_dir(&dir).unwrap().dumps);
    assert_eq!(a.missing, vec![40]);
    assert_eq!(
        a.culprits,
        vec![Culprit {
            rank: 40,
            pg: "0".into(),
            reason: Reason::NoDump
        }]
    );
    assert!(render_text(&a).contains("never dumped: rank 40"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mismatched_size_and_dtype_at_one_seq_through_files() {
    let dir = tmp_dir("mismatch");
    let ops = with_states(&program(), 3);
    dump_all(
        &dir,
        (0..WORLD).map(|r| {
            let mut mine = ops.clone();
            if r == 5 {
                mine[3].2 = DataType::Bfloat16;
            }
            if r == 6 {
                mine[3].1 = &[1000];
            }
            (r, mine)
        }),
    );
    let a = analyze(&read_dump_dir(&dir).unwrap().dumps);
    let m: Vec<(u32, u64, MismatchKind)> = a.groups[0]
        .mismatches
        .iter()
        .map(|m| (m.rank, m.seq, m.kind))
        .collect();
    assert_eq!(
        m,
        vec![(5, 4, MismatchKind::Dtype), (6, 4, MismatchKind::Size)]
    );
    assert_eq!(
        a.groups[0].mismatches[0].found.input_dtypes,
        vec!["BFloat16"]
    );
    let ranks: Vec<u32> = a.culprits.iter().map(|c| c.rank).collect();
    assert_eq!(ranks, vec![5, 6]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cli_exit_codes() {
    // No hang: everything completed.
    let dir = tmp_dir("clean");
    let ops = with_states(&program(), 10);
    dump_all(&dir, (0..WORLD).map(|r| (r, ops.clone())));
    assert_eq!(run_cli(&dir, false), Some(0));
    // An unreadable dump: 2.
    std::fs::write(dir.join("rank_99.json"), b"{ not json").unwrap();
    assert_eq!(run_cli(&dir, true), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
    // No directory, or no dumps in it: 2.
    assert_eq!(run_cli(&dir, false), Some(2));
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(run_cli(&dir, false), Some(2));
    // --request creates the trigger file.
    let req = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .arg("trace")
        .arg(&dir)
        .arg("--request")
        .output()
        .expect("oxccl runs");
    assert_eq!(req.status.code(), Some(0));
    assert!(dir.join(oxccl::recorder::DUMP_REQUEST_FILE).is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_folder_without_dumps_says_how_a_job_writes_them() {
    let dir = tmp_dir("empty");
    std::fs::create_dir_all(&dir).unwrap();
    let run = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl"));
        cmd.arg("trace").arg(&dir);
        if json {
            cmd.arg("--json");
        }
        cmd.output().expect("oxccl runs")
    };
    for json in [false, true] {
        let o = run(json);
        assert_eq!(o.status.code(), Some(2));
        assert!(o.stdout.is_empty());
        let err = String::from_utf8_lossy(&o.stderr);
        let shown = dir.display();
        // The variables a job's ranks need, with this folder, and the request for running ones.
        for want in [
            "no readable dump (rank_<r>.json)".to_owned(),
            format!("{}={shown}", oxccl::recorder::TRACE_DIR_VAR),
            format!("{}=1", oxccl::rules::env::DUMP_ON_TIMEOUT),
            format!("oxccl trace {shown} --request"),
            format!("{}=0", oxccl::rules::env::TRACE_BUFFER_SIZE),
        ] {
            assert!(err.contains(&want), "{want} missing: {err}");
        }
    }
    // A folder whose dumps are there but unreadable needs no such word: it names them.
    std::fs::write(dir.join("rank_0.json"), b"{ not json").unwrap();
    let o = run(false);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unreadable dump"), "{err}");
    assert!(!err.contains("OXCCL_DUMP_ON_TIMEOUT"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

//! PyTorch's own analyzer (`torchfrtrace`, torch.distributed.flight_recorder.fr_trace) reads
//! oxccl's dumps of a hang and names the rank at fault. Needs the venv of
//! `scripts/torch-env.sh` (skipped with a message without it; a failure when `CI` is set).

use oxccl::core::op::OpKind;
use oxccl::recorder::{write_dump, DumpMeta};
use oxccl::rules::recorder::{
    profiling_name, FlightRecorder, PgConfig, TensorMeta, TraceRecord, TraceState,
};
use oxccl::DataType;
use std::path::{Path, PathBuf};
use std::process::Command;

mod torch_env;

use torch_env::python;

const WORLD: u32 = 4;

/// `rank`'s ring: all_reduces of `sizes[i]` (seq i+1), the first `done` completed and retired,
/// the next one started, as the process group records them with timing on.
fn ring(rank: u32, sizes: &[&[u64]], done: usize) -> FlightRecorder {
    let mut r = FlightRecorder::new(2000);
    r.add_pg(PgConfig {
        id: 0,
        name: "0".into(),
        desc: "default_pg".into(),
        ranks: (0..WORLD).collect(),
    });
    for (i, s) in sizes.iter().enumerate() {
        let seq = i as u64 + 1;
        let t = TensorMeta::new(s, DataType::Float32);
        let id = r
            .record(TraceRecord {
                pg_id: 0,
                collective_seq: seq,
                p2p_seq: 0,
                op_id: seq,
                profiling_name: profiling_name(OpKind::AllReduce, rank, None),
                inputs: vec![t.clone()],
                outputs: vec![t],
                time_created_ns: seq * 1_000_000,
                timeout_ms: 1000,
                is_p2p: false,
                timing: true,
            })
            .unwrap();
        if i <= done {
            r.update_state(id, TraceState::Started, seq * 1_000_000 + 1);
        }
        if i < done {
            r.update_state(id, TraceState::Completed, seq * 1_000_000 + 2);
            r.set_duration(id, 1_500_000);
            r.retire(id);
        }
    }
    r
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxccl-frtrace-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs PyTorch's analyzer on `dir`; its combined output (it logs to stderr).
fn fr_trace(py: &Path, dir: &Path, extra: &[&str]) -> String {
    let out = Command::new(py)
        .args(["-m", "torch.distributed.flight_recorder.fr_trace"])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "fr_trace failed:\n{text}");
    text
}

const THREE: [&[u64]; 3] = [&[3, 4], &[3, 4], &[3, 4]];

// Ranks 0, 1, 3 stuck in their third all_reduce; rank 2 completed two and never issued it.
#[test]
fn torchfrtrace_names_the_rank_that_never_joined() {
    let Some(py) = python() else { return };
    let dir = tmp_dir("hang");
    for rank in 0..WORLD {
        let r = if rank == 2 {
            ring(rank, &THREE[..2], 2)
        } else {
            ring(rank, &THREE, 2)
        };
        write_dump(&dir, &DumpMeta::new(rank, WORLD), &r, false).unwrap();
    }
    let out = fr_trace(&py, &dir, &[]);
    assert!(
        out.contains("Not all ranks joining collective, sequence number: 3"),
        "{out}"
    );
    assert!(out.contains("missing ranks: {2}"), "{out}");
    assert!(out.contains("collective: nccl:all_reduce"), "{out}");
    assert!(out.contains("collective state: started"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

// Rank 1 all_reduces another size at seq 2: the analyzer reports the size mismatch.
#[test]
fn torchfrtrace_reports_a_size_mismatch() {
    let Some(py) = python() else { return };
    let dir = tmp_dir("size");
    for rank in 0..WORLD {
        let sizes: [&[u64]; 2] = if rank == 1 {
            [&[3, 4], &[3, 5]]
        } else {
            [&[3, 4], &[3, 4]]
        };
        write_dump(
            &dir,
            &DumpMeta::new(rank, WORLD),
            &ring(rank, &sizes, 1),
            false,
        )
        .unwrap();
    }
    let out = fr_trace(&py, &dir, &[]);
    assert!(
        out.contains("Collective sequence number: 2 has errors"),
        "{out}"
    );
    assert!(out.contains("SIZE_OR_SYNTAX_MISMATCH"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

// Seed 30's end: the peer died without a dump; with --allow-incomplete-ranks the analyzer
// names the rank whose dump is missing.
#[test]
fn torchfrtrace_names_a_rank_without_dump() {
    let Some(py) = python() else { return };
    let dir = tmp_dir("nodump");
    for rank in [0, 1, 3] {
        write_dump(
            &dir,
            &DumpMeta::new(rank, WORLD),
            &ring(rank, &THREE, 2),
            false,
        )
        .unwrap();
    }
    let out = fr_trace(&py, &dir, &["--allow-incomplete-ranks"]);
    assert!(out.contains("missed FR dumps from ranks ({2})"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

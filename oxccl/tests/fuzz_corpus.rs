//! Replays every fuzz target's kept corpus (`fuzz/corpus/<target>/`) and every input that
//! ever crashed one (`fuzz/regressions/<target>/`) through the target's body, so `cargo test`
//! exercises the fuzz targets and their reference models without cargo-fuzz.

use std::path::Path;

/// Runs `body` over every file under `dir` (missing: none), returning how many ran.
fn replay(dir: &Path, body: fn(&[u8])) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    let mut files: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    files.sort();
    for path in files.iter().filter(|p| p.is_file()) {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.display().to_string();
        if std::env::var_os("OXCCL_FUZZ_VERBOSE").is_some() {
            eprintln!("replaying {name}");
        }
        if std::panic::catch_unwind(|| body(&data)).is_err() {
            panic!("fuzz input {name} fails");
        }
        n += 1;
    }
    n
}

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

#[test]
fn every_target_replays_its_corpus_and_regressions() {
    // OXCCL_FUZZ_TARGET=name replays one target only.
    let only = std::env::var("OXCCL_FUZZ_TARGET").ok();
    for (name, body) in oxccl_fuzz_bodies::TARGETS {
        if only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        let corpus = replay(&root().join("fuzz/corpus").join(name), *body);
        let crashes = replay(&root().join("fuzz/regressions").join(name), *body);
        // Plus a few fixed inputs, so an empty corpus still runs the body.
        for data in [
            &b""[..],
            &[0u8; 64],
            &[0xFFu8; 64],
            b"\x01\x02\x03\x04\x05\x06\x07",
        ] {
            body(data);
        }
        eprintln!("{name}: {corpus} corpus inputs, {crashes} regressions");
        assert!(corpus > 0, "{name}: no corpus under fuzz/corpus/{name}");
    }
}

/// Regression: a mismatch inside a coalescing block on the mock let a rank see its error and
/// free its buffers while a peer could still run the block's next collective with them (heap
/// corruption in about one replay of the pg corpus in four). Replays it several times. The
/// same with point-to-point in the block: a rank failed by the block's mismatched collective
/// still took its message and wrote it into a buffer its user had freed (about two replays in
/// three once `pg` drove shifts; the mock's recv now checks and copies under the lock that
/// marks ranks dead).
#[test]
fn the_pg_corpus_replays_repeatedly_without_heap_corruption() {
    let dir = root().join("fuzz/corpus/pg");
    for _ in 0..4 {
        assert!(replay(&dir, oxccl_fuzz_bodies::pg::fuzz) > 0);
    }
}

/// Regression (found by `comm_life`): a planned failure at issue while the rank's previous
/// collective still waited for a peer lost its cause about one time in two: `fail` marks the
/// rank dead before recording its error, the mark woke the waiting collective, and the stream
/// recorded "operation abandoned" (a remote error) first. The planned error must be the one
/// `poll` and `reason` report, every time.
#[test]
fn a_planned_failure_stays_the_first_cause_while_a_collective_waits() {
    use oxccl_core::{CommAbort, CommOp, Communicator, DataType, Error, RawBuf, RawBufMut};
    use oxccl_core::{ReduceOp, ResultCode};
    use oxccl_mock::{FaultPlan, MockStream, World};
    for i in 0..1000 {
        let plan = FaultPlan::new().fail_op(0, 1, ResultCode::INTERNAL_ERROR);
        let comms = World::builder(3).faults(plan).build().expect("world");
        let stream = MockStream::new().expect("stream");
        let send = Box::new([1.0f32; 4]);
        let mut recv = Box::new([0.0f32; 4]);
        let op = CommOp::AllReduce {
            send: RawBuf::new(send.as_ptr() as usize, 4),
            recv: RawBufMut::new(recv.as_mut_ptr() as usize, 4),
            dtype: DataType::Float32,
            op: ReduceOp::Sum,
        };
        // SAFETY: the buffers outlive the stream's work: it drains below before they drop.
        unsafe {
            // Op 0 waits for rank 1, which never joins; op 1 fails at issue, as planned.
            comms[0].issue(&op, &stream).expect("op 0");
            let e = comms[0]
                .issue(&op, &stream)
                .expect_err("op 1 is planned to fail");
            assert_eq!(e.code(), Some(ResultCode::INTERNAL_ERROR));
        }
        while !stream.query() {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        let reason = comms[0].reason();
        assert!(
            reason.contains("failed by the fault plan"),
            "run {i}: the first cause was lost: `{reason}`"
        );
        let polled = comms[0].abort_handle().poll();
        assert!(
            matches!(&polled, Err(Error::Backend { code, .. }) if *code == ResultCode::INTERNAL_ERROR),
            "run {i}: poll reports {polled:?}"
        );
        drop(comms);
        drop(stream);
        drop((send, recv));
    }
}

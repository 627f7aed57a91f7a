//! Replays every fuzz target's kept corpus (`fuzz/corpus/<target>/`) and every input that
//! ever crashed one (`fuzz/regressions/<target>/`) through the target's body, so `cargo test`
//! exercises the fuzz targets and their reference models without cargo-fuzz.

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod bodies;

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
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_target_replays_its_corpus_and_regressions() {
    // OXCCL_FUZZ_TARGET=name replays one target only.
    let only = std::env::var("OXCCL_FUZZ_TARGET").ok();
    for (name, body) in bodies::TARGETS {
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
/// corruption in about one replay of the pg corpus in four). Replays it several times.
#[test]
fn the_pg_corpus_replays_repeatedly_without_heap_corruption() {
    let dir = root().join("fuzz/corpus/pg");
    for _ in 0..4 {
        assert!(replay(&dir, bodies::pg::fuzz) > 0);
    }
}

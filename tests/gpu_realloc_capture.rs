//! NCCL memory the process group registered (or put in a window), captured into a graph,
//! dropped with the graph and allocated again, round after round: `ncclMemAlloc` tends to
//! hand back the addresses just freed, and NCCL registers captured buffers by itself
//! (`NCCL_GRAPH_REGISTER`), so a registration outliving its memory would be found again at
//! the reused address and move the wrong data. `oxccl perf`'s raw and comm layers met wrong
//! results that way at `-R 1 -G` (docs/BENCHMARKS.md); the group's `NcclBuf` keeps its
//! memory until every registration and graph is gone, and this test holds it to that. Runs
//! when `OXCCL_TEST_GPUS` is 2 or more and skips, saying so, otherwise.

mod common;

use oxccl::pg::{PgOptions, ProcessGroup, RegMode, TuneTable};
use oxccl::store::{MemStore, Store};
use oxccl::{Device, ReduceOp};
use std::sync::Arc;

/// Elements per buffer: 4 MiB of f32.
const N: usize = 1 << 20;
const ROUNDS: usize = 6;
const LAUNCHES: u32 = 3;

/// One rank: per round a fresh buffer of rank+1, an eager all_reduce (sum: 3), a graph of
/// one all_reduce launched `LAUNCHES` times (doubling each time), the values read back,
/// then graph and buffer dropped. Returns the buffer addresses seen, by round.
fn rank(lib: oxccl::Nccl, store: Arc<dyn Store>, r: u32, mode: RegMode) -> Vec<usize> {
    let opts = PgOptions {
        bound_device: Some(Device(r)),
        tune: Some(Arc::new(TuneTable::uniform(mode))),
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(lib, store, r, 2, opts).expect("process group");
    let mut addrs = Vec::new();
    for round in 0..ROUNDS {
        let mut a = pg.upload_comm(&vec![r as f32 + 1.0; N]).expect("upload");
        addrs.push(a.addr());
        // Eager first: the table registers the buffer (or makes its window) outside the
        // capture, and NCCL connects the peers.
        pg.all_reduce(&mut a, ReduceOp::Sum)
            .and_then(|w| w.wait())
            .expect("eager all_reduce");
        let graph = pg
            .capture(|pg| pg.all_reduce(&mut a, ReduceOp::Sum).map(drop))
            .expect("capture");
        let mut last = None;
        for _ in 0..LAUNCHES {
            last = Some(graph.launch(&mut [&mut a]).expect("launch"));
        }
        last.expect("a launch").wait().expect("wait");
        let got = pg.download_any(&a).expect("download");
        let want = 3.0 * f32::powi(2.0, LAUNCHES as i32);
        let wrong = got.iter().filter(|&&x| x != want).count();
        assert_eq!(
            wrong,
            0,
            "rank {r}, {mode:?}, round {round}: {wrong} of {N} wrong (want {want}, got e.g. {:?})",
            got.iter().find(|&&x| x != want)
        );
        drop(graph);
        drop(a);
        // Let the group let go of the dropped buffer, so its memory is freed before the next
        // round allocates: a window by the collective release, a local registration by the
        // sweep the next operation runs (here a one-element all_reduce on other memory).
        if mode == RegMode::Window {
            pg.release_windows().expect("release_windows");
        } else {
            let mut scratch = pg.upload(&[0.0f32]).expect("upload");
            pg.all_reduce(&mut scratch, ReduceOp::Sum)
                .and_then(|w| w.wait())
                .expect("scratch all_reduce");
        }
    }
    pg.destroy();
    addrs
}

#[test]
fn gpu_registered_memory_captured_freed_and_reallocated_stays_right() {
    let Some(lib) = common::nccl_with_windows(2) else {
        return;
    };
    let mut said = Vec::new();
    for mode in [RegMode::Registered, RegMode::Window] {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let addrs: Vec<Vec<usize>> = std::thread::scope(|s| {
            let ranks: Vec<_> = (0..2u32)
                .map(|r| {
                    let (lib, store) = (lib.clone(), store.clone());
                    s.spawn(move || rank(lib, store, r, mode))
                })
                .collect();
            ranks.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // How often an address came back (what makes the test mean something).
        let reused = addrs[0].windows(2).filter(|w| w[0] == w[1]).count();
        said.push(format!(
            "{mode:?}: {ROUNDS} rounds right, rank 0's address reused in {reused} of {}",
            ROUNDS - 1
        ));
    }
    println!("RESULT {}", said.join("; "));
}

//! NCCL memory the process group registered (or put in a window), captured into a graph, dropped
//! with the graph and allocated again, round after round: `ncclMemAlloc` tends to hand back the
//! addresses just freed, and NCCL registers captured buffers by itself (`NCCL_GRAPH_REGISTER`), so
//! a registration outliving its memory would be found again at the reused address and move the
//! wrong data (docs/BENCHMARKS.md#buffer-modes-and-the-tune-table), as it does at `-R 1 -G`
//! on memory freed per case; the group's `NcclBuf` keeps its memory
//! until every registration and graph is gone, and this test holds it to that, on an in-place
//! all_reduce of one size, on out-of-place all_gathers of changing sizes whose buffers are
//! allocated in alternating order (a freed address comes back in another role and size, as in
//! `oxccl perf`'s sweep), and on broadcasts and send/recv pairs of changing sizes. Freed at drop,
//! NCCL memory makes a captured broadcast of a registered buffer deliver nothing in a later round
//! (NCCL 2.28.9), so `NcclMem` keeps the memory it lets go for the next allocation of its size;
//! handed back even so, memory that captured operations used can hang a later all_gather (NCCL
//! 2.28.3 and 2.28.9, not with `NCCL_GRAPH_REGISTER=0`), so an operation issued inside a capture
//! marks its memory, which is kept but never handed out again. Prints each round and step to
//! stderr, so a run cut short says where it was. Runs
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
/// then graph and buffer dropped, and an all_gather round ([`gather_round`]). Returns the
/// addresses of every buffer allocated, in order.
fn rank(lib: oxccl::Nccl, store: Arc<dyn Store>, r: u32, mode: RegMode) -> Vec<usize> {
    let opts = PgOptions {
        bound_device: Some(Device(r)),
        tune: Some(Arc::new(TuneTable::uniform(mode))),
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(lib, store, r, 2, opts).expect("process group");
    let mut addrs = Vec::new();
    for round in 0..ROUNDS {
        eprintln!("rank {r}, {mode:?}: round {round}");
        let mut a = pg.upload_comm(&vec![r as f32 + 1.0; N]).expect("upload");
        addrs.push(a.addr());
        eprintln!(
            "rank {r}, {mode:?}, round {round}: all_reduce at {:#x}",
            a.addr()
        );
        // Eager first: the table registers the buffer (or makes its window) outside the
        // capture, and NCCL connects the peers.
        pg.all_reduce(&mut a, ReduceOp::Sum)
            .and_then(|w| w.wait())
            .expect("eager all_reduce");
        eprintln!("rank {r}, {mode:?}, round {round}: all_reduce capturing");
        let graph = pg
            .capture(|pg| pg.all_reduce(&mut a, ReduceOp::Sum).map(drop))
            .expect("capture");
        let mut last = None;
        for _ in 0..LAUNCHES {
            last = Some(graph.replay(&mut [&mut a]).expect("launch"));
        }
        eprintln!("rank {r}, {mode:?}, round {round}: all_reduce launched");
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
        addrs.extend(gather_round(&pg, r, mode, round));
        addrs.extend(rooted_round(&pg, r, mode, round));
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

/// Sizes (elements per rank) of the all_gather rounds: growing and shrinking, so a freed
/// address comes back for a buffer of another size or role.
const GATHER: [usize; 6] = [1 << 19, 1 << 22, 1 << 20, 1 << 22, 1 << 18, 1 << 21];

/// An out-of-place all_gather of this round's size: eager into one output (registering the
/// buffers as the table says), then captured into a fresh, zeroed output registered
/// beforehand, launched and checked; buffers allocated in alternating order (addresses swap
/// roles and sizes from round to round), then dropped.
fn gather_round(pg: &ProcessGroup<oxccl::Nccl>, r: u32, mode: RegMode, round: usize) -> [usize; 3] {
    let n = GATHER[round % GATHER.len()];
    eprintln!("rank {r}, {mode:?}, round {round}: all_gather ({n} per rank)");
    let mine = vec![r as f32 + 1.0; n];
    let (mut send, mut first) = if round.is_multiple_of(2) {
        let s = pg.upload_comm(&mine).expect("upload");
        (s, pg.alloc_comm::<f32>(2 * n).expect("alloc"))
    } else {
        let f = pg.alloc_comm::<f32>(2 * n).expect("alloc");
        (pg.upload_comm(&mine).expect("upload"), f)
    };
    pg.all_gather(&send, &mut first)
        .and_then(|w| w.wait())
        .expect("eager all_gather");
    eprintln!("rank {r}, {mode:?}, round {round}: all_gather capturing");
    let mut recv = pg.alloc_comm::<f32>(2 * n).expect("alloc");
    pg.register_buffer(&recv, mode).expect("register recv");
    let graph = pg
        .capture(|pg| pg.all_gather(&send, &mut recv).map(drop))
        .expect("capture all_gather");
    let mut last = None;
    for _ in 0..LAUNCHES {
        last = Some(graph.replay(&mut [&mut send, &mut recv]).expect("launch"));
    }
    last.expect("a launch").wait().expect("wait");
    eprintln!("rank {r}, {mode:?}, round {round}: all_gather beside the graph");
    // Eager again while the graph (which holds NCCL's own registration of these buffers)
    // still lives, into the first output, zeroed first so this run's result is what is read.
    first = pg.alloc_comm::<f32>(2 * n).expect("alloc");
    pg.all_gather(&send, &mut first)
        .and_then(|w| w.wait())
        .expect("eager all_gather beside the graph");
    for (what, buf) in [("eager beside the graph", &first), ("graph", &recv)] {
        let got = pg.download_any(buf).expect("download");
        let wrong = got
            .iter()
            .enumerate()
            .filter(|&(i, &x)| x != (i / n) as f32 + 1.0)
            .count();
        assert_eq!(
            wrong,
            0,
            "rank {r}, {mode:?}, gather round {round} ({n} per rank, {what}): {wrong} of {} wrong",
            2 * n
        );
    }
    drop(graph);
    [send.addr(), first.addr(), recv.addr()]
}

/// Every element of `buf` is `want` (a broadcast's or a receive's result), else the test
/// fails naming `what`.
fn expect_all(
    pg: &ProcessGroup<oxccl::Nccl>,
    buf: &oxccl::buffer::NcclBuf<f32>,
    want: f32,
    what: &str,
) {
    let got = pg.download_any(buf).expect("download");
    let wrong = got.iter().filter(|&&x| x != want).count();
    assert_eq!(
        wrong,
        0,
        "{what}: {wrong} of {} wrong (want {want}, got e.g. {:?})",
        got.len(),
        got.iter().find(|&&x| x != want)
    );
}

/// An in-place broadcast from rank 0, then a send from rank 0 to rank 1, each eager and then
/// captured on a fresh buffer registered beforehand, launched and checked; the size changes
/// from round to round and everything is dropped after, so the memory comes back at other
/// roles and sizes (with windows, `oxccl perf`'s raw layer, which freed and allocated its
/// buffers per case, met wrong broadcast and sendrecv results that way).
fn rooted_round(pg: &ProcessGroup<oxccl::Nccl>, r: u32, mode: RegMode, round: usize) -> [usize; 4] {
    let n = GATHER[(round + 3) % GATHER.len()];
    let v = (round + 1) as f32;
    let from_root = |x: f32| {
        if r == 0 {
            pg.upload_comm(&vec![x; n])
        } else {
            pg.alloc_comm::<f32>(n)
        }
        .expect("buffer")
    };
    let at = format!("rank {r}, {mode:?}, round {round} ({n} elements)");
    let step = |what: &str| eprintln!("{at}: {what}");
    step("broadcast");
    let mut b = from_root(v);
    pg.broadcast(&mut b, 0)
        .and_then(|w| w.wait())
        .expect("eager broadcast");
    expect_all(pg, &b, v, &format!("{at}, eager broadcast"));
    let mut c = from_root(v + 100.0);
    pg.register_buffer(&c, mode).expect("register");
    let graph = pg
        .capture(|pg| pg.broadcast(&mut c, 0).map(drop))
        .expect("capture broadcast");
    graph
        .replay(&mut [&mut c])
        .and_then(|w| w.wait())
        .expect("launch");
    expect_all(pg, &c, v + 100.0, &format!("{at}, captured broadcast"));
    drop(graph);
    step("send/recv");
    let mut p = from_root(v + 200.0);
    let w = if r == 0 {
        pg.send(&p, 1)
    } else {
        pg.recv(&mut p, 0)
    };
    w.and_then(|w| w.wait()).expect("eager send/recv");
    expect_all(pg, &p, v + 200.0, &format!("{at}, eager send/recv"));
    step("captured send/recv");
    let mut q = from_root(v + 300.0);
    pg.register_buffer(&q, mode).expect("register");
    let graph = pg
        .capture(|pg| {
            if r == 0 {
                pg.send(&q, 1)
            } else {
                pg.recv(&mut q, 0)
            }
            .map(drop)
        })
        .expect("capture send/recv");
    graph
        .replay(&mut [&mut q])
        .and_then(|w| w.wait())
        .expect("launch");
    expect_all(pg, &q, v + 300.0, &format!("{at}, captured send/recv"));
    drop(graph);
    [b.addr(), c.addr(), p.addr(), q.addr()]
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
        // How many allocations got an address seen before (what makes the test mean
        // something).
        let seen = &addrs[0];
        let reused = (0..seen.len())
            .filter(|&i| seen[..i].contains(&seen[i]))
            .count();
        let total = seen.len();
        said.push(format!(
            "{mode:?}: {ROUNDS} rounds (all_reduce, all_gather, broadcast, send/recv) right, {reused} of rank 0's {total} allocations at an address used before"
        ));
    }
    println!("RESULT {}", said.join("; "));
}

//! Host cost and latency of one all_reduce through the process group against the `Comm` path
//! beneath it, in the same binary, on the same GPUs, variants alternated round by round.
//!
//! Run on a GPU machine: `OXCCL_BENCH_GPUS=2 target/release/deps/pg_overhead-*` (a thread per
//! GPU; one GPU works too). Without `OXCCL_BENCH_GPUS` it says so and exits.
//!
//! - issue: `CALLS` back-to-back 8-byte all_reduces without waiting, the issuing loop timed
//!   (the process group's cost: a lock, two sequence numbers, an event and its work).
//! - latency: each call waited for before the next (`Work::wait` against a stream
//!   synchronize), the whole loop timed.

use oxccl::core::Backend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::{Comm, CommConfig, Device, Nccl, ReduceOp};
use std::sync::{Arc, Barrier};
use std::time::Instant;

const CALLS: usize = 200;
const ROUNDS: usize = 100;
const WARMUP: usize = 5;
const VARIANTS: [&str; 4] = [
    "issue: Comm::all_reduce_in_place",
    "issue: ProcessGroup::all_reduce (work dropped)",
    "latency: Comm::all_reduce_in_place + stream synchronize",
    "latency: ProcessGroup::all_reduce + Work::wait",
];

fn main() {
    let Some(n) = std::env::var("OXCCL_BENCH_GPUS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    else {
        eprintln!("skipped: set OXCCL_BENCH_GPUS=<n> on a GPU machine");
        return;
    };
    let lib = Nccl::load().expect("load NCCL");
    let id = lib.unique_id().expect("unique id");
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let barrier = Arc::new(Barrier::new(n as usize));
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (lib, barrier, store) = (lib.clone(), barrier.clone(), store.clone());
            std::thread::spawn(move || rank(lib, id, store, r, n, barrier))
        })
        .collect();
    let results: Vec<Vec<Vec<f64>>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    println!(
        "NCCL {} at {}, {n} GPUs, {CALLS} calls x {ROUNDS} rounds, 8-byte float32 sum, cudarc event tracking on",
        lib.version(),
        lib.library().path().display()
    );
    println!("| path | median ns/call | min ns/call | median paired difference to the Comm row above, ns |");
    println!("|---|---|---|---|");
    for (v, name) in VARIANTS.iter().enumerate() {
        let base = v - v % 2;
        let mut all: Vec<f64> = results.iter().flat_map(|r| r[v].clone()).collect();
        let mut diff: Vec<f64> = results
            .iter()
            .flat_map(|r| r[v].iter().zip(&r[base]).map(|(a, b)| a - b))
            .collect();
        all.sort_by(|a, b| a.total_cmp(b));
        diff.sort_by(|a, b| a.total_cmp(b));
        println!(
            "| {name} | {:.0} | {:.0} | {:+.0} |",
            all[all.len() / 2],
            all[0],
            diff[diff.len() / 2]
        );
    }
}

fn rank(
    lib: Nccl,
    id: oxccl::UniqueId,
    store: Arc<dyn Store>,
    r: u32,
    n: u32,
    barrier: Arc<Barrier>,
) -> Vec<Vec<f64>> {
    let mut comm = Comm::init_rank(&lib, &id, r, n, r, &CommConfig::new()).expect("init");
    let pg = ProcessGroup::new(
        lib.clone(),
        store,
        r,
        n,
        PgOptions {
            bound_device: Some(Device(r)),
            ..PgOptions::default()
        },
    )
    .expect("process group");
    let st = comm.stream().clone();
    let mut cbuf = st.clone_htod(&[1.0f32, 2.0]).unwrap();
    let mut pbuf = pg.upload(&[1.0f32, 2.0]).unwrap();
    let mut per_call = vec![Vec::new(); VARIANTS.len()];
    for round in 0..WARMUP + ROUNDS {
        for (v, samples) in per_call.iter_mut().enumerate() {
            barrier.wait();
            let t = Instant::now();
            for _ in 0..CALLS {
                match v {
                    0 => comm.all_reduce_in_place(&mut cbuf, ReduceOp::Sum).unwrap(),
                    1 => drop(pg.all_reduce(&mut pbuf, ReduceOp::Sum).unwrap()),
                    2 => {
                        comm.all_reduce_in_place(&mut cbuf, ReduceOp::Sum).unwrap();
                        st.synchronize().unwrap();
                    }
                    _ => pg
                        .all_reduce(&mut pbuf, ReduceOp::Sum)
                        .unwrap()
                        .wait()
                        .unwrap(),
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / CALLS as f64;
            st.synchronize().unwrap();
            pg.download(&pbuf).unwrap();
            if round >= WARMUP {
                samples.push(ns);
            }
        }
    }
    barrier.wait();
    comm.destroy().unwrap();
    pg.destroy();
    per_call
}

//! Graph capture of the process group on real NCCL: the cases of `tests/capture_cases` on one
//! GPU (a single-rank group, no launcher needed; under torchrun, one rank per GPU), the same
//! small all-reduce loop timed eagerly and as a launched graph, then (without a launcher) the
//! safe `Comm`'s capture on a single-rank communicator of GPU 0, timed the same way.
//!
//! ```text
//! target/release/examples/pg_capture              # one GPU: rank 0 of 1
//! torchrun --nproc_per_node 2 --no-python target/release/examples/pg_capture
//! ```
//! Without a GPU (or NCCL) the cases run on the mock world instead (two ranks as threads),
//! and the output says so. Exits non-zero when a case failed.

#[path = "../tests/capture_cases/mod.rs"]
mod capture_cases;

#[path = "case_runner/mod.rs"]
mod case_runner;

use oxccl::core::{Backend, CaptureError};
use oxccl::mock::MockBackend;
use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, PrefixStore, Store};
use oxccl::{Comm, CommConfig, Error, HostScalar, Nccl, ReduceOp, Result, Scalar};
use std::sync::Arc;
use std::time::Instant;

/// The launcher's store when started by one (rank 0 hosts it), else an in-process one.
fn store_of(launch: Option<&oxccl::rules::launch::LaunchInfo>) -> Result<Arc<dyn Store>> {
    match launch {
        Some(launch) => case_runner::launcher_store(launch),
        None => Ok(Arc::new(MemStore::new())),
    }
}

/// Runs every case on this rank; returns how many failed.
fn cases<B: PgBackend>(backend: &B, store: &Arc<dyn Store>, rank: u32, world: u32) -> Result<u32> {
    case_runner::run_cases(backend, store, rank, world, capture_cases::all::<B>())
}

/// `ops` all-reduces of 2 floats, issued one by one and then as one captured graph launched
/// `launches` times: microseconds per operation each way.
fn timing<B: PgBackend>(pg: &ProcessGroup<B>, ops: usize, launches: usize) -> Result<(f64, f64)> {
    let mut buf = pg.upload(&[1.0f32, 2.0])?;
    let mut eager = || -> Result<f64> {
        let t = Instant::now();
        let mut last = None;
        for _ in 0..ops * launches {
            last = Some(pg.all_reduce(&mut buf, ReduceOp::Max)?);
        }
        if let Some(w) = last {
            w.wait()?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / (ops * launches) as f64)
    };
    eager()?;
    let eager_us = eager()?;
    let graph = pg.capture(|pg| {
        for _ in 0..ops {
            pg.all_reduce(&mut buf, ReduceOp::Max)?;
        }
        Ok(())
    })?;
    graph.replay(&mut [&mut buf])?.wait()?;
    let t = Instant::now();
    let mut last = None;
    for _ in 0..launches {
        last = Some(graph.replay(&mut [&mut buf])?);
    }
    if let Some(w) = last {
        w.wait()?;
    }
    let graph_us = t.elapsed().as_secs_f64() * 1e6 / (ops * launches) as f64;
    Ok((eager_us, graph_us))
}

/// The verdict of a Comm case: `Err` with what went wrong.
type Verdict = std::result::Result<(), String>;

fn capture_kind<T: std::fmt::Debug>(r: Result<T>) -> std::result::Result<CaptureError, String> {
    match r {
        Err(Error::Capture { kind, .. }) => Ok(kind),
        other => Err(format!("expected Error::Capture, got {other:?}")),
    }
}

/// The safe communicator captured on one GPU (a single-rank communicator): premul-sum by 2,
/// three times per graph, four launches: 2^12; and its refusals.
fn comm_case(nccl: &Nccl) -> Verdict {
    let e = |e: Error| e.to_string();
    let id = nccl.unique_id().map_err(e)?;
    let mut comm = Comm::init_rank(nccl, &id, 0, 1, 0, &CommConfig::new()).map_err(e)?;
    let st = comm.stream().clone();
    let mut buf = st.clone_htod(&[1.0f32; 64]).map_err(|x| format!("{x:?}"))?;
    let two = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(2.0)));
    let graph = comm
        .capture(|c| {
            for _ in 0..3 {
                c.all_reduce_in_place(&mut buf, two)?;
            }
            Ok(())
        })
        .map_err(e)?;
    if graph.ops() != 3 || graph.buffers() != 1 {
        return Err(format!("graph {graph:?}"));
    }
    comm.synchronize().map_err(e)?;
    let got = st.clone_dtoh(&buf).map_err(|x| format!("{x:?}"))?;
    if got != vec![1.0f32; 64] {
        return Err(format!("ran at capture: {:?}", &got[..2]));
    }
    for _ in 0..4 {
        graph.replay(&mut comm, &mut [&mut buf]).map_err(e)?;
    }
    comm.synchronize().map_err(e)?;
    let got = st.clone_dtoh(&buf).map_err(|x| format!("{x:?}"))?;
    if got != vec![4096.0f32; 64] {
        return Err(format!("after 4 launches: want 4096, got {:?}", &got[..2]));
    }
    let mut other = st.alloc_zeros::<f32>(64).map_err(|x| format!("{x:?}"))?;
    let k = capture_kind(graph.replay(&mut comm, &mut [&mut other]))?;
    if k != CaptureError::Mismatch {
        return Err(format!("another buffer: {k:?}"));
    }
    let k = capture_kind(comm.capture(|c| c.barrier()))?;
    if k != CaptureError::Unsupported {
        return Err(format!("barrier: {k:?}"));
    }
    let mut inside = None;
    comm.capture(|c| {
        inside = Some(capture_kind(graph.replay(c, &mut [&mut buf])));
        Ok(())
    })
    .map_err(e)?;
    if inside != Some(Ok(CaptureError::Forbidden)) {
        return Err(format!("launch inside a capture: {inside:?}"));
    }
    // A plain operation after all that, and the communicator is still healthy.
    comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)
        .map_err(e)?;
    comm.synchronize().map_err(e)?;
    Ok(())
}

/// Microseconds per 8 B all-reduce through `Comm`: eager, then captured (`ops` per graph).
fn comm_timing(nccl: &Nccl, ops: usize, launches: usize) -> Result<(f64, f64)> {
    let id = nccl.unique_id()?;
    let mut comm = Comm::init_rank(nccl, &id, 0, 1, 0, &CommConfig::new())?;
    let st = comm.stream().clone();
    let mut buf = st
        .clone_htod(&[1.0f32, 2.0])
        .map_err(|x| oxccl::nccl::cuda_error("copying", x))?;
    let mut eager = |comm: &mut Comm| -> Result<f64> {
        let t = Instant::now();
        for _ in 0..ops * launches {
            comm.all_reduce_in_place(&mut buf, ReduceOp::Max)?;
        }
        comm.synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e6 / (ops * launches) as f64)
    };
    eager(&mut comm)?;
    let eager_us = eager(&mut comm)?;
    let graph = comm.capture(|c| {
        for _ in 0..ops {
            c.all_reduce_in_place(&mut buf, ReduceOp::Max)?;
        }
        Ok(())
    })?;
    graph.replay(&mut comm, &mut [&mut buf])?;
    comm.synchronize()?;
    let t = Instant::now();
    for _ in 0..launches {
        graph.replay(&mut comm, &mut [&mut buf])?;
    }
    comm.synchronize()?;
    Ok((
        eager_us,
        t.elapsed().as_secs_f64() * 1e6 / (ops * launches) as f64,
    ))
}

fn main() -> Result<()> {
    env_logger::init();
    let launch = case_runner::launched()?;
    let (rank, world) = launch.as_ref().map_or((0, 1), |l| (l.rank, l.world_size));
    let nccl = Nccl::load()
        .ok()
        .filter(|_| oxccl::nccl::require_driver().is_ok());
    let Some(nccl) = nccl else {
        println!("no GPU or no NCCL here: the capture cases run on the mock world (2 ranks)");
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let backend = MockBackend::new();
        let threads: Vec<_> = (0..2)
            .map(|r| {
                let (b, s) = (backend.clone(), store.clone());
                std::thread::spawn(move || cases(&b, &s, r, 2).unwrap_or(1))
            })
            .collect();
        let failed: u32 = threads.into_iter().map(|t| t.join().unwrap_or(1)).sum();
        println!("mock: {failed} failed");
        std::process::exit(i32::from(failed > 0));
    };
    println!(
        "rank {rank}/{world}: NCCL {} at {}",
        nccl.version(),
        oxccl::escaped_path(nccl.library().path())
    );
    let store = store_of(launch.as_ref())?;
    let failed = cases(&nccl, &store, rank, world)?;
    let opts = PgOptions {
        bound_device: Some(oxccl::Device(rank)),
        device: oxccl::Device(rank),
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(
        nccl.clone(),
        Arc::new(PrefixStore::new("timing", store.clone())),
        rank,
        world,
        opts,
    )?;
    for (ops, launches) in [(20, 50), (200, 10)] {
        let (eager, graph) = timing(&pg, ops, launches)?;
        println!(
            "rank {rank} timing: all_reduce 8 B, {ops} ops per graph x {launches} launches: \
             eager {eager:.2} us/op, graph {graph:.2} us/op"
        );
    }
    let mut failed = failed;
    if world == 1 {
        match comm_case(&nccl) {
            Ok(()) => println!("rank 0 comm_capture: ok"),
            Err(e) => {
                failed += 1;
                println!("rank 0 comm_capture: FAILED: {e}");
            }
        }
        for (ops, launches) in [(20, 50), (200, 10)] {
            let (eager, graph) = comm_timing(&nccl, ops, launches)?;
            println!(
                "rank 0 comm timing: all_reduce 8 B, {ops} ops per graph x {launches} launches: \
                 eager {eager:.2} us/op, graph {graph:.2} us/op"
            );
        }
    }
    println!("rank {rank}: {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

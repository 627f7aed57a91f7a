//! NCCL memory (`ncclMemAlloc`) through the process group, in each buffer mode, checked on
//! a GPU: the GPU check of the buffer modes (`-R`) and `oxccl tune`.
//!
//! Run on one GPU (a single-rank communicator; more with an argument, a thread per GPU):
//! `cargo run --release --example comm_buffers -- 1`. Without NCCL or a GPU it prints why and
//! exits 0 (skipped). Exit 1 on any wrong value or unexpected error.
//!
//! What it checks, per rank: all_reduce / all_gather / reduce_scatter / broadcast on
//! `NcclBuf`s in groups whose tune table says plain, registered and window (values against
//! the host), the mode counts and registrations the group reports (a window made once for
//! repeated operations), a buffer dropped right after its operation was issued (freed after
//! the work, never under it), a tuned table mixing modes by size, and on a library older than
//! 2.27 that windows are refused naming the feature. Then, per mode: a CUDA graph of
//! all_reduces on a buffer registered before the capture (`register_buffer`), launched
//! several times; a `batch_isend_irecv` ring on `NcclBuf`s, eager and captured; and
//! `release_windows` letting go of every dropped buffer's window.

use oxccl::pg::{P2pOp, PgOptions, ProcessGroup, RegMode, TuneTable, TunedStats};
use oxccl::store::{MemStore, Store};
use oxccl::{Device, Error, Feature, Nccl, ReduceOp};
use std::sync::Arc;
use std::time::Duration;

fn main() -> std::process::ExitCode {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let nccl = match Nccl::load() {
        Ok(l) => l,
        Err(e) => {
            println!("comm_buffers: skipped (no NCCL: {e})");
            return std::process::ExitCode::SUCCESS;
        }
    };
    if let Err(e) = oxccl::nccl::require_driver() {
        println!("comm_buffers: skipped (no GPU: {e})");
        return std::process::ExitCode::SUCCESS;
    }
    let version = oxccl::core::Backend::version(&nccl);
    println!(
        "comm_buffers: NCCL {version} from {}, {n} rank(s)",
        oxccl::escaped_path(nccl.library().path())
    );
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (nccl, store) = (nccl.clone(), store.clone());
                s.spawn(move || rank(nccl, store, r, n).map_err(|e| format!("rank {r}: {e}")))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a rank panicked".into())))
            .collect()
    });
    let mut ok = true;
    for r in results {
        if let Err(e) = r {
            println!("FAIL {e}");
            ok = false;
        }
    }
    println!("comm_buffers: {}", if ok { "PASS" } else { "FAIL" });
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

fn ensure(cond: bool, what: String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what)
    }
}

fn rank(nccl: Nccl, store: Arc<dyn Store>, r: u32, n: u32) -> Result<(), String> {
    let e = |e: Error| e.to_string();
    let base = ProcessGroup::new(
        nccl.clone(),
        store,
        r,
        n,
        PgOptions {
            bound_device: Some(Device(r)),
            timeout: Duration::from_secs(120),
            watchdog: false,
            ..PgOptions::default()
        },
    )
    .map_err(e)?;
    let feats = *oxccl::core::Backend::features(&nccl);
    for mode in RegMode::ALL {
        let opts = PgOptions {
            tune: Some(Arc::new(TuneTable::uniform(mode))),
            ..base.options().clone()
        };
        let pg = base.new_group(base.ranks(), Some(opts)).map_err(e)?;
        let need = match mode {
            RegMode::Plain => None,
            RegMode::Registered => Some(Feature::BufferRegistration),
            RegMode::Window => Some(Feature::WindowRegistration),
        };
        match (need.map(|f| feats.has(f)), modes(&pg, r, n, mode)) {
            (None | Some(true), Ok(stats)) => {
                println!("rank {r}: {} ok: {stats:?}", mode.name());
                let done = graphs_and_batches(&pg, r, n, mode)
                    .map_err(|err| format!("{} graphs and batches: {err}", mode.name()))?;
                println!(
                    "rank {r}: {} graphs, batches, release ok: {done}",
                    mode.name()
                );
            }
            (Some(false), Err(Error::Unsupported { feature, .. })) if Some(feature) == need => {
                println!(
                    "rank {r}: {} refused as expected ({feature:?} missing)",
                    mode.name()
                )
            }
            (_, Ok(_)) => {
                return Err(format!(
                    "{}: the library lacks the feature, yet it ran",
                    mode.name()
                ))
            }
            (_, Err(err)) => return Err(format!("{}: {err}", mode.name())),
        }
        pg.destroy();
    }
    // A table mixing modes by size, as `oxccl tune` writes.
    if feats.has(Feature::WindowRegistration) {
        let t = TuneTable::parse(
            "oxccl-tune 1\nall_reduce * 0 65536 window\nall_reduce * 65537 max registered\n",
        )
        .map_err(e)?;
        let pg = base
            .new_group(
                base.ranks(),
                Some(PgOptions {
                    tune: Some(Arc::new(t)),
                    ..base.options().clone()
                }),
            )
            .map_err(e)?;
        let mut small = pg.upload_comm(&[1.0f32; 16]).map_err(e)?;
        let mut big = pg.upload_comm(&vec![1.0f32; 1 << 20]).map_err(e)?;
        pg.all_reduce(&mut small, ReduceOp::Sum).map_err(e)?;
        pg.all_reduce(&mut big, ReduceOp::Sum)
            .map_err(e)?
            .wait()
            .map_err(e)?;
        let got = pg.download_any(&big).map_err(e)?;
        ensure(
            got.iter().all(|v| *v == n as f32),
            format!("mixed table: big all_reduce gave {:?}", &got[..4]),
        )?;
        let st = pg.tuned_stats().map_err(e)?;
        ensure(
            st == TunedStats {
                ops: [0, 1, 1],
                registered: 1,
                windows: 1,
            },
            format!("mixed table: stats {st:?}"),
        )?;
        println!("rank {r}: mixed table ok: {st:?}");
        pg.destroy();
    }
    base.destroy();
    Ok(())
}

/// The collectives on NcclBufs in `pg`'s mode, checked against the host.
fn modes(pg: &ProcessGroup<Nccl>, r: u32, n: u32, mode: RegMode) -> oxccl::Result<TunedStats> {
    let nf = n as f32;
    let bad = |what: &str, got: &[f32]| {
        Error::invalid(
            "result",
            format_args!(
                "{what} in mode {}: got {:?}",
                mode.name(),
                &got[..got.len().min(4)]
            ),
        )
    };
    // all_reduce three times on one buffer: one registration or window for all three. 16 MiB,
    // so the download (on another stream) truly has running work to wait for, and the uses
    // after the first on the group's stream wait for nothing but its order.
    let mut a = pg.upload_comm(&vec![1.0f32; 1 << 22])?;
    for _ in 0..3 {
        pg.all_reduce(&mut a, ReduceOp::Sum)?;
    }
    let got = pg.download_any(&a)?;
    if got.iter().any(|v| *v != nf * nf * nf) {
        return Err(bad("all_reduce x3", &got));
    }
    // all_gather and reduce_scatter, out of place.
    let send = pg.upload_comm(&vec![r as f32 + 1.0; 4096])?;
    let mut gathered = pg.alloc_comm::<f32>(4096 * n as usize)?;
    pg.all_gather(&send, &mut gathered)?;
    let got = pg.download_any(&gathered)?;
    if (0..n as usize).any(|q| got[q * 4096] != q as f32 + 1.0) {
        return Err(bad("all_gather", &got));
    }
    let big = pg.upload_comm(&vec![1.0f32; 4096 * n as usize])?;
    let mut part = pg.alloc_comm::<f32>(4096)?;
    pg.reduce_scatter(&big, &mut part, ReduceOp::Sum)?;
    let got = pg.download_any(&part)?;
    if got.iter().any(|v| *v != nf) {
        return Err(bad("reduce_scatter", &got));
    }
    let mut b = pg.upload_comm(&[r as f32 + 7.0; 256])?;
    pg.broadcast(&mut b, pg.ranks()[0])?;
    let got = pg.download_any(&b)?;
    if got.iter().any(|v| *v != 7.0) {
        return Err(bad("broadcast", &got));
    }
    // Dropped right after the issue: freed only after the work ran (never under it), and
    // its registration released by a later operation.
    {
        let mut tmp = pg.alloc_comm::<f32>(1 << 20)?;
        pg.all_reduce(&mut tmp, ReduceOp::Sum)?;
    }
    let mut after = pg.upload_comm(&[2.0f32; 8])?;
    pg.all_reduce(&mut after, ReduceOp::Max)?.wait()?;
    let got = pg.download_any(&after)?;
    if got.iter().any(|v| *v != 2.0) {
        return Err(bad("all_reduce after a drop", &got));
    }
    // A plain cudarc buffer in the same group stays plain.
    let mut plain = pg.upload(&[1.0f32; 8])?;
    pg.all_reduce(&mut plain, ReduceOp::Sum)?.wait()?;
    let stats = pg.tuned_stats()?;
    let tuned_ops = 3 + 1 + 1 + 1 + 1 + 1;
    let expect_ops = match mode {
        RegMode::Plain => [tuned_ops + 1, 0, 0],
        RegMode::Registered => [1, tuned_ops, 0],
        RegMode::Window => [1, 0, tuned_ops],
    };
    if stats.ops != expect_ops {
        return Err(Error::invalid(
            "stats",
            format_args!(
                "ops {:?} in mode {}, expected {expect_ops:?}",
                stats.ops,
                mode.name()
            ),
        ));
    }
    Ok(stats)
}

/// Graphs on registered buffers, batches of sends and receives on `NcclBuf`s (eager and
/// captured), and the explicit release of windows, in `pg`'s mode. Says what it saw.
fn graphs_and_batches(
    pg: &ProcessGroup<Nccl>,
    r: u32,
    n: u32,
    mode: RegMode,
) -> oxccl::Result<String> {
    let wrong = |what: &str, got: &[f32]| {
        Error::invalid(
            "result",
            format_args!("{what}: got {:?}", &got[..got.len().min(4)]),
        )
    };
    // 8 bytes, the headline size: registered before the capture, 10 all_reduces per launch.
    let mut a = pg.upload_comm(&[1.0f32; 2])?;
    pg.register_buffer(&a, mode)?;
    let graph = pg.capture(|pg| {
        for _ in 0..10 {
            pg.all_reduce(&mut a, ReduceOp::Sum)?;
        }
        Ok(())
    })?;
    for _ in 0..3 {
        graph.replay(&mut [&mut a])?;
    }
    let got = pg.download_any(&a)?;
    // n^30 is a power of two's power for n = 1, 2, 4, 8: exact in f32.
    let want = (n as f32).powi(30);
    if got.iter().any(|v| *v != want) {
        return Err(wrong("graph of 10 all_reduces x 3 launches", &got));
    }
    // A ring of sends and receives on NcclBufs, eager (registers them, as the table says),
    // then captured and launched.
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let send = pg.upload_comm(&vec![r as f32 + 1.0; 1024])?;
    let mut recv = pg.alloc_comm::<f32>(1024)?;
    pg.batch_isend_irecv(&mut [P2pOp::Send(&send, next), P2pOp::Recv(&mut recv, prev)])?
        .wait()?;
    let got = pg.download_any(&recv)?;
    if got.iter().any(|v| *v != prev as f32 + 1.0) {
        return Err(wrong("batch_isend_irecv", &got));
    }
    // A fresh receive buffer, registered by hand (a send or receive is never in a window),
    // so the values below can only come from the launch.
    let mut fresh = pg.alloc_comm::<f32>(1024)?;
    pg.register_buffer(&fresh, mode.min(RegMode::Registered))?;
    let ring = pg.capture(|pg| {
        pg.batch_isend_irecv(&mut [P2pOp::Send(&send, next), P2pOp::Recv(&mut fresh, prev)])
            .map(drop)
    })?;
    let mut send = send;
    ring.bind(&mut send).buf(&mut fresh).replay()?.wait()?;
    let got = pg.download_any(&fresh)?;
    if got.iter().any(|v| *v != prev as f32 + 1.0) {
        return Err(wrong("captured batch_isend_irecv", &got));
    }
    let before = pg.tuned_stats()?;
    drop((graph, ring, a, send, recv, fresh));
    let released = pg.release_windows()?;
    let after = pg.tuned_stats()?;
    let expect_windows = if mode == RegMode::Window {
        before.windows
    } else {
        0
    };
    if released != expect_windows || after.windows != 0 {
        return Err(Error::invalid(
            "release_windows",
            format_args!(
                "every window released ({} before), got {released} released and {} left",
                before.windows, after.windows
            ),
        ));
    }
    Ok(format!(
        "{} windows and {} registrations before the release, {released} released",
        before.windows, before.registered
    ))
}

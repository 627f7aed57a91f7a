//! `oxccl ping-pong`: one-sided latency through the process group. Rank 0 puts each size
//! into rank 1's window buffer with a signal; rank 1 waits for it and puts it back into rank
//! 0's; every round is queued on the streams without the host in between, and half the round
//! trip is the latency reported. Beside it, in the same groups, the same ping-pong with send
//! and recv. Two ranks: a thread per GPU on NCCL 2.29.2+, or the mock world (imitating NCCL
//! 2.32.3) without one. The data is checked after the last round.

use crate::exit;
use crate::perf::args::{SweepArgs, WorldArgs};
use crate::perf::backend::Ground;
use crate::perf::nccl::{local_gpus, RankSetup};
use crate::perf::plan::{sizes, Failure};
use crate::perf::rank::Rank;
use crate::perf::report;
use crate::perf::world::World;
use clap::Args;
use oxccl::core::Backend as _;
use oxccl::pg::{PgBackend, ProcessGroup, RegMode, SignalFrom};
use oxccl::{Error, Feature, Result};
use std::process::ExitCode;
use std::time::Instant;

/// Options of `oxccl ping-pong`.
#[derive(Args, Clone, Debug)]
#[command(
    mut_arg("max_bytes", |a| a.help("Largest size. Default: 1M (16K on NCCL unless NCCL_P2P_USE_CUDA_MEMCPY=1)")),
    mut_arg("iters", |a| a.help("Rounds timed per size. Default: 200 (20 on the mock)")),
    mut_arg("warmup", |a| a.help("Untimed rounds first. Default: 20 (2 on the mock)")),
    mut_arg("gpus", |a| a.help("GPUs visible to this process; 2 of them run the ping-pong")),
    after_help = "Examples:
  oxccl ping-pong                              8 B..1 MiB on the mock world
  NCCL_P2P_USE_CUDA_MEMCPY=1 oxccl ping-pong -g 2 -b 8 -e 1M --library <NCCL 2.29.2+>"
)]
pub struct PingPongArgs {
    /// -b -e -f -i -n -w.
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// -g, --backend, --library.
    #[command(flatten)]
    pub world: WorldArgs,
}

/// Runs `oxccl ping-pong` and prints its table: the head first, each row as its size ends.
pub fn run(a: &PingPongArgs) -> ExitCode {
    match measure(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.exit("ping-pong"),
    }
}

fn measure(a: &PingPongArgs) -> std::result::Result<(), Failure> {
    let ground = Ground::of(a.world.backend, a.world.library.as_deref()).map_err(Failure::env)?;
    let nccl = !ground.is_mock();
    let s = &a.sweep;
    let min = s.min_bytes.unwrap_or(8).max(4);
    // Without GDRCopy NCCL completes puts of 32 KiB and more only over the copy engines
    // (NCCL_P2P_USE_CUDA_MEMCPY=1; docs/BENCHMARKS.md, one-sided latency): small ones by
    // default otherwise.
    let copy_engines = std::env::var("NCCL_P2P_USE_CUDA_MEMCPY").as_deref() == Ok("1");
    let default_max = if copy_engines || !nccl {
        1 << 20
    } else {
        16 << 10
    };
    let max = s.max_bytes.unwrap_or(default_max).min(256 << 20);
    let sizes = sizes(s, min, max)?;
    let iters = s.iters.unwrap_or(if nccl { 200 } else { 20 }) as usize;
    let warmup = s.warmup.unwrap_or(if nccl { 20 } else { 2 }) as usize;
    let world = match ground {
        Ground::Nccl(lib) => {
            lib.features()
                .require(Feature::OneSided)
                .map_err(|e| Failure::env(e.to_string()))?;
            let gpus = local_gpus(a.world.gpus).map_err(Failure::env)?;
            if gpus < 2 {
                return Err(Failure::env(format!(
                    "{gpus} GPU here: the ping-pong needs 2"
                )));
            }
            let setup = RankSetup::of(true, None).map_err(Failure::usage)?;
            World::nccl_threads(*lib, 2, setup)
        }
        Ground::Mock(why) => {
            report::print(&format!(
                "# the mock world (imitating NCCL 2.32.3), 2 ranks as threads: {why}\n"
            ));
            let mock = oxccl::mock::MockBackend::with_options(
                oxccl::FeatureSet::for_version(oxccl::Version::new(2, 32, 3)),
                oxccl::mock::FaultPlan::new(),
                1,
                std::time::Duration::from_secs(60),
            );
            World::mock_threads(mock, 2)
        }
    };
    report::print(&format!(
        "# half round trip (µs), 2 ranks\n{:>12} {:>14} {:>14}\n",
        "bytes", "put+signal", "send/recv"
    ));
    world
        .run(|rank, r| match rank {
            Rank::Mock(pg) => ping_pong(pg, r, &sizes, iters, warmup),
            Rank::Nccl(pg, ..) => ping_pong(pg, r, &sizes, iters, warmup),
        })
        .map_err(|why| Failure {
            code: exit::FAILED,
            why,
        })?;
    Ok(())
}

/// This rank's part: for each size, the one-sided and the two-sided ping-pong, timed from
/// the first round after the warm-up to the last, which is waited for; the data checked.
/// Rank 0 prints each size's row as it ends (its own times: the ranks wait for each other).
fn ping_pong<B: PgBackend>(
    pg: &ProcessGroup<B>,
    r: u32,
    sizes: &[usize],
    iters: usize,
    warmup: usize,
) -> Result<()> {
    let other = 1 - r;
    for &bytes in sizes {
        let n = (bytes / 4).max(1);
        let mut win = pg.alloc_comm::<f32>(n)?;
        pg.register_buffer(&win, RegMode::Window)?;
        // A put's data lies in a window too (NCCL reads it through its window).
        let mine = pg.upload_comm(&vec![r as f32 + 1.0; n])?;
        pg.register_buffer(&mine, RegMode::Window)?;
        let from = [SignalFrom {
            peer: other,
            signal: 0,
            count: 1,
        }];
        let one = timed(pg, warmup, iters, |last| {
            let w = if r == 0 {
                pg.put_signal(&mine, other, &win, 0, 0)?;
                pg.wait_signal(&from, &mut win)?
            } else {
                pg.wait_signal(&from, &mut win)?;
                pg.put_signal(&mine, other, &win, 0, 0)?
            };
            if last {
                w.wait()?;
            }
            Ok(())
        })?;
        check(&pg.download_any(&win)?, other as f32 + 1.0, "put_signal")?;
        let mut got = pg.alloc_zeros::<f32>(n)?;
        let two = timed(pg, warmup, iters, |last| {
            let w = if r == 0 {
                pg.send(&mine, other)?;
                pg.recv(&mut got, other)?
            } else {
                pg.recv(&mut got, other)?;
                pg.send(&mine, other)?
            };
            if last {
                w.wait()?;
            }
            Ok(())
        })?;
        check(&pg.download(&got)?, other as f32 + 1.0, "send/recv")?;
        drop((win, mine));
        pg.release_windows()?;
        if r == 0 {
            report::print(&format!("{bytes:>12} {one:>14.2} {two:>14.2}\n"));
        }
    }
    Ok(())
}

/// Half the round trip in µs over `iters` rounds after `warmup`; `round(last)` queues one
/// round and waits for it when `last`. The ranks start each timing together (a barrier).
fn timed<B: PgBackend>(
    pg: &ProcessGroup<B>,
    warmup: usize,
    iters: usize,
    mut round: impl FnMut(bool) -> Result<()>,
) -> Result<f64> {
    for i in 0..warmup {
        round(i + 1 == warmup)?;
    }
    pg.barrier()?.wait()?;
    let t = Instant::now();
    for i in 0..iters.max(1) {
        round(i + 1 == iters.max(1))?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / iters.max(1) as f64 / 2.0)
}

/// Every element of `got` is `want` (the peer's value).
fn check(got: &[f32], want: f32, what: &str) -> Result<()> {
    match got.iter().position(|x| *x != want) {
        None => Ok(()),
        Some(i) => Err(Error::Mismatch {
            what: "data",
            detail: oxccl::core::text!("{what}: element {i} is {}, not {want}", got[i]),
        }),
    }
}

//! all_reduce latency and algorithm bandwidth from 8 B to 64 MiB (f32, sum, in place) through
//! the process group, on the backend `OXCCL_BACKEND` picks (the mock across processes on a
//! machine without GPUs). Run under a launcher, e.g.
//! `torchrun --no-python --nproc_per_node 4 target/release/examples/allreduce_bench`;
//! rank 0 prints one line per size. `scripts/gloo_baseline.py` measures torch.distributed's
//! gloo the same way.
//!
//! Each size: 3 warm-up calls, then `iters` calls each waited for, between two barriers;
//! latency = the time / iters on rank 0, algbw = bytes / latency.

use oxccl::launch::{init_process_group, WithProcessGroup};
use oxccl::pg::PgBackend;
use oxccl::pg::ProcessGroup;
use oxccl::{ReduceOp, Result};
use std::time::Instant;

struct Bench;

/// Calls per size: about 256 MiB moved per size, between 5 and 200 calls.
fn iters(bytes: usize) -> usize {
    ((256usize << 20) / bytes).clamp(5, 200)
}

impl WithProcessGroup for Bench {
    type Output = ();
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<()> {
        let me = pg.global_rank();
        if me == 0 {
            println!("# oxccl all_reduce, {} ranks, f32 sum in place", pg.size());
            println!(
                "{:>12} {:>8} {:>14} {:>14}",
                "bytes", "iters", "latency_us", "algbw_GB/s"
            );
        }
        // 8 B × 8^k up to 16 MiB, then 64 MiB (the sizes scripts/gloo_baseline.py uses).
        let sizes = (0..8).map(|k| 8usize << (3 * k)).chain([64 << 20]);
        for bytes in sizes {
            let n = bytes / 4;
            let mut buf = pg.upload(&vec![1.0f32; n])?;
            for _ in 0..3 {
                pg.all_reduce(&mut buf, ReduceOp::Sum)?.wait()?;
            }
            let it = iters(bytes);
            pg.barrier()?.wait()?;
            let start = Instant::now();
            for _ in 0..it {
                pg.all_reduce(&mut buf, ReduceOp::Sum)?.wait()?;
            }
            let secs = start.elapsed().as_secs_f64() / it as f64;
            pg.barrier()?.wait()?;
            if me == 0 {
                println!(
                    "{bytes:>12} {it:>8} {:>14.1} {:>14.3}",
                    secs * 1e6,
                    bytes as f64 / secs / 1e9
                );
            }
        }
        Ok(())
    }
}

fn main() -> Result<()> {
    env_logger::init();
    init_process_group(Bench)
}

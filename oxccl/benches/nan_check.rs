//! Cost of the NaN check on device memory: the PTX kernel over 1 GiB of each float type,
//! its flag read back (so each check synchronizes). Run on a GPU machine:
//! `OXCCL_BENCH_GPUS=1 target/release/deps/nan_check-*`; without it, it says so and exits.

use oxccl::buffer::Memory;
use oxccl::{Device, Nccl};
use std::time::Instant;

const GIB: usize = 1 << 30;
const REPEATS: usize = 10;

fn main() {
    if std::env::var("OXCCL_BENCH_GPUS").is_err() {
        eprintln!("skipped: set OXCCL_BENCH_GPUS=1 on a GPU machine");
        return;
    }
    let nccl = Nccl::load().expect("load NCCL");
    let stream = nccl.stream(Device(0)).expect("stream");
    println!("| type | bytes | ms per check (median of {REPEATS}) | GB/s | found a planted NaN |");
    println!("|---|---|---|---|---|");
    run::<f32>(&nccl, &stream, "f32", f32::NAN);
    run::<f64>(&nccl, &stream, "f64", f64::NAN);
    run::<half::f16>(&nccl, &stream, "f16", half::f16::NAN);
    run::<half::bf16>(&nccl, &stream, "bf16", half::bf16::NAN);
}

fn run<T: oxccl::Element>(nccl: &Nccl, stream: &oxccl::NcclStream, name: &str, nan: T) {
    let n = GIB / std::mem::size_of::<T>();
    let clean = nccl.alloc_zeros::<T>(stream, n).expect("alloc");
    let mut times = Vec::new();
    for _ in 0..REPEATS + 1 {
        let t = Instant::now();
        assert!(!nccl.has_nan(stream, &clean).expect("check"));
        times.push(t.elapsed().as_secs_f64());
    }
    times.remove(0);
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    let host = [nan];
    let mut dirty = nccl.alloc_zeros::<T>(stream, n).expect("alloc");
    let tail = nccl.upload(stream, &host).expect("upload");
    stream
        .cuda()
        .memcpy_dtod(&tail, &mut dirty.slice_mut(n - 1..))
        .expect("plant");
    let found = nccl.has_nan(stream, &dirty).expect("check");
    println!(
        "| {name} | {GIB} | {:.3} | {:.1} | {found} |",
        med * 1e3,
        GIB as f64 / med / 1e9
    );
}

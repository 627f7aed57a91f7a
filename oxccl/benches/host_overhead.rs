//! Host cost of issuing one all_reduce: oxccl's safe path and raw path against calling
//! `ncclAllReduce` through the loaded function pointer, in the same binary, same buffers.
//!
//! Run on a GPU machine: `OXCCL_BENCH_GPUS=2 target/release/deps/host_overhead-*`.
//! Without `OXCCL_BENCH_GPUS` it says so and exits.
//!
//! Each rank (one thread per GPU) issues `CALLS` back-to-back all_reduces of 8 bytes without
//! synchronizing and times only the issuing loop; ranks synchronize between rounds, and the
//! variants alternate round by round so drift hits them alike. Reported: median and minimum
//! nanoseconds per call over the rounds, and the median of the per-round differences to the
//! function-pointer call (the overhead oxccl adds).

use oxccl::core::{Backend, CommOp};
use oxccl::{Comm, CommConfig, DataType, Nccl, RawBuf, RawBufMut, ReduceOp};
use std::sync::{Arc, Barrier};
use std::time::Instant;

const CALLS: usize = 200;
const ROUNDS: usize = 200;
const WARMUP: usize = 5;
const VARIANTS: [&str; 4] = [
    "ncclAllReduce via fn pointer",
    "Comm::issue (raw API)",
    "Comm::all_reduce (safe, cudarc event tracking on)",
    "Comm::all_reduce (safe, cudarc event tracking off)",
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
    let barrier = Arc::new(Barrier::new(n as usize));
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (lib, barrier) = (lib.clone(), barrier.clone());
            std::thread::spawn(move || rank(lib, id, r, n, barrier))
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    println!(
        "NCCL {} at {}, {n} GPUs, {CALLS} calls x {ROUNDS} rounds, 8-byte float32 sum",
        lib.version(),
        lib.library().path().display()
    );
    println!(
        "| path | median ns/call | min ns/call | median paired difference to the fn pointer, ns |"
    );
    println!("|---|---|---|---|");
    for (v, name) in VARIANTS.iter().enumerate() {
        let mut all: Vec<f64> = results
            .iter()
            .flat_map(|r: &Vec<Vec<f64>>| r[v].clone())
            .collect();
        // Rounds alternate the variants, so the difference within one round cancels the
        // machine's drift between rounds.
        let mut diff: Vec<f64> = results
            .iter()
            .flat_map(|r| r[v].iter().zip(&r[0]).map(|(a, b)| a - b))
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

fn rank(lib: Nccl, id: oxccl::UniqueId, r: u32, n: u32, barrier: Arc<Barrier>) -> Vec<Vec<f64>> {
    let mut comm = Comm::init_rank(&lib, &id, r, n, r, &CommConfig::new()).expect("init");
    let st = comm.stream().clone();
    let send = st.clone_htod(&[1.0f32, 2.0]).unwrap();
    let mut recv = st.alloc_zeros::<f32>(2).unwrap();
    let (sp, rp) = {
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let s = send.device_ptr(&st).0 as usize;
        let r = recv.device_ptr_mut(&st).0 as usize;
        (s, r)
    };
    let raw_fn = lib.library().api().all_reduce.expect("ncclAllReduce");
    let raw_comm = comm.backend().raw();
    let raw_stream = oxccl::loader::RawStream(st.cu_stream().cast());
    let op = CommOp::AllReduce {
        send: RawBuf::new(sp, 2),
        recv: RawBufMut::new(rp, 2),
        dtype: DataType::Float32,
        op: ReduceOp::Sum,
    };
    let mut per_call = vec![Vec::new(); VARIANTS.len()];
    for round in 0..WARMUP + ROUNDS {
        for (v, samples) in per_call.iter_mut().enumerate() {
            // cudarc's cross-stream event tracking costs driver calls per buffer; the last variant
            // measures oxccl's own cost with it off (the user's choice in cudarc).
            // SAFETY: every buffer here lives on the comm's stream, so no cross-stream sync is needed.
            unsafe {
                if v == 3 {
                    st.context().disable_event_tracking();
                } else {
                    st.context().enable_event_tracking();
                }
            }
            barrier.wait();
            let t = Instant::now();
            for _ in 0..CALLS {
                match v {
                    0 => assert_eq!(
                        // SAFETY: live communicator, valid device buffers of 2 floats, live
                        // stream.
                        unsafe {
                            raw_fn(sp as *const _, rp as *mut _, 2, 7, 0, raw_comm, raw_stream)
                        },
                        0
                    ),
                    // SAFETY: the same buffers, described as a CommOp.
                    1 => unsafe { comm.issue(&op) }.unwrap(),
                    _ => comm.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap(),
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / CALLS as f64;
            st.synchronize().unwrap();
            if round >= WARMUP {
                samples.push(ns);
            }
        }
    }
    barrier.wait();
    comm.destroy().unwrap();
    per_call
}

//! A framework with its own tensor type: issue NCCL operations on raw device addresses.
//!
//! Run with 2 GPUs: `cargo run --release --example raw_pointers -- 2`.

use oxccl::prelude::*;
use oxccl::{Comm, CommConfig, CommOp, DataType, Nccl, RawBuf, RawBufMut, ReduceOp};

/// Stand-in for a framework's tensor: a device address, an element count, a type.
struct Tensor {
    addr: usize,
    numel: usize,
    dtype: DataType,
}

fn main() -> oxccl::Result<()> {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let nccl = Nccl::load().expect("no NCCL found: set OXCCL_NCCL_LIBRARY");
    let id = nccl.unique_id()?;
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let nccl = nccl.clone();
            std::thread::spawn(move || -> oxccl::Result<f32> {
                let mut comm = Comm::init_rank(&nccl, &id, r, n, r, &CommConfig::new())?;
                // The framework owns this memory; oxccl only sees its address.
                let st = comm.stream().clone();
                let mem = st.clone_htod(&[r as f32 + 1.0; 4]).expect("alloc");
                let t = Tensor {
                    addr: {
                        use cudarc::driver::DevicePtr;
                        mem.device_ptr(&st).0 as usize
                    },
                    numel: 4,
                    dtype: DataType::Float32,
                };
                let op = CommOp::AllReduce {
                    send: RawBuf::new(t.addr, t.numel),
                    recv: RawBufMut::new(t.addr, t.numel),
                    dtype: t.dtype,
                    op: ReduceOp::Sum,
                };
                // SAFETY: `mem` is device memory of this rank's GPU holding 4 floats, alive until
                // the synchronize below.
                unsafe { comm.issue(&op)? };
                comm.synchronize()?;
                let out = st.clone_dtoh(&mem).expect("copy back");
                comm.destroy()?;
                Ok(out[0])
            })
        })
        .collect();
    for (r, t) in threads.into_iter().enumerate() {
        println!("rank {r}: {}", t.join().expect("rank thread")?);
    }
    Ok(())
}

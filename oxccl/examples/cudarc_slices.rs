//! The safe API over cudarc slices: all_reduce, all_gather and a premul-sum.
//!
//! Run with 2 GPUs: `cargo run --release --example cudarc_slices -- 2`.

use oxccl::prelude::*;
use oxccl::{Comm, CommConfig, HostScalar, Nccl, ReduceOp, Scalar};

fn main() -> oxccl::Result<()> {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let nccl = Nccl::load().expect("no NCCL found: set OXCCL_NCCL_LIBRARY");
    println!(
        "NCCL {} from {}",
        nccl.version(),
        oxccl::escaped_path(nccl.library().path())
    );
    let id = nccl.unique_id()?;
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let nccl = nccl.clone();
            std::thread::spawn(move || -> oxccl::Result<()> {
                let mut comm = Comm::init_rank(&nccl, &id, r, n, r, &CommConfig::new())?;
                let st = comm.stream().clone();
                let x = st.clone_htod(&[r as f32; 8]).expect("upload");
                let mut sum = st.alloc_zeros::<f32>(8).expect("alloc");
                comm.all_reduce(&x, &mut sum, ReduceOp::Sum)?;
                let mut gathered = st.alloc_zeros::<f32>(8 * n as usize).expect("alloc");
                comm.all_gather(&x, &mut gathered)?;
                let mut scaled = st.alloc_zeros::<f32>(8).expect("alloc");
                comm.all_reduce(
                    &x,
                    &mut scaled,
                    ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(0.5))),
                )?;
                comm.synchronize()?;
                println!(
                    "rank {r}: sum {:?}, gathered {:?}, half-sum {:?}",
                    &st.clone_dtoh(&sum).expect("copy")[..2],
                    st.clone_dtoh(&gathered)
                        .expect("copy")
                        .iter()
                        .step_by(8)
                        .collect::<Vec<_>>(),
                    &st.clone_dtoh(&scaled).expect("copy")[..2],
                );
                comm.destroy()
            })
        })
        .collect();
    for t in threads {
        t.join().expect("rank thread")?;
    }
    Ok(())
}

//! Testing distributed code without a GPU: a 4-rank mock world on host memory, one thread per
//! rank, with the same traits the NCCL backend implements. A rank that calls with the wrong
//! count is reported as a mismatch instead of hanging, as NCCL would.
//!
//! Run: `cargo run --example mock_world`.

use oxccl::core::{Communicator, Stream};
use oxccl::mock::World;
use oxccl::{CommOp, DataType, Error, RawBuf, RawBufMut, ReduceOp};

/// One rank's step of "training": all-reduce its gradient, averaged.
fn average(comm: &oxccl::mock::MockComm, grad: &mut [f32]) -> oxccl::Result<()> {
    let stream = comm.new_stream()?;
    let buf = RawBufMut::new(grad.as_mut_ptr() as usize, grad.len());
    let op = CommOp::AllReduce {
        send: buf.as_read(),
        recv: buf,
        dtype: DataType::Float32,
        op: ReduceOp::Avg,
    };
    // SAFETY: `grad` is host memory of `grad.len()` floats, alive and untouched until the
    // synchronize below.
    unsafe { comm.issue(&op, &stream)? };
    stream.synchronize()?;
    comm.poll().map(|_| ())
}

fn main() -> oxccl::Result<()> {
    let ranks = World::new(4)?;
    let threads: Vec<_> = ranks
        .into_iter()
        .map(|comm| {
            std::thread::spawn(move || {
                let r = comm.rank();
                let mut grad = vec![r as f32; 3];
                average(&comm, &mut grad).map(|_| (r, grad))
            })
        })
        .collect();
    for t in threads {
        let (r, grad) = t.join().expect("rank thread")?;
        println!("rank {r}: averaged gradient {grad:?}");
    }

    // A bug NCCL would turn into a hang: rank 1 sends one element fewer.
    let ranks = World::new(2)?;
    let threads: Vec<_> = ranks
        .into_iter()
        .map(|comm| {
            std::thread::spawn(move || {
                let n = if comm.rank() == 1 { 3 } else { 4 };
                let data = vec![1.0f32; n];
                let mut out = vec![0.0f32; n];
                let stream = comm.new_stream()?;
                let op = CommOp::AllReduce {
                    send: RawBuf::new(data.as_ptr() as usize, n),
                    recv: RawBufMut::new(out.as_mut_ptr() as usize, n),
                    dtype: DataType::Float32,
                    op: ReduceOp::Sum,
                };
                // SAFETY: host buffers of `n` floats, alive until the synchronize below.
                unsafe { comm.issue(&op, &stream)? };
                stream.synchronize()?;
                comm.poll().map(|_| ())
            })
        })
        .collect();
    for t in threads {
        match t.join().expect("rank thread") {
            Err(Error::Mismatch { what, detail }) => {
                println!("caught: ranks disagree on {what}: {detail}")
            }
            other => println!("unexpected: {other:?}"),
        }
    }
    Ok(())
}

//! `Comm::capture` and `CommGraph`: what a capture records, that each launch runs it again
//! (values after every launch), what a launch checks (the captured buffers, the captured
//! communicator, its state), and what a capture refuses. Each communicator runs its operation
//! once before capturing: NCCL connects peers at first use, which a capture forbids.

use super::{down, gpus, on_gpus, refused_arg, refused_capture, up, zeros};
use cudarc::driver::{CudaSlice, DevicePtrMut};
use oxccl_comm::core::CaptureError;
use oxccl_comm::{CommConfig, CommOp, DataType, Error, HostScalar, RawBufMut, ReduceOp, Scalar};

fn twice() -> ReduceOp {
    ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(2.0)))
}

#[test]
fn each_launch_runs_the_captured_operations_again() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let mut buf = up(&c, &[1.0f32; 4]);
        c.all_reduce_in_place(&mut buf, ReduceOp::Max).unwrap();
        // Each run multiplies by 2n: a premul-sum by 2 of n equal values.
        let g = c
            .capture(|c| c.all_reduce_in_place(&mut buf, twice()))
            .unwrap();
        assert_eq!((g.ops(), g.buffers()), (1, 1));
        assert!(!c.is_capturing());
        assert_eq!(down(&c, &buf), [1.0; 4], "a capture runs nothing");
        let k = 2.0 * n as f32;
        let mut want = 1.0;
        for launch in 1..=3 {
            g.replay(&mut c, &mut [&mut buf]).unwrap();
            want *= k;
            assert_eq!(down(&c, &buf), [want; 4], "after launch {launch}");
        }
        // Launches queued back to back run in order.
        for _ in 0..3 {
            g.replay(&mut c, &mut [&mut buf]).unwrap();
        }
        assert_eq!(down(&c, &buf), [want * k * k * k; 4]);
        // The graph may outlive its communicator; dropping it then is harmless.
        c.destroy().unwrap();
        drop(g);
    });
}

#[test]
fn a_graph_over_buffers_of_several_types_reads_their_new_contents() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let mut x = up(&c, &[r as f32 + 1.0; 3]);
        let mut y = zeros::<f32>(&c, 3);
        let mut z = up(&c, &[r as i32; 2]);
        c.all_reduce(&x, &mut y, ReduceOp::Sum).unwrap();
        c.broadcast_in_place(&mut z, 0).unwrap();
        c.synchronize().unwrap();
        let g = c
            .capture(|c| {
                c.all_reduce(&x, &mut y, ReduceOp::Sum)?;
                c.broadcast_in_place(&mut z, 0)
            })
            .unwrap();
        assert_eq!((g.ops(), g.buffers()), (2, 3));
        for round in 1..=3u8 {
            // New inputs between launches: the graph reads the buffers as they are now.
            let v = f32::from(round) * (r as f32 + 1.0);
            c.stream().memcpy_htod(&[v; 3], &mut x).unwrap();
            c.stream()
                .memcpy_htod(&[i32::from(round) * 10 + r as i32; 2], &mut z)
                .unwrap();
            g.bind(&mut c, &mut x)
                .buf(&mut y)
                .buf(&mut z)
                .replay()
                .unwrap();
            let sum = f32::from(round) * (n * (n + 1) / 2) as f32;
            assert_eq!(down(&c, &y), [sum; 3], "round {round}");
            assert_eq!(down(&c, &z), [i32::from(round) * 10; 2], "round {round}");
        }
        c.destroy().unwrap();
    });
}

#[test]
fn a_launch_checks_its_buffers_its_communicator_and_its_state() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let mut buf = up(&c, &[1.0f32; 4]);
        let mut other = up(&c, &[1.0f32; 4]);
        let mut short = up(&c, &[1.0f32; 3]);
        c.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
        let g = c
            .capture(|c| c.all_reduce_in_place(&mut buf, ReduceOp::Sum))
            .unwrap();
        // Another buffer of the same length, a shorter one, none, one too many.
        refused_capture(g.replay(&mut c, &mut [&mut other]), CaptureError::Mismatch);
        refused_capture(g.replay(&mut c, &mut [&mut short]), CaptureError::Mismatch);
        refused_capture(
            g.replay::<CudaSlice<f32>, f32>(&mut c, &mut []),
            CaptureError::Mismatch,
        );
        refused_capture(
            g.replay(&mut c, &mut [&mut buf, &mut other]),
            CaptureError::Mismatch,
        );
        // Another communicator (a child of the same ranks) than the captured one.
        let mut child = c
            .split(Some(0), 0, &CommConfig::new())
            .unwrap()
            .expect("member");
        refused_capture(
            g.replay(&mut child, &mut [&mut buf]),
            CaptureError::Mismatch,
        );
        child.destroy().unwrap();
        // The captured communicator aborted.
        c.abort("stopped by the test");
        match g.replay(&mut c, &mut [&mut buf]) {
            Err(Error::InvalidState { .. }) => {}
            other => panic!("expected InvalidState, got {other:?}"),
        }
        c.destroy().unwrap();
    });
}

#[test]
fn a_capture_refuses_barriers_nesting_launches_and_host_waits() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let mut buf = up(&c, &[1.0f32; 4]);
        c.all_reduce_in_place(&mut buf, ReduceOp::Max).unwrap();
        refused_capture(c.capture(|c| c.barrier()), CaptureError::Unsupported);
        assert!(!c.is_capturing());
        // A capture inside a capture: the inner one is refused, the outer goes on.
        let g = c
            .capture(|c| {
                refused_capture(c.capture(|_| Ok(())), CaptureError::AlreadyCapturing);
                c.all_reduce_in_place(&mut buf, ReduceOp::Max)
            })
            .unwrap();
        assert_eq!(g.ops(), 1);
        // Launching a graph while capturing.
        let mut inner = Ok(());
        let g2 = c
            .capture(|c| {
                inner = g.replay(c, &mut [&mut buf]);
                Ok(())
            })
            .unwrap();
        refused_capture(inner, CaptureError::Forbidden);
        assert_eq!(g2.ops(), 0);
        // An error of the body ends the capture and is returned.
        let mut short = zeros::<f32>(&c, 3);
        refused_arg(c.capture(|c| c.all_gather(&buf, &mut short)), "recv");
        assert!(!c.is_capturing());
        // A host wait inside a capture: CUDA invalidates the capture, no graph comes back.
        assert!(c.capture(|c| c.synchronize()).is_err());
        assert!(!c.is_capturing());
        // After each refusal the communicator works, and so does the graph.
        g.replay(&mut c, &mut [&mut buf]).unwrap();
        c.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
        assert_eq!(down(&c, &buf), [n as f32; 4]);
        c.destroy().unwrap();
    });
}

/// A raw operation (`Comm::issue`) is captured but its buffers are unknown to the graph: the
/// checked launch refuses it, the unchecked one runs it.
#[test]
fn a_graph_with_a_raw_operation_launches_only_unchecked() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let mut buf = up(&c, &[1.0f32; 2]);
        c.all_reduce_in_place(&mut buf, ReduceOp::Max).unwrap();
        c.synchronize().unwrap();
        let stream = c.stream().clone();
        let g = {
            let (ptr, _sync) = buf.device_ptr_mut(&stream);
            let raw = RawBufMut::new(ptr as usize, 2);
            c.capture(|c| {
                let op = CommOp::all_reduce_in_place(raw, DataType::Float32, twice());
                // SAFETY: `buf` is this device's memory of 2 f32, alive and used by nothing
                // else until the stream's work is done (synchronized below).
                unsafe { c.issue(&op) }
            })
            .unwrap()
        };
        refused_capture(g.replay(&mut c, &mut [&mut buf]), CaptureError::Unsupported);
        // SAFETY: as above; the launch is synchronized before `buf` is read or dropped.
        unsafe { g.replay_unchecked(&mut c) }.unwrap();
        assert_eq!(down(&c, &buf), [2.0 * n as f32; 2]);
        c.destroy().unwrap();
    });
}

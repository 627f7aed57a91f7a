//! The backend contract on real NCCL: an operation waits out a nonblocking init, an init past
//! its time limit is aborted with a timeout, and threads sharing one communicator take turns.

use super::{gpus, nccl, on_threads};
use oxccl::core::{Backend, CommAbort, Communicator, Stream};
use oxccl::{CommConfig, CommOp, CommState, DataType, Device, Error, RawBuf, RawBufMut, ReduceOp};
use std::time::Duration;

#[test]
fn gpu_nonblocking_init_past_its_limit_is_aborted() {
    let Some(_) = gpus() else { return };
    // Rank 0 of 2 alone: its nonblocking init can never complete.
    let lib = nccl().with_timeout(Duration::from_millis(500));
    let id = lib.unique_id().unwrap();
    let nb = CommConfig::new().blocking(false);
    let comm = lib
        .init_rank(&id, 0, 2, Device(0), &nb)
        .expect("init posted");
    assert_eq!(comm.state(), CommState::Initializing);
    let handle = comm.abort_handle();
    let st = comm.new_stream().unwrap();
    let buf = st.cuda().alloc_zeros::<f32>(4).unwrap();
    let addr = {
        use cudarc::driver::DevicePtr;
        buf.device_ptr(st.cuda()).0 as usize
    };
    let op = CommOp::AllReduce {
        send: RawBuf::new(addr, 4),
        recv: RawBufMut::new(addr, 4),
        dtype: DataType::Float32,
        op: ReduceOp::Sum,
    };
    let began = std::time::Instant::now();
    // SAFETY: 4 floats of this device, alive until the end; the op never runs.
    let e = unsafe { comm.issue(&op, &st) }.unwrap_err();
    let took = began.elapsed();
    assert!(
        matches!(e, Error::Timeout { ref what, after_ms } if what.contains("init") && after_ms >= 500),
        "{e:?}"
    );
    // At once: NCCL's abort of the half-made communicator runs on a thread of its own.
    assert!(took < Duration::from_millis(800), "{took:?}");
    assert!(comm.state().is_aborted(), "{}", comm.state());
    assert!(handle.poll().is_err());
    assert!(oxccl::wait_for_aborts(Duration::from_secs(60)));
    assert_eq!(comm.state(), CommState::Aborted);
    assert_eq!(handle.state(), CommState::Aborted);
    println!("nonblocking init past its limit: {e}");
}

#[test]
fn gpu_threads_sharing_one_comm_take_turns() {
    let Some(n) = gpus() else { return };
    let sums = on_threads(n, CommConfig::new(), move |_, c| {
        let comm = c.backend();
        // One stream, so that every rank runs the collectives in the order they were issued.
        let st = comm.new_stream().unwrap();
        let per_thread = 50;
        let outs = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let st = st.clone();
                    s.spawn(move || {
                        let ones = st.cuda().clone_htod(&[1.0f32; 256]).unwrap();
                        let mut outs = Vec::new();
                        for _ in 0..per_thread {
                            let out = st.cuda().alloc_zeros::<f32>(256).unwrap();
                            let (a, b) = {
                                use cudarc::driver::DevicePtr;
                                (
                                    ones.device_ptr(st.cuda()).0 as usize,
                                    out.device_ptr(st.cuda()).0 as usize,
                                )
                            };
                            let op = CommOp::AllReduce {
                                send: RawBuf::new(a, 256),
                                recv: RawBufMut::new(b, 256),
                                dtype: DataType::Float32,
                                op: ReduceOp::Sum,
                            };
                            // SAFETY: both buffers are 256 floats of this device, kept alive
                            // until the stream is synchronized below.
                            unsafe { comm.issue(&op, &st) }.unwrap();
                            outs.push(out);
                        }
                        st.synchronize().unwrap();
                        let _keep = ones;
                        outs.iter()
                            .map(|o| st.cuda().clone_dtoh(o).unwrap()[255])
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        st.synchronize().unwrap();
        c.destroy().unwrap();
        outs
    });
    for s in sums {
        assert_eq!(s.len(), 100);
        assert!(s.iter().all(|v| *v == n as f32), "{s:?}");
    }
    // The library's group is per thread: a clone of the backend sees the same depth.
    let lib = nccl();
    assert!(lib.clone().group_end().is_err());
}

//! An operation through `Comm` (no process group) whose buffers mix a symmetric window and
//! plain memory is refused before NCCL sees it, naming the plain buffer: with NCCL 2.28 such
//! an all-to-all gives wrong results or hangs (docs/BENCHMARKS.md#buffer-modes-and-the-tune-table).
//! With both buffers in windows it runs and its values are right. Runs when
//! `OXCCL_TEST_GPUS` is 2 or more and skips, saying so, otherwise.

mod common;

use oxccl::core::Backend as _;
use oxccl::core::Windows;
use oxccl::{Comm, CommConfig, CommOp, DataType, Error, NcclMem, RawBuf, RawBufMut};

const N: usize = 1 << 16;

#[test]
fn gpu_comm_refuses_a_window_beside_plain_memory() {
    let Some(lib) = common::nccl_with_windows(2) else {
        return;
    };
    let id = lib.unique_id().expect("unique id");
    let outcomes: Vec<String> = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..2u32)
            .map(|r| {
                let lib = lib.clone();
                s.spawn(move || {
                    let mut comm =
                        Comm::init_rank(&lib, &id, r, 2, r, &CommConfig::new()).expect("init");
                    let bytes = N * 4;
                    let send = NcclMem::alloc(lib.library(), bytes).expect("ncclMemAlloc");
                    let recv = NcclMem::alloc(lib.library(), bytes).expect("ncclMemAlloc");
                    let plain = comm.stream().alloc_zeros::<f32>(N).expect("cudarc memory");
                    // Rank r sends r+1 everywhere: part q of recv holds q+1 afterwards.
                    let ones = vec![r as f32 + 1.0; N];
                    comm.stream().context().bind_to_thread().unwrap();
                    // SAFETY: `send` holds N f32 on this device; synchronous copy.
                    unsafe {
                        cudarc::driver::result::memcpy_htod_sync(send.addr() as u64, &ones).unwrap()
                    };
                    let w_send = comm.backend().register_window(send.addr(), bytes).unwrap();
                    let w_recv = comm.backend().register_window(recv.addr(), bytes).unwrap();
                    let a2a = |recv_addr: usize| CommOp::AllToAll {
                        send: RawBuf::new(send.addr(), N),
                        recv: RawBufMut::new(recv_addr, N),
                        dtype: DataType::Float32,
                    };
                    let st = comm.stream().clone();
                    let (plain_addr, _g) = {
                        use cudarc::driver::DevicePtr;
                        let (p, g) = plain.device_ptr(&st);
                        (p as usize, g)
                    };
                    // SAFETY: live device buffers of N elements on this device; refused
                    // before any NCCL call (asserted), or run and synchronized below.
                    let mixed = unsafe { comm.issue(&a2a(plain_addr)) };
                    let refused = match mixed {
                        Err(Error::InvalidArgument { arg, expected }) => {
                            assert_eq!(arg, "recv", "rank {r}: {expected}");
                            format!("refused recv: {expected}")
                        }
                        other => panic!("rank {r}: a window beside plain memory gave {other:?}"),
                    };
                    // SAFETY: as above, both in windows.
                    unsafe { comm.issue(&a2a(recv.addr())) }.expect("all in windows");
                    comm.synchronize().unwrap();
                    let mut got = vec![0f32; N];
                    // SAFETY: `recv` holds N f32; the stream was synchronized.
                    unsafe {
                        cudarc::driver::result::memcpy_dtoh_sync(&mut got, recv.addr() as u64)
                            .unwrap()
                    };
                    let half = N / 2;
                    assert!(got[..half].iter().all(|&x| x == 1.0), "rank {r}: part 0");
                    assert!(got[half..].iter().all(|&x| x == 2.0), "rank {r}: part 1");
                    comm.backend().deregister_window(w_send).unwrap();
                    comm.backend().deregister_window(w_recv).unwrap();
                    drop(_g);
                    comm.destroy().expect("destroy");
                    refused
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    });
    println!("RESULT {}", outcomes[0]);
}

//! A collective captured into a graph before it ever ran (2 GPUs): NCCL connects a
//! communicator to its peers at the first operation that needs each connection, which a
//! capture forbids (NCCL 2.28: "failed to peer with device: operation not
//! permitted when stream is capturing", then `ncclInternalError`). The failure must come back
//! as a capture error saying so and what to do; doing that (the operation once outside the
//! capture) must then capture and launch with the right values. Runs when `OXCCL_TEST_GPUS`
//! is 2 or more and skips, saying so, otherwise.

mod common;

use oxccl::core::CaptureError;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, PrefixStore, Store};
use oxccl::{Device, Error, Nccl, ReduceOp};
use std::sync::Arc;

fn group(lib: &Nccl, store: &Arc<dyn Store>, name: &str, r: u32) -> ProcessGroup<Nccl> {
    let store: Arc<dyn Store> = Arc::new(PrefixStore::new(name, store.clone()));
    let opts = PgOptions {
        bound_device: Some(Device(r)),
        ..PgOptions::default()
    };
    ProcessGroup::new(lib.clone(), store, r, 2, opts).unwrap()
}

/// Captures one in-place sum all_reduce of `buf` on `pg`, launches it twice and returns
/// what `buf` holds then.
fn capture_twice(
    pg: &ProcessGroup<Nccl>,
    buf: &mut cudarc::driver::CudaSlice<f32>,
) -> oxccl::Result<Vec<f32>> {
    let graph = pg.capture(|pg| pg.all_reduce(buf, ReduceOp::Sum).map(drop))?;
    graph.replay(&mut [&mut *buf])?;
    graph.replay(&mut [&mut *buf])?.wait()?;
    pg.download(buf)
}

#[test]
fn gpu_first_collective_in_a_capture_says_to_run_it_once_before() {
    if !common::gpus_at_least(2) {
        return;
    }
    let lib = Nccl::load().unwrap_or_else(|e| panic!("loading NCCL: {e}"));
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let outcomes: Vec<String> = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..2u32)
            .map(|r| {
                let (lib, store) = (lib.clone(), store.clone());
                s.spawn(move || {
                    // A fresh group whose first all_reduce is captured.
                    let fresh = group(&lib, &store, "fresh", r);
                    let mut buf = fresh.upload(&[1.0f32 + r as f32; 256]).unwrap();
                    let first = match capture_twice(&fresh, &mut buf) {
                        // A library that connected at init: 3, then x2 per launch.
                        Ok(got) => {
                            assert!(got.iter().all(|&x| x == 6.0), "rank {r}: {:?}", &got[..4]);
                            "captured first time".to_string()
                        }
                        Err(Error::Capture {
                            kind: CaptureError::Unsupported,
                            detail,
                        }) => {
                            assert!(
                                detail.contains("NCCL_RUNTIME_CONNECT")
                                    && detail.contains("outside the capture"),
                                "rank {r}: {detail}"
                            );
                            format!("refused: {detail}")
                        }
                        Err(e) => panic!("rank {r}: a captured first all_reduce gave {e:?}"),
                    };
                    fresh.abort("test: done with the fresh group");
                    // What the error says to do: the operation once outside the capture.
                    let warm = group(&lib, &store, "warm", r);
                    let mut buf = warm.upload(&[1.0f32 + r as f32; 256]).unwrap();
                    warm.all_reduce(&mut buf, ReduceOp::Sum)
                        .unwrap()
                        .wait()
                        .unwrap();
                    // 3 after the eager one; x2 per launch, twice: 12.
                    let got = capture_twice(&warm, &mut buf).unwrap();
                    assert!(got.iter().all(|&x| x == 12.0), "rank {r}: {:?}", &got[..4]);
                    warm.destroy();
                    first
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    });
    println!("RESULT first_capture rank0: {}", outcomes[0]);
}

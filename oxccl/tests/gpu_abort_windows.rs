//! An abort never waits for peers, also with symmetric windows (NCCL 2.27+, 2 GPUs): the
//! window deregistration is collective (on a blocking communicator it waits for the peer's
//! matching call), so an abort that deregistered windows first would block until the peer
//! aborted too. Runs when `OXCCL_TEST_GPUS` is 2 or more and skips, saying so, otherwise.

mod common;

use oxccl::pg::{PgOptions, ProcessGroup, RegMode};
use oxccl::store::{MemStore, Store};
use oxccl::Device;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// How long the peer waits before it aborts too: an abort that waits for it takes this long.
const PEER_LATE: Duration = Duration::from_secs(3);

#[test]
fn gpu_abort_with_windows_does_not_wait_for_the_peer() {
    let Some(lib) = common::nccl_with_windows(2) else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let both = Arc::new(Barrier::new(2));
    let took: Vec<Duration> = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..2u32)
            .map(|r| {
                let (lib, store, both) = (lib.clone(), store.clone(), both.clone());
                s.spawn(move || {
                    let opts = PgOptions {
                        bound_device: Some(Device(r)),
                        ..PgOptions::default()
                    };
                    let pg = ProcessGroup::new(lib, store, r, 2, opts).unwrap();
                    let buf = pg.upload_comm(&[1.0f32; 1024]).unwrap();
                    // Collective: both ranks put their buffer in a window.
                    pg.register_buffer(&buf, RegMode::Window).unwrap();
                    both.wait();
                    if r == 1 {
                        std::thread::sleep(PEER_LATE);
                    }
                    let began = Instant::now();
                    pg.abort("test: rank aborts while its peer is elsewhere");
                    let took = began.elapsed();
                    assert_eq!(pg.comm_state(), Some(oxccl::CommState::Aborted));
                    drop(buf);
                    took
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    });
    println!(
        "RESULT abort_ms rank0={} rank1={}",
        took[0].as_millis(),
        took[1].as_millis()
    );
    assert!(
        took[0] < Duration::from_secs(1),
        "rank 0's abort waited {:?} (its peer aborted {PEER_LATE:?} later)",
        took[0]
    );
}

//! One-sided operations through the process group on the mock (ranks as threads, NCCL 2.32.3
//! imitated): a put with a signal into the peer's window buffer, the peer's wait, the answer
//! back (a ping-pong); bad puts refused before the library.

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup, RegMode, SignalFrom};
use oxccl::store::{MemStore, Store};
use oxccl::{Error, FeatureSet, Version};
use std::sync::Arc;
use std::time::Duration;

fn groups(n: u32, version: Version) -> Vec<ProcessGroup<MockBackend>> {
    let mock = MockBackend::with_options(
        FeatureSet::for_version(version),
        oxccl::mock::FaultPlan::new(),
        1,
        Duration::from_secs(10),
    );
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let (mock, store) = (mock.clone(), store.clone());
            std::thread::spawn(move || {
                let opts = PgOptions {
                    device: oxccl::Device(r),
                    heartbeat: None,
                    ..PgOptions::default()
                };
                ProcessGroup::new(mock, store, r, n, opts).unwrap()
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn ping_pong_through_windows() {
    let pgs = groups(2, Version::new(2, 32, 3));
    let hs: Vec<_> = pgs
        .into_iter()
        .map(|pg| {
            std::thread::spawn(move || {
                let me = pg.global_rank();
                let other = 1 - me;
                let mut win = pg.alloc_comm::<f32>(16).unwrap();
                pg.register_buffer(&win, RegMode::Window).unwrap();
                let mut last = Vec::new();
                for round in 0..10u32 {
                    // A put's data lies in a window too: both ranks put one in each round
                    // (windows are made collectively, in the same order), the sender's data.
                    let v = round as f32;
                    let src = pg.upload_comm(&[v, v + 1.0, v + 2.0, v + 3.0]).unwrap();
                    pg.register_buffer(&src, RegMode::Window).unwrap();
                    if (round % 2) == me {
                        pg.put_signal(&src, other, &win, 4, 0)
                            .unwrap()
                            .wait()
                            .unwrap();
                    } else {
                        let from = [SignalFrom {
                            peer: other,
                            signal: 0,
                            count: 1,
                        }];
                        pg.wait_signal(&from, &mut win).unwrap().wait().unwrap();
                        let got = pg.download_any(&win).unwrap();
                        let v = round as f32;
                        assert_eq!(&got[4..8], &[v, v + 1.0, v + 2.0, v + 3.0], "round {round}");
                        last = got;
                    }
                }
                (me, last)
            })
        })
        .collect();
    for h in hs {
        let (me, last) = h.join().unwrap();
        // Rank 1 received the even rounds (the last: 8), rank 0 the odd ones (9).
        let v = if me == 1 { 8.0 } else { 9.0 };
        assert_eq!(&last[4..8], &[v, v + 1.0, v + 2.0, v + 3.0]);
        assert_eq!(&last[..4], &[0.0; 4], "the rest of the window untouched");
    }
}

#[test]
fn bad_puts_are_refused_before_the_library() {
    let pgs = groups(2, Version::new(2, 32, 3));
    let hs: Vec<_> = pgs
        .into_iter()
        .map(|pg| {
            std::thread::spawn(move || {
                let win = pg.alloc_comm::<f32>(16).unwrap();
                pg.register_buffer(&win, RegMode::Window).unwrap();
                let src = pg.upload_comm(&[1.0f32; 4]).unwrap();
                pg.register_buffer(&src, RegMode::Window).unwrap();
                let past = pg.put_signal(&src, 1, &win, 13, 0).unwrap_err();
                assert!(
                    matches!(past, Error::InvalidArgument { arg: "offset", .. }),
                    "{past}"
                );
                let plain = pg.upload(&[0.0f32; 16]).unwrap();
                let e = pg.put_signal(&src, 1, &plain, 0, 0).unwrap_err();
                assert!(
                    matches!(e, Error::InvalidArgument { arg: "window", .. }),
                    "{e}"
                );
                let unregistered = pg.alloc_comm::<f32>(16).unwrap();
                let e = pg.put_signal(&src, 1, &unregistered, 0, 0).unwrap_err();
                assert!(
                    matches!(e, Error::InvalidArgument { arg: "window", .. }),
                    "{e}"
                );
                let e = pg.put_signal(&src, 7, &win, 0, 0).unwrap_err();
                assert!(
                    matches!(e, Error::InvalidArgument { arg: "peer", .. }),
                    "{e}"
                );
                let e = pg.put_signal(&plain, 1, &win, 0, 0).unwrap_err();
                assert!(
                    matches!(e, Error::InvalidArgument { arg: "src", .. }),
                    "{e}"
                );
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let old = groups(1, Version::new(2, 28, 9));
    let e = old[0].signal(0, 0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: oxccl::Feature::OneSided,
                ..
            }
        ),
        "{e}"
    );
}

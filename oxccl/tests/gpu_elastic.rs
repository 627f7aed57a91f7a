//! Revoke, shrink and the elastic process group on GPUs, a thread per GPU: NCCL's revoke
//! stops an all-reduce waiting for a rank that never calls it and the survivors shrink it
//! away; an elastic group whose rank stops (its communicator aborted, its thread gone) goes
//! on without it after the group's timeout and the survivors' window.
//! Runs when `OXCCL_TEST_GPUS` is 2 or more and the library has revoke (NCCL 2.28.7+); skips,
//! saying so, otherwise.

mod common;
#[allow(dead_code)]
#[path = "gpu/values.rs"]
mod values;

use oxccl::core::OneSided;
use oxccl::core::{Backend as _, Communicator as _, ShrinkMode};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::{Comm, CommConfig, CommState, Error, Feature, Nccl, ReduceOp};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The GPUs to use and the library, when there are 2 or more and it can revoke.
fn setup() -> Option<(u32, Nccl)> {
    if !common::gpus_at_least(2) {
        return None;
    }
    let n = std::env::var("OXCCL_TEST_GPUS").ok()?.parse().ok()?;
    let lib = Nccl::load().unwrap_or_else(|e| panic!("loading NCCL: {e}"));
    if !lib.features().has(Feature::Revoke) {
        eprintln!("skipped: NCCL {} has no revoke (2.28.7+)", lib.version());
        return None;
    }
    Some((n, lib))
}

#[test]
fn gpu_revoke_stops_a_collective_and_the_survivors_shrink() {
    let Some((n, lib)) = setup() else { return };
    let id = lib.unique_id().unwrap();
    let done = Arc::new(Barrier::new(n as usize));
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (lib, done) = (lib.clone(), done.clone());
            std::thread::spawn(move || {
                let mut c = Comm::init_rank(&lib, &id, r, n, r, &CommConfig::new()).unwrap();
                let st = c.stream().clone();
                if r == n - 1 {
                    // Never calls the collective; leaves once the others shrank it away.
                    done.wait();
                    c.backend().abort("left out");
                    return None;
                }
                let mut x = st.clone_htod(&[1i32; 1024]).unwrap();
                c.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                let began = Instant::now();
                let revoked = c.revoke("the last rank never called");
                let revoke_ms = began.elapsed().as_millis();
                assert_eq!(revoked, Ok(oxccl::Progress::Done), "rank {r}");
                assert_eq!(c.backend().state(), CommState::Revoked);
                // The stream passes the stopped collective: nothing hangs.
                st.synchronize().unwrap();
                let refused = c.all_reduce_in_place(&mut x, ReduceOp::Sum);
                assert!(
                    matches!(
                        refused,
                        Err(Error::InvalidState {
                            state: CommState::Revoked,
                            ..
                        })
                    ),
                    "rank {r}: {refused:?}"
                );
                let mut s = c
                    .shrink(&[n - 1], &CommConfig::new(), ShrinkMode::Default)
                    .unwrap();
                assert_eq!((s.rank(), s.size()), (r, n - 1));
                let sst = s.stream().clone();
                let mut y = sst.clone_htod(&[1i32; 1024]).unwrap();
                s.all_reduce_in_place(&mut y, ReduceOp::Sum).unwrap();
                s.synchronize().unwrap();
                let sum = sst.clone_dtoh(&y).unwrap()[0];
                s.destroy().unwrap();
                drop(c);
                done.wait();
                Some((revoke_ms, sum))
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        if let Some((ms, sum)) = h.join().expect("rank thread") {
            assert_eq!(sum, (n - 1) as i32, "rank {r}");
            println!("rank {r}: revoke took {ms} ms; the shrunk group's sum {sum}");
        }
    }
}

#[test]
fn gpu_elastic_group_goes_on_without_a_stopped_rank() {
    let Some((n, lib)) = setup() else { return };
    if n < 3 {
        eprintln!("skipped: the elastic group's test needs 3 GPUs or more");
        return;
    }
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let barrier = Arc::new(Barrier::new(n as usize));
    let timeout = Duration::from_secs(3);
    let lost = n - 2;
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (lib, store, barrier) = (lib.clone(), store.clone(), barrier.clone());
            std::thread::spawn(move || {
                let opts = PgOptions {
                    bound_device: Some(oxccl::Device(r)),
                    device: oxccl::Device(r),
                    elastic: true,
                    elastic_window: Duration::from_millis(500),
                    // The first init in a process makes CUDA contexts: a roomy limit for it.
                    timeout: Duration::from_secs(60),
                    heartbeat: None,
                    ..PgOptions::default()
                };
                let pg = ProcessGroup::new(lib, store, r, n, opts).unwrap();
                let mut b = pg.upload(&[1.0f32; 256]).unwrap();
                pg.all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .unwrap();
                pg.set_timeout(timeout);
                barrier.wait();
                if r == lost {
                    // Stops: its group destroyed (its monitor with it), it never calls again.
                    pg.destroy();
                    return None;
                }
                let began = Instant::now();
                let e = pg
                    .all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .expect_err("the step in flight");
                let took = began.elapsed();
                let mut b = pg.upload(&[1.0f32; 256]).unwrap();
                pg.all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .unwrap();
                let back = began.elapsed();
                let sum = pg.download(&b).unwrap()[0];
                let size = pg.size();
                pg.destroy();
                Some((e, took, back, sum, size))
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let Some((e, took, back, sum, size)) = h.join().expect("rank thread") else {
            continue;
        };
        match &e {
            Error::MembersLost {
                lost: l, epoch: 1, ..
            } => assert_eq!(l.kept(), &[lost]),
            e => panic!("rank {r}: {e}"),
        }
        assert_eq!((sum, size), ((n - 1) as f32, n - 1), "rank {r}");
        assert!(
            back < timeout + Duration::from_secs(2),
            "rank {r}: {back:?}"
        );
        println!(
            "rank {r}: MembersLost after {} ms; training again (shrunk, {} ranks) {} ms after the step began",
            took.as_millis(),
            size,
            back.as_millis()
        );
    }
}

/// The GPUs and a library with `feature` (2.29+ ones: run with NCCL 2.32.3 on the path).
fn setup_for(feature: Feature) -> Option<(u32, Nccl)> {
    let (n, lib) = setup()?;
    if !lib.features().has(feature) {
        eprintln!("skipped: NCCL {} has no {feature}", lib.version());
        return None;
    }
    Some((n, lib))
}

/// Runs `body` on `n` ranks, a thread per GPU, each with its own `Comm` made with `cfg`;
/// what each returns, by rank.
fn on_ranks<T: Send + 'static>(
    lib: &Nccl,
    n: u32,
    cfg: CommConfig,
    body: impl Fn(u32, Comm, &Nccl) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let id = lib.unique_id().unwrap();
    let body = Arc::new(body);
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (lib, cfg, body) = (lib.clone(), cfg.clone(), body.clone());
            std::thread::spawn(move || {
                let c = Comm::init_rank(&lib, &id, r, n, r, &cfg).unwrap();
                body(r, c, &lib)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread"))
        .collect()
}

#[test]
fn gpu_grow_running_ranks_take_in_a_new_one() {
    let Some((n, lib)) = setup_for(Feature::Grow) else {
        return;
    };
    let running = n - 1;
    let id = lib.unique_id().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<oxccl::UniqueId>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (lib, tx, rx) = (lib.clone(), tx.clone(), rx.clone());
            std::thread::spawn(move || {
                let grown = if r < running {
                    let mut c =
                        Comm::init_rank(&lib, &id, r, running, r, &CommConfig::new()).unwrap();
                    let gid = if r == 0 {
                        let gid = c.grow_id().unwrap();
                        for _ in 0..running {
                            tx.send(gid).unwrap();
                        }
                        gid
                    } else {
                        rx.lock().unwrap().recv().unwrap()
                    };
                    let g = c.grow(n, &gid, &CommConfig::new()).unwrap();
                    drop(c);
                    g
                } else {
                    // The new rank: the id the root made, then its part of the grow.
                    let gid = rx.lock().unwrap().recv().unwrap();
                    Comm::join_grown(&lib, &gid, r, n, r, &CommConfig::new()).unwrap()
                };
                assert_eq!((grown.rank(), grown.size()), (r, n));
                let mut s = grown;
                let st = s.stream().clone();
                let mut x = st.clone_htod(&[1i32 << r; 64]).unwrap();
                s.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
                s.synchronize().unwrap();
                let sum = st.clone_dtoh(&x).unwrap()[0];
                s.destroy().unwrap();
                sum
            })
        })
        .collect();
    for (r, h) in handles.into_iter().enumerate() {
        let sum = h.join().expect("rank thread");
        assert_eq!(sum, (1 << n) - 1, "rank {r}");
    }
    println!("grow: {running} running ranks and 1 new one all-reduced over {n}");
}

#[test]
fn gpu_suspend_releases_memory_and_resume_runs_again() {
    let Some((n, lib)) = setup_for(Feature::SuspendResume) else {
        return;
    };
    let results = on_ranks(&lib, n, CommConfig::new(), move |r, mut c, _| {
        let st = c.stream().clone();
        let mut x = st.clone_htod(&[1.0f32; 1 << 20]).unwrap();
        c.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
        c.synchronize().unwrap();
        let before = c.mem_stats().unwrap();
        c.suspend(true).unwrap();
        let during = c.mem_stats().unwrap();
        assert_eq!(c.backend().state(), CommState::Suspended);
        let refused = c.all_reduce_in_place(&mut x, ReduceOp::Sum);
        assert!(
            matches!(
                refused,
                Err(Error::InvalidState {
                    state: CommState::Suspended,
                    ..
                })
            ),
            "rank {r}: {refused:?}"
        );
        c.resume().unwrap();
        c.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
        c.synchronize().unwrap();
        let v = st.clone_dtoh(&x).unwrap()[0];
        c.destroy().unwrap();
        (before, during, v)
    });
    for (r, (before, during, v)) in results.into_iter().enumerate() {
        assert!(!before.suspended && during.suspended, "rank {r}");
        assert_eq!(v, (n * n) as f32, "rank {r}");
        println!("rank {r}: memory before {before:?}, suspended {during:?}");
    }
}

#[test]
fn gpu_one_sided_ping_pong_through_windows() {
    let Some((_, lib)) = setup_for(Feature::OneSided) else {
        return;
    };
    use oxccl::pg::{RegMode, SignalFrom};
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let handles: Vec<_> = (0..2u32)
        .map(|r| {
            let (lib, store) = (lib.clone(), store.clone());
            std::thread::spawn(move || {
                let opts = PgOptions {
                    bound_device: Some(oxccl::Device(r)),
                    device: oxccl::Device(r),
                    heartbeat: None,
                    timeout: Duration::from_secs(30),
                    ..PgOptions::default()
                };
                let pg = ProcessGroup::new(lib, store, r, 2, opts).unwrap();
                let other = 1 - r;
                let mut win = pg.alloc_comm::<f32>(1024).unwrap();
                pg.register_buffer(&win, RegMode::Window).unwrap();
                let from = [SignalFrom {
                    peer: other,
                    signal: 0,
                    count: 1,
                }];
                for round in 0..20u32 {
                    // A put's data lies in a window too: both ranks put one in each round
                    // (windows are made collectively, in the same order).
                    let v = round as f32;
                    let src = pg.upload_comm(&[v; 256]).unwrap();
                    pg.register_buffer(&src, RegMode::Window).unwrap();
                    if round % 2 == r {
                        pg.put_signal(&src, other, &win, 512, 0)
                            .unwrap()
                            .wait()
                            .unwrap();
                    } else {
                        pg.wait_signal(&from, &mut win).unwrap().wait().unwrap();
                        let got = pg.download_any(&win).unwrap();
                        assert_eq!(&got[512..768], &[v; 256][..], "round {round}");
                        assert!(got[..512].iter().all(|x| *x == 0.0));
                    }
                }
                let src = pg.upload_comm(&[1.0f32; 8]).unwrap();
                pg.register_buffer(&src, RegMode::Window).unwrap();
                let past = pg.put_signal(&src, other, &win, 1020, 0).unwrap_err();
                assert!(
                    matches!(past, Error::InvalidArgument { arg: "offset", .. }),
                    "{past}"
                );
                let plain = pg.upload(&[1.0f32; 8]).unwrap();
                let e = pg.put_signal(&plain, other, &win, 0, 0).unwrap_err();
                assert!(
                    matches!(e, Error::InvalidArgument { arg: "src", .. }),
                    "{e}"
                );
                pg.destroy();
            })
        })
        .collect();
    for h in handles {
        h.join().expect("rank thread");
    }
    println!("one-sided: 20 rounds of put + signal through windows, data right on both ranks");
}

#[test]
fn gpu_comm_one_sided_puts_into_a_peer_window() {
    let Some((_, lib)) = setup_for(Feature::OneSided) else {
        return;
    };
    use oxccl::buffer::NcclBuf;
    use oxccl::core::one_sided::SignalFrom;
    // Two signal indices (one unless the config says more).
    let cfg = CommConfig::new()
        .set(oxccl::ConfigField::NumRmaSig, 2)
        .unwrap();
    on_ranks(&lib, 2, cfg, |r, mut c, lib| {
        let st = oxccl::NcclStream::new(c.stream().clone());
        let other = 1 - r;
        let mut win = NcclBuf::<f32>::zeros(lib, &st, 1024).unwrap();
        let src = NcclBuf::<f32>::zeros(lib, &st, 256).unwrap();
        // Not yet a window: refused before NCCL.
        let e = c.put_signal(&src, other, &win, 0, 0).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "window", .. }),
            "{e}"
        );
        c.register_window(&win).unwrap();
        c.register_window(&src).unwrap();
        let twice = c.register_window(&win).unwrap_err();
        assert!(
            matches!(twice, Error::InvalidArgument { arg: "buf", .. }),
            "{twice}"
        );
        let from = [SignalFrom {
            peer: other,
            signal: 0,
            count: 1,
        }];
        let mut src = src;
        for round in 0..20u32 {
            let v = round as f32 + 1.0;
            if round % 2 == r {
                src.copy_from_host(&st, &[v; 256]).unwrap();
                c.put_signal(&src, other, &win, 256, 0).unwrap();
                c.synchronize().unwrap();
            } else {
                c.wait_signal(&from, &mut win).unwrap();
                let got = win.to_host(&st).unwrap();
                assert_eq!(&got[256..512], &[v; 256][..], "rank {r} round {round}");
                assert!(got[..256].iter().all(|x| *x == 0.0));
            }
        }
        let past = c.put_signal(&src, other, &win, 1000, 0).unwrap_err();
        assert!(
            matches!(past, Error::InvalidArgument { arg: "offset", .. }),
            "{past}"
        );
        let far = c.put_signal(&src, 5, &win, 0, 0).unwrap_err();
        assert!(
            matches!(far, Error::InvalidArgument { arg: "peer", .. }),
            "{far}"
        );
        let past_signals = c.signal(other, 2).unwrap_err();
        assert!(
            matches!(past_signals, Error::InvalidArgument { arg: "signal", .. }),
            "{past_signals}"
        );
        // A signal alone, then the windows released (collective) and the comm ended.
        if r == 0 {
            c.signal(other, 1).unwrap();
        } else {
            let one = [SignalFrom {
                peer: other,
                signal: 1,
                count: 1,
            }];
            c.wait_signal(&one, &mut win).unwrap();
        }
        c.synchronize().unwrap();
        // One signal context unless the config's numRmaCtx gives more (NCCL:
        // "Context 1 is invalid (must be in [0, 1))"): refused before NCCL.
        let ns = oxccl::NcclStream::new(c.stream().clone());
        let ctx1 = c.backend().signal(other, 0, 1, &ns).unwrap_err();
        assert!(
            matches!(ctx1, Error::InvalidArgument { arg: "ctx", .. }),
            "{ctx1}"
        );
        c.synchronize().unwrap();
        c.deregister_window(&src).unwrap();
        c.deregister_window(&win).unwrap();
        let gone = c.deregister_window(&win).unwrap_err();
        assert!(
            matches!(gone, Error::InvalidArgument { arg: "buf", .. }),
            "{gone}"
        );
        c.destroy().unwrap();
    });
    println!("Comm one-sided: 20 rounds of put + signal, a signal alone, windows released");
}

/// Puts of 32 KiB and more: on a node without GDRCopy NCCL 2.32.3 completes them only with
/// `NCCL_P2P_USE_CUDA_MEMCPY=1` (the copy engines); the test runs when that is set (NCCL
/// reads it once per process, so the GPU script runs this test alone with it) and skips,
/// saying so, otherwise.
#[test]
fn gpu_comm_large_puts_through_the_copy_engines() {
    let Some((_, lib)) = setup_for(Feature::OneSided) else {
        return;
    };
    if std::env::var("NCCL_P2P_USE_CUDA_MEMCPY").as_deref() != Ok("1") {
        eprintln!("skipped: puts of 32 KiB or more run with NCCL_P2P_USE_CUDA_MEMCPY=1");
        return;
    }
    use oxccl::buffer::NcclBuf;
    use oxccl::core::one_sided::SignalFrom;
    on_ranks(&lib, 2, CommConfig::new(), |r, mut c, lib| {
        let st = oxccl::NcclStream::new(c.stream().clone());
        let other = 1 - r;
        let n = 1 << 18;
        let mut win = NcclBuf::<f32>::zeros(lib, &st, n).unwrap();
        c.register_window(&win).unwrap();
        let from = [SignalFrom {
            peer: other,
            signal: 0,
            count: 1,
        }];
        // 32 KiB, 64 KiB, 256 KiB, 1 MiB: rank 0 puts, rank 1 waits and reads.
        for (round, len) in [1usize << 13, 1 << 14, 1 << 16, 1 << 18]
            .into_iter()
            .enumerate()
        {
            let v = round as f32 + 1.0;
            // A put's data lies in a window: made by both ranks (collective).
            let src = NcclBuf::<f32>::from_host(lib, &st, &vec![v; len]).unwrap();
            c.register_window(&src).unwrap();
            if r == 0 {
                c.put_signal(&src, other, &win, 0, 0).unwrap();
                c.synchronize_timeout(Duration::from_secs(20)).unwrap();
            } else {
                c.wait_signal(&from, &mut win).unwrap();
                c.synchronize_timeout(Duration::from_secs(20)).unwrap();
                let got = win.to_host(&st).unwrap();
                assert!(got[..len].iter().all(|x| *x == v), "{len} floats");
            }
            c.deregister_window(&src).unwrap();
            println!("rank {r}: a put of {} KiB arrived", len * 4 / 1024);
        }
        c.synchronize().unwrap();
        c.destroy().unwrap();
    });
}

#[test]
fn gpu_configured_all_reduce_sums() {
    let Some((n, lib)) = setup_for(Feature::CollConfig) else {
        return;
    };
    use oxccl::core::coll_config::CollConfig;
    let results = on_ranks(&lib, n, CommConfig::new(), move |r, mut c, _| {
        let st = c.stream().clone();
        let x = st.clone_htod(&vec![(r + 1) as f32; 1 << 16]).unwrap();
        let mut y = st.alloc_zeros::<f32>(1 << 16).unwrap();
        let cfg = CollConfig {
            max_ctas: Some(2),
            profiler_tag: 7,
            ..CollConfig::default()
        }
        .algorithms("ring");
        c.all_reduce_configured(&x, &mut y, ReduceOp::Sum, &cfg)
            .unwrap();
        c.synchronize().unwrap();
        let got: Vec<f64> = st
            .clone_dtoh(&y)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        // What NCCL cannot configure is refused before it.
        let bad = CollConfig {
            min_ctas: Some(4),
            max_ctas: Some(2),
            ..CollConfig::default()
        };
        let e = c
            .all_reduce_configured(&x, &mut y, ReduceOp::Sum, &bad)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    arg: "min_ctas",
                    ..
                }
            ),
            "{e}"
        );
        got
    });
    let want = f64::from(n * (n + 1) / 2);
    for (r, got) in results.into_iter().enumerate() {
        assert!(got.iter().all(|x| *x == want), "rank {r}: {:?}", &got[..4]);
    }
    println!("configured all_reduce (ring, at most 2 CTAs) summed right over {n} GPUs");
}

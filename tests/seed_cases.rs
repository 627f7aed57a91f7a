//! Seed cases of PyTorch's NCCL process-group tests (shared/reference/seed-tests.md), ported
//! to `ProcessGroup` on the mock world: ranks as threads sharing one mock backend and one
//! in-process store. Cases 12–15 and 27–30 belong to the safety nets and are not here.

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup, DEFAULT_TIMEOUT};
use oxccl::store::{MemStore, Store};
use oxccl::{CommConfig, CommState, Device, Error, ReduceOp};
use std::sync::Arc;
use std::time::Duration;

type Pg = ProcessGroup<MockBackend>;

/// Runs `f` on `n` ranks (a thread each) of a default group made with `opts(rank)`, and
/// returns each rank's result by rank.
fn run<R: Send + 'static>(
    n: u32,
    opts: impl Fn(u32) -> PgOptions + Send + Sync + 'static,
    f: impl Fn(Pg) -> R + Send + Sync + 'static,
) -> Vec<R> {
    run_on(MockBackend::new(), n, opts, f)
}

/// [`run`] on a given mock backend.
fn run_on<R: Send + 'static>(
    backend: MockBackend,
    n: u32,
    opts: impl Fn(u32) -> PgOptions + Send + Sync + 'static,
    f: impl Fn(Pg) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let f = Arc::new(f);
    let opts = Arc::new(opts);
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let (backend, store, f, opts) =
                (backend.clone(), store.clone(), f.clone(), opts.clone());
            std::thread::spawn(move || {
                let pg = ProcessGroup::new(backend, store, r, n, opts(r)).expect("default group");
                f(pg)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("rank thread"))
        .collect()
}

fn lazy(_: u32) -> PgOptions {
    PgOptions {
        timeout: Duration::from_secs(20),
        ..PgOptions::default()
    }
}

fn eager(r: u32) -> PgOptions {
    PgOptions {
        bound_device: Some(Device(r)),
        ..lazy(r)
    }
}

fn all_reduce_values(pg: &Pg, v: &[f32]) -> Vec<f32> {
    let mut b = pg.upload(v).unwrap();
    pg.all_reduce(&mut b, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    pg.download(&b).unwrap()
}

#[test]
fn case_01_no_gpu_is_a_clear_error() {
    let lib = oxccl::nccl::NcclBackend::load();
    let Ok(nccl) = lib else {
        println!("skipped: no NCCL library found (run scripts/fetch-nccl.sh)");
        return;
    };
    if oxccl::nccl::require_driver().is_ok() {
        println!("skipped: this machine has a CUDA driver; case 1 is about machines without");
        return;
    }
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let err = ProcessGroup::new(nccl, store, 0, 1, eager(0)).unwrap_err();
    let Error::Backend { text, .. } = &err else {
        panic!("expected a backend error, got {err:?}")
    };
    assert!(text.contains("no CUDA driver"), "{err}");
    assert!(
        err.to_string().contains("needs NVIDIA GPUs, none found"),
        "{err}"
    );
}

#[test]
fn case_03_use_after_destroy_is_an_error() {
    let out = run(2, lazy, |pg| {
        let v = all_reduce_values(&pg, &[1.0; 100]);
        pg.destroy();
        // The buffers of a destroyed group cannot even be made: its stream is gone.
        let after = pg
            .upload(&[1.0f32; 4])
            .and_then(|mut b| pg.all_reduce(&mut b, ReduceOp::Sum).map(|_| ()));
        (v, after)
    });
    for (v, after) in out {
        assert_eq!(v, vec![2.0; 100]);
        assert!(
            matches!(
                after,
                Err(Error::InvalidState {
                    state: CommState::Destroyed,
                    ..
                })
            ),
            "{after:?}"
        );
    }
    // Dropping groups without destroy, with and without a communicator, returns at once.
    run(2, lazy, |pg| {
        all_reduce_values(&pg, &[1.0]);
        drop(pg);
    });
    run(2, lazy, drop);
}

#[test]
fn case_04_abort_unblocks_a_stuck_op() {
    let out = run(2, lazy, |pg| {
        all_reduce_values(&pg, &[1.0]);
        if pg.rank() == Some(0) {
            let mut b = pg.upload(&[1.0f32; 8]).unwrap();
            let work = pg.all_reduce(&mut b, ReduceOp::Sum).unwrap();
            let aborter = pg.clone();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                aborter.abort("shut down by the test");
            });
            let r = work.wait();
            t.join().unwrap();
            Some(r)
        } else {
            // Stay alive past the abort: a peer that leaves is a different failure (Remote).
            std::thread::sleep(Duration::from_millis(600));
            None
        }
    });
    let r = out[0].clone().unwrap();
    assert!(matches!(r, Err(Error::Aborted { .. })), "{r:?}");
}

#[test]
fn case_05_unordered_destroy_does_not_deadlock() {
    let out = run(2, lazy, |pg| {
        let a = pg.new_group(&[0, 1], None).unwrap();
        let b = pg.new_group(&[0, 1], None).unwrap();
        let x = all_reduce_values(&a, &[1.0]);
        let y = all_reduce_values(&b, &[2.0]);
        if pg.rank() == Some(0) {
            a.destroy();
            b.destroy();
        } else {
            b.destroy();
            a.destroy();
        }
        pg.destroy();
        (x, y)
    });
    for (x, y) in out {
        assert_eq!((x, y), (vec![2.0], vec![4.0]));
    }
}

#[test]
fn case_06_split_counts() {
    let out = run(2, lazy, |pg| {
        all_reduce_values(&pg, &[1.0]);
        let a = pg.new_group(&[0, 1], None).unwrap();
        let b = pg.new_group(&[0, 1], None).unwrap();
        all_reduce_values(&a, &[1.0]);
        all_reduce_values(&b, &[1.0]);
        let both = pg.split_count();
        let _c = pg.new_group(&[0, 1], None).unwrap();
        let d = pg.new_group(&[0, 1], None).unwrap();
        all_reduce_values(&d, &[1.0]);
        (both, pg.split_count() - both)
    });
    assert_eq!(out, vec![(2, 1), (2, 1)]);
}

#[test]
fn case_07_lazy_split() {
    let out = run(2, lazy, |pg| {
        let ng = pg.new_group(&[0, 1], None).unwrap();
        let mut t = pg.upload(&[pg.global_rank() as i64]).unwrap();
        pg.broadcast(&mut t, 0).unwrap().wait().unwrap();
        let before = pg.split_count();
        ng.broadcast(&mut t, 0).unwrap().wait().unwrap();
        (before, pg.split_count(), pg.download(&t).unwrap())
    });
    assert_eq!(out, vec![(0, 1, vec![0]), (0, 1, vec![0])]);
}

#[test]
fn case_08_eager_split() {
    let out = run(2, eager, |pg| {
        let ng = pg.new_group(&[0], None).unwrap();
        let at_once = pg.split_count();
        let mut t = pg.upload(&[pg.global_rank() as i64]).unwrap();
        if pg.rank() == Some(0) {
            ng.broadcast(&mut t, 0).unwrap().wait().unwrap();
        }
        (at_once, pg.split_count(), pg.download(&t).unwrap())
    });
    assert_eq!(out, vec![(1, 1, vec![0]), (1, 1, vec![1])]);
}

#[test]
fn case_09_nonblocking_init_lazy_and_eager() {
    for opts in [lazy as fn(u32) -> PgOptions, eager] {
        let out = run(
            2,
            move |r| {
                let mut o = opts(r);
                o.config = CommConfig::new().blocking(false);
                o
            },
            |pg| {
                let first = pg.split_count();
                let v = all_reduce_values(&pg, &[1.5; 100]);
                let ng = pg.new_group(&[0, 1], None).unwrap();
                let second = pg.split_count();
                let mut t = pg.upload(&[pg.global_rank() as i32]).unwrap();
                ng.broadcast(&mut t, 0).unwrap().wait().unwrap();
                (first, second, pg.split_count(), v, pg.download(&t).unwrap())
            },
        );
        for o in out {
            assert_eq!((o.0, o.1, o.2), (0, 0, 1));
            assert_eq!(o.3, vec![3.0; 100]);
            assert_eq!(o.4, vec![0]);
        }
    }
}

#[test]
fn case_10_timeout_precedence() {
    use oxccl::core::env::effective_timeout;
    let s = Duration::from_secs;
    assert_eq!(effective_timeout(None, None, None), s(600));
    assert_eq!(effective_timeout(Some(s(123)), None, None), s(123));
    assert_eq!(effective_timeout(None, Some(s(123)), None), s(600));
    assert_eq!(
        effective_timeout(Some(s(1240)), Some(s(123)), None),
        s(1240)
    );
    let out = run(
        1,
        |_| PgOptions::default(),
        move |pg| {
            let first = pg.timeout();
            pg.set_timeout(s(23));
            let mut b = pg.upload(&[1.0f32]).unwrap();
            let w23 = pg.all_reduce(&mut b, ReduceOp::Sum).unwrap().timeout();
            pg.set_timeout(s(252));
            let w252 = pg.all_reduce(&mut b, ReduceOp::Sum).unwrap().timeout();
            (first, w23, w252)
        },
    );
    assert_eq!(out, vec![(DEFAULT_TIMEOUT, s(23), s(252))]);
    assert_eq!(DEFAULT_TIMEOUT, s(600));
}

#[test]
fn case_11_group_uid_and_description() {
    let out = run(2, lazy, |pg| {
        let named = pg
            .new_group(
                &[0, 1],
                Some(PgOptions {
                    desc: "test_purpose".into(),
                    ..lazy(0)
                }),
            )
            .unwrap();
        let plain = pg.new_group(&[0, 1], None).unwrap();
        [
            (pg.uid(), pg.desc().to_string()),
            (named.uid(), named.desc().to_string()),
            (plain.uid(), plain.desc().to_string()),
        ]
    });
    for o in out {
        assert_eq!(
            o,
            [
                (0, "default_pg".to_string()),
                (1, "test_purpose".to_string()),
                (2, "undefined".to_string())
            ]
        );
    }
}

#[test]
fn case_16_strict_boolean_environment() {
    use oxccl::core::env::EnvConfig;
    for bad in ["abc", "-1", "2147483647", "4294967295"] {
        let e =
            EnvConfig::from_lookup(|k| (k == "OXCCL_BLOCKING_WAIT").then_some(bad)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    arg: "OXCCL_BLOCKING_WAIT",
                    ..
                }
            ),
            "{bad}: {e:?}"
        );
    }
    let ok = EnvConfig::from_lookup(|k| (k == "OXCCL_BLOCKING_WAIT").then_some("1")).unwrap();
    assert!(ok.blocking_wait);
}

/// Five chunks of arange(60) as `T`.
fn chunks<T: Copy>(conv: impl Fn(f64) -> T) -> Vec<Vec<T>> {
    (0..5)
        .map(|c| (0..12).map(|i| conv(f64::from(c * 12 + i))).collect())
        .collect()
}

#[test]
fn case_17_broadcast_coalesced() {
    use half::f16;
    let out = run(2, lazy, |pg| {
        let r = pg.global_rank();
        let mut results = Vec::new();
        for root in [0u32, 1] {
            // Each rank's data is arange(60) shifted by its rank; after the broadcast every
            // rank holds the root's.
            let shift = f64::from(r);
            let h = |x: f64| f16::from_f64(x + shift);
            let mut b16: Vec<_> = (0..3)
                .flat_map(|_| chunks(h))
                .map(|c| pg.upload(&c).unwrap())
                .collect();
            let mut b32: Vec<_> = (0..2)
                .flat_map(|_| chunks(|x| (x + shift) as f32))
                .map(|c| pg.upload(&c).unwrap())
                .collect();
            let mut b64: Vec<_> = chunks(|x| x + shift)
                .into_iter()
                .map(|c| pg.upload(&c).unwrap())
                .collect();
            assert_eq!(b16.len() + b32.len() + b64.len(), 30);
            let work = pg
                .coalesced(|c| {
                    b16.iter_mut().try_for_each(|b| c.broadcast(b, root))?;
                    b32.iter_mut().try_for_each(|b| c.broadcast(b, root))?;
                    b64.iter_mut().try_for_each(|b| c.broadcast(b, root))
                })
                .unwrap();
            work.wait().unwrap();
            let want = f64::from(root);
            let ok16 = b16
                .iter()
                .zip((0..3).flat_map(|_| chunks(|x| f16::from_f64(x + want))))
                .all(|(b, c)| pg.download(b).unwrap() == c);
            let ok32 = b32
                .iter()
                .zip((0..2).flat_map(|_| chunks(|x| (x + want) as f32)))
                .all(|(b, c)| pg.download(b).unwrap() == c);
            let ok64 = b64
                .iter()
                .zip(chunks(|x| x + want))
                .all(|(b, c)| pg.download(b).unwrap() == c);
            results.push((ok16, ok32, ok64));
        }
        results
    });
    for o in out {
        assert_eq!(o, vec![(true, true, true); 2]);
    }
}

#[test]
fn case_18_all_reduce_coalesced_uneven() {
    let n = 2u32;
    let out = run(n, lazy, |pg| {
        let r = pg.global_rank() as f32;
        let mut bufs: Vec<_> = (0..5)
            .map(|i| pg.upload(&vec![r + 1.0 + i as f32; 60 + i]).unwrap())
            .collect();
        let mut refs: Vec<_> = bufs.iter_mut().collect();
        let work = pg.all_reduce_coalesced(&mut refs, ReduceOp::Sum).unwrap();
        work.wait().unwrap();
        bufs.iter()
            .map(|b| pg.download(b).unwrap())
            .collect::<Vec<_>>()
    });
    for o in out {
        for (i, v) in o.iter().enumerate() {
            let want = (n as usize * i + (n * (n + 1) / 2) as usize) as f32;
            assert_eq!(v, &vec![want; 60 + i]);
        }
        assert_eq!(
            o.iter().map(|v| v[0]).collect::<Vec<_>>(),
            vec![3.0, 5.0, 7.0, 9.0, 11.0]
        );
    }
}

#[test]
fn case_19_coalescing_block_gives_one_work() {
    let out = run(2, lazy, |pg| {
        let r = pg.global_rank() as f32;
        let mut bufs: Vec<_> = (0..5)
            .map(|i| pg.upload(&vec![r + 1.0 + i as f32; 60 + i]).unwrap())
            .collect();
        let seq_before = pg.seq();
        let mut block = pg.start_coalescing().unwrap();
        for b in bufs.iter_mut() {
            block.all_reduce(b, ReduceOp::Sum).unwrap();
        }
        let work = block.end().unwrap();
        work.wait().unwrap();
        let firsts: Vec<f32> = bufs.iter().map(|b| pg.download(b).unwrap()[0]).collect();
        (pg.seq() - seq_before, work.meta().op, firsts)
    });
    for o in out {
        assert_eq!(o, (1, "coalesced", vec![3.0, 5.0, 7.0, 9.0, 11.0]));
    }
}

#[test]
fn case_20_fp8_reductions_follow_the_library() {
    // PyTorch refuses every fp8 reduction; NCCL reduces fp8 since 2.24.3, so oxccl follows the
    // loaded library: refused (Unsupported, naming the feature) before 2.24.3, exact after.
    use float8::{F8E4M3, F8E5M2};
    let ops = |pg: Pg| {
        let mut a = pg.upload(&[F8E4M3::from_f32(1.0); 8]).unwrap();
        let mut refs = vec![&mut a];
        let coalesced = pg
            .all_reduce_coalesced(&mut refs, ReduceOp::Sum)
            .and_then(|w| w.wait());
        let input = pg.upload(&[F8E4M3::from_f32(1.0); 4]).unwrap();
        let mut output = pg.alloc_zeros::<F8E4M3>(2).unwrap();
        let rs = pg
            .reduce_scatter(&input, &mut output, ReduceOp::Sum)
            .and_then(|w| w.wait());
        let in5 = pg.upload(&[F8E5M2::from_f32(1.0); 4]).unwrap();
        let mut out5 = pg.alloc_zeros::<F8E5M2>(2).unwrap();
        let rs5 = pg
            .coalesced(|c| c.reduce_scatter(&in5, &mut out5, ReduceOp::Sum))
            .and_then(|w| w.wait());
        let two = |v: Vec<f32>| v == vec![2.0; v.len()];
        let values = coalesced.is_ok()
            && two(pg
                .download(&a)
                .unwrap()
                .iter()
                .map(|x| x.to_f32())
                .collect())
            && two(pg
                .download(&output)
                .unwrap()
                .iter()
                .map(|x| x.to_f32())
                .collect())
            && two(pg
                .download(&out5)
                .unwrap()
                .iter()
                .map(|x| x.to_f32())
                .collect());
        let ones = pg.upload(&[F8E4M3::from_f32(1.0); 160]).unwrap();
        let mut gathered = pg.alloc_zeros::<F8E4M3>(320).unwrap();
        let gather = pg.all_gather(&ones, &mut gathered).and_then(|w| w.wait());
        let exact = gather.is_ok()
            && pg
                .download(&gathered)
                .unwrap()
                .iter()
                .all(|x| x.to_bits() == F8E4M3::from_f32(1.0).to_bits());
        ([coalesced, rs, rs5], values, exact)
    };
    for (results, values, exact) in run(2, lazy, ops) {
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert!(values && exact);
    }
    let old = MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::Version::new(2, 23, 4)),
        oxccl::mock::FaultPlan::new(),
        1,
        oxccl::mock::DEFAULT_INIT_TIMEOUT,
    );
    for (results, _, _) in run_on(old, 2, lazy, ops) {
        for r in results {
            assert!(
                matches!(
                    r,
                    Err(Error::Unsupported {
                        feature: oxccl::Feature::Float8,
                        ..
                    })
                ),
                "{r:?}"
            );
        }
    }
}

#[test]
fn case_21_reduce_scatter_int64() {
    let n = 2i64;
    let out = run(n as u32, lazy, move |pg| {
        let input = pg.upload(&(0..2 * n).collect::<Vec<i64>>()).unwrap();
        let mut output = pg.alloc_zeros::<i64>(2).unwrap();
        pg.reduce_scatter(&input, &mut output, ReduceOp::Sum)
            .unwrap()
            .wait()
            .unwrap();
        let ones = [
            pg.upload(&vec![1i64; 2 * n as usize]).unwrap(),
            pg.upload(&vec![1i64; 2 * n as usize]).unwrap(),
        ];
        let mut outs = [
            pg.alloc_zeros::<i64>(2).unwrap(),
            pg.alloc_zeros::<i64>(2).unwrap(),
        ];
        let [o0, o1] = &mut outs;
        pg.coalesced(|c| {
            c.reduce_scatter(&ones[0], o0, ReduceOp::Sum)?;
            c.reduce_scatter(&ones[1], o1, ReduceOp::Sum)
        })
        .unwrap()
        .wait()
        .unwrap();
        (
            pg.global_rank() as i64,
            pg.download(&output).unwrap(),
            pg.download(&outs[0]).unwrap(),
            pg.download(&outs[1]).unwrap(),
        )
    });
    for (r, single, c0, c1) in out {
        assert_eq!(single, vec![2 * r * n, (2 * r + 1) * n]);
        assert_eq!((c0, c1), (vec![n; 2], vec![n; 2]));
    }
}

#[test]
fn case_22_single_rank_groups() {
    let out = run(2, lazy, |pg| {
        let r = pg.global_rank();
        let v = vec![(r + 1) as f32; 10];
        let g0 = pg.new_group(&[0], None).unwrap();
        let g1 = pg.new_group(&[1], None).unwrap();
        let both = pg.new_group(&[0, 1], None).unwrap();
        let world = all_reduce_values(&pg, &v);
        let pair = all_reduce_values(&both, &v);
        let mine = if r == 0 { &g0 } else { &g1 };
        let alone = all_reduce_values(mine, &v);
        let other = if r == 0 { &g1 } else { &g0 };
        let mut b = pg.upload(&v).unwrap();
        let refused = other.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
        (world, pair, alone, refused)
    });
    for (r, (world, pair, alone, refused)) in out.into_iter().enumerate() {
        assert_eq!(world, vec![3.0; 10]);
        assert_eq!(pair, vec![3.0; 10]);
        assert_eq!(alone, vec![(r + 1) as f32; 10]);
        let e = refused.unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "group", .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("not part of group"), "{e}");
    }
}

#[test]
fn case_23_dtype_mismatch_across_ranks() {
    // One call mixing dtypes cannot be written: a buffer has one element type. Ranks that
    // disagree on the dtype are caught instead of hanging.
    let out = run(2, lazy, |pg| {
        let r = if pg.global_rank() == 0 {
            let x = pg.upload(&[1.0f32; 4]).unwrap();
            let mut y = pg.alloc_zeros::<f32>(8).unwrap();
            pg.all_gather(&x, &mut y).and_then(|w| w.wait())
        } else {
            let x = pg.upload(&[half::f16::ONE; 4]).unwrap();
            let mut y = pg.alloc_zeros::<half::f16>(8).unwrap();
            pg.all_gather(&x, &mut y).and_then(|w| w.wait())
        };
        r
    });
    for r in out {
        assert!(
            matches!(r, Err(Error::Mismatch { what: "dtype", .. })),
            "{r:?}"
        );
    }
}

#[test]
fn case_24_complex_as_real_pairs() {
    // complex64 travels as pairs of f32: gathering one complex buffer and real ones agrees.
    let out = run(2, lazy, |pg| {
        let r = pg.global_rank() as f32;
        let complex: Vec<f32> = [(r, -r), (r + 0.5, 2.0)]
            .iter()
            .flat_map(|&(re, im)| [re, im])
            .collect();
        let x = pg.upload(&complex).unwrap();
        let mut y = pg.alloc_zeros::<f32>(8).unwrap();
        pg.all_gather(&x, &mut y).unwrap().wait().unwrap();
        pg.download(&y).unwrap()
    });
    for v in out {
        assert_eq!(v, vec![0.0, -0.0, 0.5, 2.0, 1.0, -1.0, 1.5, 2.0]);
    }
}

#[test]
fn case_25_membership() {
    let out = run(2, lazy, |pg| {
        let g = pg.new_group(&[1], None).unwrap();
        let of1 = g.group_rank_of(1).unwrap();
        let of0 = g.group_rank_of(0).unwrap_err();
        let global = g.global_rank_of(0).unwrap();
        let ranks = g.ranks().to_vec();
        if pg.global_rank() == 1 {
            g.destroy();
            Some((of1, of0, global, ranks, g.group_rank_of(1).unwrap_err()))
        } else {
            None
        }
    });
    let (of1, of0, global, ranks, unregistered) = out[1].clone().unwrap();
    assert_eq!((of1, global, ranks), (0, 1, vec![1]));
    assert!(of0.to_string().contains("not part of group"), "{of0}");
    assert!(
        unregistered.to_string().contains("not registered"),
        "{unregistered}"
    );
}

#[test]
fn case_26_subgroups_with_global_peers() {
    let out = run(4, lazy, |pg| {
        let r = pg.global_rank();
        let (mine, all) = pg
            .new_subgroups_by_enumeration(&[vec![0, 1], vec![2, 3]])
            .unwrap();
        assert_eq!(all.len(), 2);
        let base = mine.ranks()[0];
        let peer = if r == base { base + 1 } else { base };
        let ones = |k: f32| vec![k; 4];
        // gather to the subgroup's first rank: ones·(r+s) for each member s… here ones·rank.
        let x = pg.upload(&ones(r as f32)).unwrap();
        let mut g = pg.alloc_zeros::<f32>(8).unwrap();
        let root_out = if r == base { Some(&mut g) } else { None };
        mine.gather(&x, root_out, base).unwrap().wait().unwrap();
        let gathered = pg.download(&g).unwrap();
        // reduce to the first rank: ones·(2·base+1).
        let mut red = pg.upload(&ones(r as f32)).unwrap();
        mine.reduce(&mut red, base, ReduceOp::Sum)
            .unwrap()
            .wait()
            .unwrap();
        // send/recv with the peer, as global ranks: each receives ones·(peer+1).
        let s = pg.upload(&ones((r + 1) as f32)).unwrap();
        let mut rcv = pg.alloc_zeros::<f32>(4).unwrap();
        mine.coalesced(|c| {
            c.send(&s, peer)?;
            c.recv(&mut rcv, peer)
        })
        .unwrap()
        .wait()
        .unwrap();
        // broadcast from the first rank: ones·(base+1).
        let mut bc = pg.upload(&ones((r + 1) as f32)).unwrap();
        mine.broadcast(&mut bc, base).unwrap().wait().unwrap();
        // scatter from the first rank: ones·r.
        let parts: Vec<f32> = mine.ranks().iter().flat_map(|&m| ones(m as f32)).collect();
        let src = pg.upload(&parts).unwrap();
        let mut sc = pg.alloc_zeros::<f32>(4).unwrap();
        mine.scatter(if r == base { Some(&src) } else { None }, &mut sc, base)
            .unwrap()
            .wait()
            .unwrap();
        (
            r,
            base,
            gathered,
            pg.download(&red).unwrap(),
            pg.download(&rcv).unwrap(),
            pg.download(&bc).unwrap(),
            pg.download(&sc).unwrap(),
        )
    });
    for (r, base, gathered, red, rcv, bc, sc) in out {
        let peer = if r == base { base + 1 } else { base };
        if r == base {
            let want: Vec<f32> = [base, base + 1]
                .iter()
                .flat_map(|&m| vec![m as f32; 4])
                .collect();
            assert_eq!(gathered, want);
            assert_eq!(red, vec![(2 * base + 1) as f32; 4]);
        } else {
            assert_eq!(gathered, vec![0.0; 8]);
            assert_eq!(red, vec![r as f32; 4]);
        }
        assert_eq!(rcv, vec![(peer + 1) as f32; 4]);
        assert_eq!(bc, vec![(base + 1) as f32; 4]);
        assert_eq!(sc, vec![r as f32; 4]);
    }
}

#[test]
fn case_31_config_passes_through() {
    use oxccl::ConfigField;
    let out = run(
        2,
        move |r| {
            let mut o = lazy(r);
            o.config = CommConfig::new()
                .set(ConfigField::MaxCtas, 4)
                .and_then(|c| c.set(ConfigField::MinCtas, 2))
                .and_then(|c| c.set(ConfigField::CgaClusterSize, 2))
                .and_then(|c| c.net_name("Socket"))
                .unwrap();
            o
        },
        |pg| {
            let sub = pg.new_group(&[0, 1], None).unwrap();
            let v = vec![(pg.global_rank() + 1) as f32; 10];
            (
                all_reduce_values(&sub, &v),
                sub.options().config.int(ConfigField::MaxCtas),
            )
        },
    );
    for o in out {
        assert_eq!(o, (vec![3.0; 10], Some(4)));
    }
}

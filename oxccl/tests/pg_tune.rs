//! The process group's buffer modes on the mock world: the tune table decides per operation,
//! the mock records what was registered, windows are made once per allocation and agree
//! across ranks, mismatched tables are refused on every rank, and version gates name the
//! feature.

mod tune_kit;

use oxccl::buffer::Memory;
use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup, RegMode, TuneTable, TunedStats};
use oxccl::store::{MemStore, Store};
use oxccl::{Device, Error, Feature, ReduceOp};
use std::sync::Arc;
use std::time::Duration;
use tune_kit::world;

const TABLE: &str = "oxccl-tune 1
all_reduce * 0 64 window
all_reduce * 65 max registered
all_gather * 0 max registered
";

#[test]
fn the_table_picks_the_mode_per_op_and_the_mock_sees_it() {
    let t = TuneTable::parse(TABLE).unwrap();
    let out = world(MockBackend::new(), &[Some(t.clone()), Some(t)], |pg, r| {
        // 4 floats = 16 bytes: window. 32 floats = 128 bytes: registered.
        let mut small = pg.upload_comm(&[1.0f32 + r as f32; 4])?;
        let mut big = pg.upload_comm(&[1.0f32; 32])?;
        let mut plain = pg.upload(&[2.0f32; 4])?;
        for _ in 0..3 {
            pg.all_reduce(&mut small, ReduceOp::Sum)?.wait()?;
        }
        pg.all_reduce(&mut big, ReduceOp::Sum)?.wait()?;
        pg.all_reduce(&mut plain, ReduceOp::Sum)?.wait()?;
        let got = pg.download(&small)?;
        let plain_got = pg.download(&plain)?;
        let stats = pg.tuned_stats()?;
        let (wins, regs, made) =
            pg.with_comm(|c| (c.windows(), c.registrations(), c.windows_made()))?;
        Ok((
            got,
            plain_got,
            stats,
            wins,
            regs,
            made,
            small_addr(&small),
            small_addr(&big),
        ))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (got, plain_got, stats, wins, regs, made, small, big) = o.unwrap();
        // 1+2 = 3, then 6, then 12: the collective ran three times in window mode.
        assert_eq!(got, vec![12.0; 4], "rank {r}");
        assert_eq!(plain_got, vec![4.0; 4], "rank {r}");
        assert_eq!(
            stats,
            TunedStats {
                ops: [1, 1, 3],
                registered: 1,
                windows: 1
            },
            "rank {r}"
        );
        // One window, made once for three operations, over the small buffer's 16 bytes.
        assert_eq!(made, 1, "rank {r}");
        assert_eq!(wins.len(), 1);
        assert_eq!((wins[0].addr, wins[0].bytes), (small, 16));
        assert_eq!(regs.len(), 1);
        assert_eq!((regs[0].addr, regs[0].bytes), (big, 128));
    }
}

fn small_addr(b: &oxccl::buffer::HostBuf<f32>) -> usize {
    use oxccl::buffer::Operand;
    Operand::<MockBackend>::comm_mem(b).map_or(0, |m| m.addr)
}

#[test]
fn two_buffer_ops_register_both_and_plain_buffers_stay_plain() {
    let t = TuneTable::parse(TABLE).unwrap();
    let out = world(MockBackend::new(), &[Some(t.clone()), Some(t)], |pg, r| {
        let send = pg.upload_comm(&[r as i32 + 1; 3])?;
        let mut recv = pg.alloc_comm::<i32>(6)?;
        pg.all_gather(&send, &mut recv)?.wait()?;
        // A plain recv buffer makes the op plain, whatever the table says.
        let mut recv_plain = pg.alloc_zeros::<i32>(6)?;
        pg.all_gather(&send, &mut recv_plain)?.wait()?;
        Ok((
            pg.download(&recv)?,
            pg.download(&recv_plain)?,
            pg.tuned_stats()?,
        ))
    });
    for o in out {
        let (a, p, stats) = o.unwrap();
        assert_eq!(a, vec![1, 1, 1, 2, 2, 2]);
        assert_eq!(p, a);
        assert_eq!(
            stats,
            TunedStats {
                ops: [1, 1, 0],
                registered: 2,
                windows: 0
            }
        );
    }
}

#[test]
fn without_a_table_nothing_is_registered() {
    let out = world(MockBackend::new(), &[None, None], |pg, _| {
        let mut buf = pg.upload_comm(&[1u8; 8])?;
        pg.all_reduce(&mut buf, ReduceOp::Max)?.wait()?;
        Ok((
            pg.tuned_stats()?,
            pg.with_comm(|c| c.registrations_made() + c.windows_made())?,
        ))
    });
    for o in out {
        let (stats, made) = o.unwrap();
        assert_eq!(stats, TunedStats::default());
        assert_eq!(made, 0);
    }
}

#[test]
fn dropped_buffers_release_their_local_registration() {
    let t = TuneTable::uniform(RegMode::Registered);
    let out = world(MockBackend::new(), &[Some(t.clone()), Some(t)], |pg, _| {
        {
            let mut tmp = pg.upload_comm(&[1.0f64; 2])?;
            pg.all_reduce(&mut tmp, ReduceOp::Sum)?.wait()?;
        }
        let during = pg.with_comm(|c| c.registrations().len())?;
        // The next operation sweeps the dropped buffer's registration (its work ran).
        let mut keep = pg.upload_comm(&[1.0f64; 2])?;
        pg.all_reduce(&mut keep, ReduceOp::Sum)?.wait()?;
        let after = pg.with_comm(|c| c.registrations().len())?;
        Ok((during, after, pg.tuned_stats()?.registered))
    });
    for o in out {
        assert_eq!(o.unwrap(), (1, 1, 1));
    }
}

#[test]
fn different_tables_are_refused_on_every_rank() {
    let a = TuneTable::uniform(RegMode::Window);
    let b = TuneTable::uniform(RegMode::Registered);
    let out = world(MockBackend::new(), &[Some(a), Some(b)], |pg, _| {
        let mut buf = pg.alloc_zeros::<f32>(4)?;
        pg.all_reduce(&mut buf, ReduceOp::Sum)?.wait()?;
        Ok(())
    });
    for (r, o) in out.into_iter().enumerate() {
        match o {
            Err(Error::InvalidArgument {
                arg: "tune",
                expected,
            }) => {
                assert!(
                    expected.contains("the same tune table on every rank")
                        && expected.contains("global rank 1 has tune table"),
                    "rank {r}: {expected}"
                );
            }
            other => panic!("rank {r}: expected the tune refusal, got {other:?}"),
        }
    }
}

#[test]
fn a_rank_without_the_table_is_named_after_the_timeout() {
    let t = TuneTable::uniform(RegMode::Window);
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    // Rank 0 alone, with a table, in a group of 2 whose rank 1 never comes: it waits for
    // rank 1's fingerprint only up to the group's timeout, and says whom it waited for.
    let opts = PgOptions {
        timeout: Duration::from_millis(300),
        tune: Some(Arc::new(t)),
        watchdog: false,
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(MockBackend::new(), store.clone(), 0, 2, opts).unwrap();
    // Rank 1's id key and init never come either; the comm init itself fails first or the
    // fingerprint wait does: either way a timeout, never a hang.
    let mut buf = pg.alloc_zeros::<f32>(1).unwrap();
    let err = pg
        .all_reduce(&mut buf, ReduceOp::Sum)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    pg.destroy();
}

#[test]
fn windows_on_an_older_library_name_the_feature() {
    let old = MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::Version::new(2, 26, 5)),
        oxccl::mock::FaultPlan::new(),
        0,
        Duration::from_secs(20),
    );
    let t = TuneTable::uniform(RegMode::Window);
    let out = world(old, &[Some(t.clone()), Some(t)], |pg, _| {
        let mut buf = pg.upload_comm(&[1.0f32; 4])?;
        pg.all_reduce(&mut buf, ReduceOp::Sum)?.wait()?;
        Ok(())
    });
    for o in out {
        match o {
            Err(Error::Unsupported { feature, .. }) => {
                assert_eq!(feature, Feature::WindowRegistration)
            }
            other => panic!("expected Unsupported(WindowRegistration), got {other:?}"),
        }
    }
    // Before 2.19 there is no allocator at all: CommBuf is refused naming MemAlloc.
    let older = MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::Version::new(2, 18, 3)),
        oxccl::mock::FaultPlan::new(),
        0,
        Duration::from_secs(20),
    );
    let st = older.stream(Device(0)).unwrap();
    match older.alloc_comm::<f32>(&st, 4) {
        Err(Error::Unsupported { feature, .. }) => assert_eq!(feature, Feature::MemAlloc),
        other => panic!("expected Unsupported(MemAlloc), got {other:?}"),
    }
}

#[test]
fn the_tune_file_variable_names_itself_and_the_line() {
    let dir = std::env::temp_dir().join(format!("oxccl-tune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.tune");
    std::fs::write(&bad, "oxccl-tune 1\nall_reduce * 0 max sometimes\n").unwrap();
    match oxccl::pg::load_tune_file(&bad) {
        Err(Error::InvalidArgument { arg, expected }) => {
            assert_eq!(arg, "tune file");
            assert!(
                expected.contains("line 2, field `mode`") && expected.contains("bad.tune"),
                "{expected}"
            );
        }
        other => panic!("{other:?}"),
    }
    let missing = dir.join("missing.tune");
    assert!(matches!(
        oxccl::pg::load_tune_file(&missing),
        Err(Error::InvalidArgument {
            arg: "tune file",
            ..
        })
    ));
    let good = dir.join("good.tune");
    std::fs::write(&good, TABLE).unwrap();
    let t = oxccl::pg::load_tune_file(&good).unwrap();
    assert_eq!(t, TuneTable::parse(TABLE).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_buffer_moving_to_a_window_drops_its_local_registration() {
    let t = TuneTable::parse(
        "oxccl-tune 1\nall_reduce * 0 max registered\nall_gather * 0 max window\n",
    )
    .unwrap();
    let out = world(MockBackend::new(), &[Some(t.clone()), Some(t)], |pg, _| {
        let mut a = pg.upload_comm(&[1.0f32; 4])?;
        pg.all_reduce(&mut a, ReduceOp::Sum)?.wait()?;
        let before = pg.with_comm(|c| (c.registrations().len(), c.windows().len()))?;
        let mut recv = pg.alloc_comm::<f32>(8)?;
        pg.all_gather(&a, &mut recv)?.wait()?;
        let after = pg.with_comm(|c| (c.registrations().len(), c.windows().len()))?;
        // Registered mode on a buffer in a window: the window serves, nothing is added.
        pg.all_reduce(&mut a, ReduceOp::Sum)?.wait()?;
        let last = pg.with_comm(|c| (c.registrations().len(), c.windows().len()))?;
        Ok((before, after, last, pg.download_any(&a)?))
    });
    for o in out {
        let (before, after, last, a) = o.unwrap();
        assert_eq!(before, (1, 0));
        assert_eq!(
            after,
            (0, 2),
            "a's registration released, a and recv in windows"
        );
        assert_eq!(last, (0, 2));
        assert_eq!(a, vec![4.0; 4]);
    }
}

#[test]
fn coalesced_blocks_take_comm_buffers_as_they_are() {
    let t = TuneTable::uniform(RegMode::Window);
    let out = world(MockBackend::new(), &[Some(t.clone()), Some(t)], |pg, r| {
        let mut a = pg.upload_comm(&[1.0f32 + r as f32; 4])?;
        let mut b = pg.upload(&[2i32; 2])?;
        let mut c = pg.upload_comm(&[3i32; 2])?;
        pg.coalesced(|blk| {
            blk.all_reduce(&mut a, ReduceOp::Sum)?;
            blk.broadcast(&mut c, 1)?;
            blk.all_reduce(&mut b, ReduceOp::Max)
        })?
        .wait()?;
        let mut bufs = [pg.upload_comm(&[1u8; 3])?, pg.upload_comm(&[2u8; 3])?];
        let mut refs: Vec<&mut _> = bufs.iter_mut().collect();
        pg.all_reduce_coalesced(&mut refs, ReduceOp::Sum)?.wait()?;
        Ok((
            pg.download_any(&a)?,
            pg.download_any(&c)?,
            pg.download_any(&bufs[1])?,
            pg.tuned_stats()?,
        ))
    });
    for o in out {
        let (a, c, b1, stats) = o.unwrap();
        assert_eq!(a, vec![3.0; 4]);
        assert_eq!(c, vec![3; 2]);
        assert_eq!(b1, vec![4; 3]);
        // Inside a batch nothing is registered (a window inside a backend group would be a
        // collective call inside another): the block's buffers are used as they are.
        assert_eq!(stats, TunedStats::default());
    }
}

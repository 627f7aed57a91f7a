//! One operation, one kind of buffer (src/pg/tune/): the buffers of an operation are all
//! in symmetric windows or none is (NCCL 2.28.9 gives wrong results, or hangs, on an
//! all_to_all whose send buffer is in a window and whose receive buffer is not). On the
//! mock world: the other buffer is put in a window too; plain memory beside a window is
//! refused naming it, by the backend (the core's rule, `oxccl_core::check::windows`, as the
//! NCCL backend applies it), before the op is queued, inside a coalescing block too; and a
//! buffer leaves its local registration before its window on every rank, also while its
//! last work still runs.

mod tune_kit;

use oxccl::mock::{FaultPlan, MockBackend};
use oxccl::pg::{RegMode, TuneTable, TunedStats};
use oxccl::{Error, FeatureSet, ReduceOp};
use std::time::Duration;
use tune_kit::world;

/// Asserts `res` is the backend's refusal of a window beside plain memory, naming `arg` (the
/// plain buffer) on an op of `kind`.
fn assert_refused(res: oxccl::Result<()>, arg: &str, kind: &str, r: usize) {
    match res {
        Err(Error::InvalidArgument { arg: a, expected }) => {
            assert_eq!(a, arg, "rank {r}");
            assert!(
                expected.contains("symmetric window")
                    && expected.contains(kind)
                    && expected.contains("got plain memory"),
                "rank {r}: {expected}"
            );
        }
        other => panic!("rank {r}: a plain {arg} beside a window gave {other:?}"),
    }
}

#[test]
fn an_op_with_one_buffer_in_a_window_puts_the_other_in_one_too() {
    // The table says plain for all_to_all; its send buffer is in a window already.
    let t = TuneTable::parse("oxccl-tune 1\nall_reduce * 0 max window\nall_to_all * 0 max plain\n")
        .unwrap();
    let out = world(MockBackend::new(), &[Some(t.clone()), Some(t)], |pg, r| {
        let v: Vec<i32> = (0..4).map(|i| r as i32 * 10 + i).collect();
        let mut a = pg.upload_comm(&v)?;
        pg.all_reduce(&mut a, ReduceOp::Sum)?.wait()?;
        let mut b = pg.alloc_comm::<i32>(4)?;
        pg.all_to_all(&a, &mut b)?.wait()?;
        let made = pg.with_comm(|c| c.windows_made())?;
        Ok((pg.download_any(&b)?, pg.tuned_stats()?, made))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (b, stats, made) = o.unwrap();
        // a = [10, 12, 14, 16] on both ranks; rank r receives chunk r from each.
        let want = if r == 0 {
            [10, 12, 10, 12]
        } else {
            [14, 16, 14, 16]
        };
        assert_eq!(b, want, "rank {r}");
        assert_eq!(
            stats,
            TunedStats {
                ops: [0, 0, 2],
                registered: 0,
                windows: 2
            },
            "rank {r}: the all_to_all ran in window mode"
        );
        assert_eq!(made, 2, "rank {r}");
    }
}

#[test]
fn plain_memory_beside_a_window_is_refused_naming_it() {
    // No table: the program put one buffer in a window itself.
    let out = world(MockBackend::new(), &[None, None], |pg, r| {
        let win = pg.upload_comm(&[r as i32 + 1; 4])?;
        pg.register_buffer(&win, RegMode::Window)?;
        let mut plain = pg.alloc_zeros::<i32>(4)?;
        let issued = pg.with_comm(|c| c.ops_issued())?;
        let as_recv = pg.all_to_all(&win, &mut plain).map(drop);
        let mut win_recv = pg.alloc_comm::<i32>(4)?;
        pg.register_buffer(&win_recv, RegMode::Window)?;
        let plain_send = pg.upload(&[7i32; 4])?;
        let as_send = pg.all_to_all(&plain_send, &mut win_recv).map(drop);
        // Neither refused op reached the mock's queue (it numbers every op it takes).
        let unqueued = pg.with_comm(|c| c.ops_issued())? == issued;
        // Nothing was issued: both kinds alike still work, and the values are right.
        pg.all_to_all(&win, &mut win_recv)?.wait()?;
        let mut plain2 = pg.alloc_zeros::<i32>(4)?;
        pg.all_to_all(&plain_send, &mut plain2)?.wait()?;
        Ok((
            (as_recv, as_send, unqueued),
            pg.download_any(&win_recv)?,
            pg.download(&plain2)?,
        ))
    });
    for (r, o) in out.into_iter().enumerate() {
        let ((as_recv, as_send, unqueued), got, plain) = o.unwrap();
        assert_refused(as_recv, "recv", "all_to_all", r);
        assert_refused(as_send, "send", "all_to_all", r);
        assert!(unqueued, "rank {r}: a refused op was queued");
        assert_eq!(got, [1, 1, 2, 2], "rank {r}");
        assert_eq!(plain, [7; 4], "rank {r}");
    }
}

#[test]
fn a_busy_buffer_leaves_its_local_registration_before_its_window() {
    // Rank 1's first operation runs 300 ms late, so `a` is still in use on both ranks when
    // the all_gather puts it in a window: the registration must still go first, everywhere.
    let plan = FaultPlan::new().delay_op(1, 0, Duration::from_millis(300));
    let backend = MockBackend::with_options(
        FeatureSet::for_version(oxccl::mock::DEFAULT_VERSION),
        plan,
        1,
        Duration::from_secs(20),
    );
    let t = TuneTable::parse(
        "oxccl-tune 1\nall_reduce * 0 max registered\nall_gather * 0 max window\n",
    )
    .unwrap();
    let out = world(backend, &[Some(t.clone()), Some(t)], |pg, _| {
        let mut a = pg.upload_comm(&[1.0f32; 4])?;
        let first = pg.all_reduce(&mut a, ReduceOp::Sum)?;
        let busy = !first.is_completed();
        let mut recv = pg.alloc_comm::<f32>(8)?;
        pg.all_gather(&a, &mut recv)?.wait()?;
        let after = pg.with_comm(|c| (c.registrations().len(), c.windows().len()))?;
        Ok((busy, after, pg.download_any(&recv)?))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (busy, after, recv) = o.unwrap();
        assert!(busy, "rank {r}: the first all_reduce had already ended");
        assert_eq!(after, (0, 2), "rank {r}: registrations, windows");
        assert_eq!(recv, vec![2.0; 8], "rank {r}");
    }
}

#[test]
fn a_coalescing_block_refuses_plain_memory_beside_a_window() {
    // A block cannot make windows (the library's group is open), so the mix is refused
    // there, by the backend at the op's issue: before anything of it is queued in the open
    // group, not at the group's end.
    let out = world(MockBackend::new(), &[None, None], |pg, r| {
        let win = pg.upload_comm(&[r as i32 + 1; 2])?;
        pg.register_buffer(&win, RegMode::Window)?;
        let mut plain = pg.alloc_zeros::<i32>(4)?;
        let issued = pg.with_comm(|c| c.ops_issued())?;
        let mut at_op = None;
        let refused = pg
            .coalesced(|blk| {
                let r = blk.all_gather(&win, &mut plain);
                at_op = Some(r.clone());
                r
            })
            .map(drop);
        let unqueued = pg.with_comm(|c| c.ops_issued())? == issued;
        // The group is still usable, and a block of one kind of buffer runs.
        let mut win_recv = pg.alloc_comm::<i32>(4)?;
        pg.register_buffer(&win_recv, RegMode::Window)?;
        pg.coalesced(|blk| blk.all_gather(&win, &mut win_recv))?
            .wait()?;
        Ok((refused, at_op, unqueued, pg.download_any(&win_recv)?))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (refused, at_op, unqueued, got) = o.unwrap();
        assert_refused(at_op.expect("the block ran"), "recv", "all_gather", r);
        assert_refused(refused, "recv", "all_gather", r);
        assert!(unqueued, "rank {r}: the refused op was queued");
        assert_eq!(got, [1, 1, 2, 2], "rank {r}");
    }
}

//! The seed cases' bodies, written once over the backend: each runs on one rank and checks
//! that rank's outcome, returning what went wrong. `tests/seed_cases.rs` runs them on the
//! mock world (ranks as threads); `examples/pg_cases.rs` runs them on NCCL under torchrun (a
//! process per GPU).
#![allow(dead_code)]

use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, ProcessGroup, DEFAULT_TIMEOUT};
use oxccl::{CommConfig, CommState, Device, Error, ReduceOp};
use std::time::Duration;

#[macro_use]
#[path = "../case_kit/mod.rs"]
mod case_kit;
// `run` and `run_on` are for the mock suites; the GPU runners (examples) do not use it.
#[allow(unused_imports)]
pub use case_kit::{run, run_on, Body, Case, MakeGroup, Verdict};

/// The device of `rank`: `rank × PG_CASES_DEVICE_STRIDE` (default 1), so that seed case 22's
/// "N = 2 on 4 GPUs, tensors on GPU 2r" runs as written with a stride of 2.
pub fn device_of(rank: u32) -> Device {
    let stride = std::env::var("PG_CASES_DEVICE_STRIDE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(1);
    Device(rank * stride)
}

/// Lazy groups: nothing bound, a timeout that ends a broken case quickly.
pub fn lazy(rank: u32) -> PgOptions {
    PgOptions {
        timeout: Duration::from_secs(60),
        device: device_of(rank),
        // A failing case must fail, not end the test process (the default, as PyTorch's).
        error_handling: oxccl::rules::env::ErrorHandling::CleanUpOnly,
        ..PgOptions::default()
    }
}

/// Eager groups: the device bound at init.
pub fn eager(rank: u32) -> PgOptions {
    PgOptions {
        bound_device: Some(device_of(rank)),
        ..lazy(rank)
    }
}

pub mod collectives;
pub mod groups;
pub mod safety;

/// The cases that run wherever a backend runs them (case 2 puts every rank on device 0, which
/// needs a backend with one device per rank, 23 the mock's mismatch detection; case 26 needs
/// an even number of ranks).
pub fn portable<B: PgBackend>() -> Vec<Case<B>> {
    vec![
        ("case_03_use_after_destroy", case_03::<B>),
        ("case_04_abort_unblocks_a_stuck_op", case_04::<B>),
        ("case_05_unordered_destroy", case_05::<B>),
        ("case_06_split_counts", case_06::<B>),
        ("case_07_lazy_split", case_07::<B>),
        ("case_08_eager_split", case_08::<B>),
        ("case_09_nonblocking_init", case_09::<B>),
        ("case_10_timeout_at_run_time", case_10::<B>),
        ("case_11_group_uid_and_description", case_11::<B>),
        ("case_12_nan_check", safety::case_12::<B>),
        ("case_13_error_reason_propagation", safety::case_13::<B>),
        ("case_14_wait_timeout", safety::case_14::<B>),
        ("case_17_broadcast_coalesced", collectives::case_17::<B>),
        (
            "case_18_all_reduce_coalesced_uneven",
            collectives::case_18::<B>,
        ),
        (
            "case_19_coalescing_block_one_work",
            collectives::case_19::<B>,
        ),
        ("case_20_fp8", collectives::case_20::<B>),
        ("case_21_reduce_scatter_int64", collectives::case_21::<B>),
        ("case_22_single_rank_groups", collectives::case_22::<B>),
        ("case_24_complex_as_real_pairs", collectives::case_24::<B>),
        ("case_25_membership", groups::case_25::<B>),
        ("case_27_completion_hooks", safety::case_27::<B>),
        ("case_28_flight_recorder_ring", safety::case_28::<B>),
        ("case_29_flight_recorder_states", safety::case_29::<B>),
        ("case_26_subgroups_with_global_peers", groups::case_26::<B>),
        ("case_31_config_passes_through", groups::case_31::<B>),
    ]
}

pub(crate) fn all_reduce_values<B: PgBackend>(
    pg: &ProcessGroup<B>,
    v: &[f32],
) -> oxccl::Result<Vec<f32>> {
    let mut b = pg.upload(v)?;
    pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
    pg.download(&b)
}

/// Case 2: two ranks on one device; the backend refuses (invalid usage).
pub fn case_02<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let r = mk(PgOptions {
        bound_device: Some(Device(0)),
        ..lazy(rank)
    })
    .and_then(|pg| all_reduce_values(&pg, &[1.0, 2.0, 3.0]));
    // A backend error (NCCL's invalid usage: "Duplicate GPU detected"), not another variant
    // that happens to carry the code.
    ensure!(
        matches!(
            &r,
            Err(Error::Backend {
                code: oxccl::ResultCode::INVALID_USAGE,
                ..
            })
        ),
        "expected a backend error of invalid usage, got {r:?}"
    );
    Ok(())
}

/// Case 3: use after destroy is an error, never a hang; drop without destroy returns.
pub fn case_03<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size() as f32;
    let v = ok!(all_reduce_values(&pg, &[1.0; 100]));
    ensure!(v == vec![n; 100], "all_reduce gave {v:?}");
    let mut b = ok!(pg.upload(&[1.0f32; 4]));
    pg.destroy();
    ensure!(
        pg.comm_state() == Some(CommState::Destroyed),
        "state after destroy: {:?}",
        pg.comm_state()
    );
    // Refused at the call (no work to wait for, so nothing can hang), every time.
    for attempt in 0..2 {
        let after = pg.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
        ensure!(
            matches!(
                after,
                Err(Error::InvalidState {
                    state: CommState::Destroyed,
                    ..
                })
            ),
            "after destroy (attempt {attempt}): {after:?}"
        );
    }
    let pg = ok!(mk(lazy(rank)));
    let v = ok!(all_reduce_values(&pg, &[1.0]));
    ensure!(v == vec![n], "second group: {v:?}");
    drop(pg);
    Ok(())
}

/// Case 4: an unmatched all_reduce on rank 0 is ended by an abort from another thread.
pub fn case_04<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let v = ok!(all_reduce_values(&pg, &[1.0]));
    ensure!(v == vec![pg.size() as f32], "first all_reduce: {v:?}");
    if rank == 0 {
        let mut b = ok!(pg.upload(&[1.0f32; 8]));
        let work = ok!(pg.all_reduce(&mut b, ReduceOp::Sum));
        let aborter = pg.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            aborter.abort("shut down by the test");
        });
        // The host sync (c10d's `t.cpu()`): blocked behind the unmatched all_reduce until the
        // abort frees it, whatever it then returns.
        let began = std::time::Instant::now();
        let _ = pg.download(&b);
        let blocked = began.elapsed();
        let r = work.wait();
        let _ = t.join();
        ensure!(
            blocked >= Duration::from_millis(150) && blocked < Duration::from_secs(10),
            "the host sync returned after {blocked:?} (the abort came at 200 ms)"
        );
        ensure!(
            matches!(&r, Err(Error::Aborted { reason }) if reason.contains("shut down by the test")),
            "wait gave {r:?}"
        );
        ensure!(
            pg.comm_state() == Some(CommState::Aborted),
            "state {:?}",
            pg.comm_state()
        );
        let next = pg.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
        ensure!(
            matches!(&next, Err(Error::Aborted { reason }) if reason.contains("shut down by the test")),
            "the next op: {next:?}"
        );
    } else {
        // Stay alive past the abort: a peer that leaves is a different failure (Remote).
        std::thread::sleep(Duration::from_millis(1500));
    }
    Ok(())
}

/// Case 5: two subgroups destroyed in opposite orders on the two ranks.
pub fn case_05<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let a = ok!(pg.new_group(&[0, 1], None));
    let b = ok!(pg.new_group(&[0, 1], None));
    if a.rank().is_some() {
        ensure!(ok!(all_reduce_values(&a, &[1.0])) == vec![2.0], "group a");
        ensure!(ok!(all_reduce_values(&b, &[2.0])) == vec![4.0], "group b");
    }
    if rank == 0 {
        a.destroy();
        b.destroy();
    } else {
        b.destroy();
        a.destroy();
    }
    pg.destroy();
    for (name, g) in [("a", &a), ("b", &b), ("default", &pg)] {
        ensure!(
            g.comm_state() == Some(CommState::Destroyed),
            "{name}: {:?}",
            g.comm_state()
        );
        let mut x = ok!(pg.upload(&[1.0f32]));
        let r = g.all_reduce(&mut x, ReduceOp::Sum).map(|_| ());
        ensure!(
            matches!(
                r,
                Err(Error::InvalidState {
                    state: CommState::Destroyed,
                    ..
                })
            ),
            "{name} after destroy: {r:?}"
        );
    }
    Ok(())
}

/// Case 6: two used subgroups split twice; one used and one unused split once.
pub fn case_06<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let all: Vec<u32> = (0..pg.size()).collect();
    ok!(all_reduce_values(&pg, &[1.0]));
    let a = ok!(pg.new_group(&all, None));
    let b = ok!(pg.new_group(&all, None));
    ok!(all_reduce_values(&a, &[1.0]));
    ok!(all_reduce_values(&b, &[1.0]));
    ensure!(pg.split_count() == 2, "two used: {}", pg.split_count());
    // A fresh default group: one subgroup used and one never used split once.
    let pg = ok!(mk(lazy(rank)));
    ok!(all_reduce_values(&pg, &[1.0]));
    let _unused = ok!(pg.new_group(&all, None));
    let d = ok!(pg.new_group(&all, None));
    let v = ok!(all_reduce_values(&d, &[1.0]));
    ensure!(v == vec![pg.size() as f32], "used subgroup: {v:?}");
    ensure!(
        pg.split_count() == 1,
        "one used, one unused: {}",
        pg.split_count()
    );
    Ok(())
}

/// Case 7: a lazy subgroup splits at its first operation, not at a parent's.
pub fn case_07<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let all: Vec<u32> = (0..pg.size()).collect();
    let ng = ok!(pg.new_group(&all, None));
    let mut t = ok!(pg.upload(&[rank as i64]));
    ok!(ok!(pg.broadcast(&mut t, 0)).wait());
    ensure!(
        pg.split_count() == 0,
        "after the parent's op: {}",
        pg.split_count()
    );
    ok!(ok!(ng.broadcast(&mut t, 0)).wait());
    ensure!(
        pg.split_count() == 1,
        "after the child's op: {}",
        pg.split_count()
    );
    ensure!(ok!(pg.download(&t)) == vec![0], "broadcast value");
    Ok(())
}

/// Case 8: with a bound device, new_group([0]) splits at once; a 1-rank broadcast is the
/// identity and splits no more.
pub fn case_08<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(eager(rank)));
    let ng = ok!(pg.new_group(&[0], None));
    ensure!(pg.split_count() == 1, "at once: {}", pg.split_count());
    let mut t = ok!(pg.upload(&[rank as i64]));
    if rank == 0 {
        ok!(ok!(ng.broadcast(&mut t, 0)).wait());
    }
    ensure!(pg.split_count() == 1, "after: {}", pg.split_count());
    ensure!(ok!(pg.download(&t)) == vec![rank as i64], "tensor changed");
    Ok(())
}

/// Case 9: nonblocking communicators, lazy and eager: split counts 0, 0, 1 and the
/// all_reduce completes.
pub fn case_09<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    for opts in [lazy(rank), eager(rank)] {
        let pg = ok!(mk(PgOptions {
            config: CommConfig::new().blocking(false),
            ..opts
        }));
        let all: Vec<u32> = (0..pg.size()).collect();
        ensure!(pg.split_count() == 0, "first");
        let v = ok!(all_reduce_values(&pg, &[1.5; 100]));
        ensure!(v == vec![1.5 * pg.size() as f32; 100], "values {v:?}");
        let ng = ok!(pg.new_group(&all, None));
        ensure!(pg.split_count() == 0, "second");
        let mut t = ok!(pg.upload(&[rank as i32]));
        ok!(ok!(ng.broadcast(&mut t, 0)).wait());
        ensure!(pg.split_count() == 1, "third: {}", pg.split_count());
        ensure!(ok!(pg.download(&t)) == vec![0], "broadcast");
        ensure!(
            pg.comm_state() == Some(CommState::Ready) && ng.comm_state() == Some(CommState::Ready),
            "states {:?} {:?}",
            pg.comm_state(),
            ng.comm_state()
        );
    }
    Ok(())
}

/// Case 10 (the group part): default 600 s; set at run time → 23 then 252.
pub fn case_10<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(PgOptions {
        timeout: DEFAULT_TIMEOUT,
        ..lazy(rank)
    }));
    ensure!(
        pg.timeout() == DEFAULT_TIMEOUT,
        "default {:?}",
        pg.timeout()
    );
    pg.set_timeout(Duration::from_secs(23));
    ensure!(
        pg.timeout() == Duration::from_secs(23),
        "{:?}",
        pg.timeout()
    );
    let mut b = ok!(pg.upload(&[1.0f32]));
    let w = ok!(pg.all_reduce(&mut b, ReduceOp::Sum));
    ensure!(w.timeout() == Duration::from_secs(23), "23");
    pg.set_timeout(Duration::from_secs(252));
    ensure!(
        pg.timeout() == Duration::from_secs(252),
        "{:?}",
        pg.timeout()
    );
    let w = ok!(pg.all_reduce(&mut b, ReduceOp::Sum));
    ensure!(w.timeout() == Duration::from_secs(252), "252");
    ok!(w.wait());
    Ok(())
}

/// Case 11: uids 0, 1, 2 and descriptions "default_pg", "test_purpose", "undefined".
pub fn case_11<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let all: Vec<u32> = (0..pg.size()).collect();
    let named = ok!(pg.new_group(
        &all,
        Some(PgOptions {
            desc: "test_purpose".into(),
            ..lazy(rank)
        })
    ));
    let plain = ok!(pg.new_group(&all, None));
    let got = [
        (pg.uid(), pg.desc()),
        (named.uid(), named.desc()),
        (plain.uid(), plain.desc()),
    ];
    ensure!(
        got == [(0, "default_pg"), (1, "test_purpose"), (2, "undefined")],
        "{got:?}"
    );
    Ok(())
}

//! A `Comm`'s membership: suspend / resume with its memory statistics, revoke, shrink and grow,
//! each used as intended (values on the new communicator) and as a careless caller would (twice,
//! in the wrong state, with ranks that are not members), and each refused by feature on a
//! library without it. A step the loaded library lacks is skipped with a note.

use super::{down, gpus, nccl, on_gpus, on_gpus_with, refused_arg, up, zeros};
use oxccl_comm::core::ShrinkMode;
use oxccl_comm::{Comm, CommConfig, CommState, Error, Feature, Nccl, ReduceOp, UniqueId};

/// Whether the loaded library has `f` (a note when not).
fn has(f: Feature) -> bool {
    let set = *oxccl_comm::Backend::features(&nccl());
    let yes = set.has(f);
    if !yes {
        eprintln!("skipped: the loaded NCCL {} lacks {f}", set.version());
    }
    yes
}

/// An all-reduce of each rank's `r + 1` on `c`: the sum over its ranks' `r + 1`.
fn sum_of_ranks(c: &mut Comm, r: u32) -> u32 {
    let x = up(c, &[r + 1]);
    let mut y = zeros::<u32>(c, 1);
    c.all_reduce(&x, &mut y, ReduceOp::Sum).unwrap();
    down(c, &y)[0]
}

#[track_caller]
fn invalid_state<T: std::fmt::Debug>(r: oxccl_comm::Result<T>, want: CommState) {
    match r {
        Err(Error::InvalidState { state, .. }) if state == want => {}
        other => panic!("expected InvalidState in {want:?}, got {other:?}"),
    }
}

#[test]
fn a_suspended_communicator_refuses_operations_until_resumed() {
    let Some(n) = gpus() else { return };
    if !has(Feature::SuspendResume) || !has(Feature::MemStats) {
        return;
    }
    on_gpus(n, move |r, mut c| {
        let full = n * (n + 1) / 2;
        assert_eq!(sum_of_ranks(&mut c, r), full);
        let before = c.mem_stats().unwrap();
        assert!(!before.suspended && before.total > 0, "{before:?}");
        c.suspend(true).unwrap();
        assert_eq!(c.state(), CommState::Suspended);
        assert!(c.mem_stats().unwrap().suspended);
        let mut x = up(&c, &[1u32]);
        invalid_state(
            c.all_reduce_in_place(&mut x, ReduceOp::Sum),
            CommState::Suspended,
        );
        // Twice: the second suspend is refused, the communicator stays suspended.
        invalid_state(c.suspend(true), CommState::Suspended);
        c.resume().unwrap();
        assert_eq!(c.state(), CommState::Ready);
        assert!(!c.mem_stats().unwrap().suspended);
        // A resume of a communicator that is not suspended names its state.
        invalid_state(c.resume(), CommState::Ready);
        assert_eq!(sum_of_ranks(&mut c, r), full);
        c.destroy().unwrap();
    });
}

#[test]
fn a_revoked_communicator_refuses_operations_and_shrinks() {
    let Some(n) = gpus() else { return };
    if !has(Feature::Revoke) || !has(Feature::Shrink) {
        return;
    }
    on_gpus(n, move |r, mut c| {
        assert_eq!(sum_of_ranks(&mut c, r), n * (n + 1) / 2);
        c.revoke("the test revokes").unwrap();
        assert_eq!(c.state(), CommState::Revoked);
        // Twice is harmless.
        c.revoke("again").unwrap();
        let mut x = up(&c, &[1u32]);
        invalid_state(
            c.all_reduce_in_place(&mut x, ReduceOp::Sum),
            CommState::Revoked,
        );
        let cfg = CommConfig::new();
        // Excluding this rank itself, a rank outside, a rank twice.
        refused_arg(c.shrink(&[r], &cfg, ShrinkMode::Default), "exclude");
        refused_arg(c.shrink(&[n], &cfg, ShrinkMode::Default), "exclude");
        let last = n - 1;
        if r != last {
            refused_arg(
                c.shrink(&[last, last], &cfg, ShrinkMode::Default),
                "exclude",
            );
        }
        // Leaving nobody out is refused before NCCL (which refuses an empty list too).
        refused_arg(c.shrink(&[], &cfg, ShrinkMode::Default), "exclude");
        if n == 1 {
            c.destroy().unwrap();
            return;
        }
        // The last rank leaves; the others go on, renumbered in order.
        let exclude = vec![last];
        if exclude.contains(&r) {
            c.destroy().unwrap();
            return;
        }
        let mut small = c.shrink(&exclude, &cfg, ShrinkMode::Default).unwrap();
        let left = n - exclude.len() as u32;
        assert_eq!((small.rank(), small.size()), (r, left));
        assert_eq!(sum_of_ranks(&mut small, r), left * (left + 1) / 2);
        small.destroy().unwrap();
        c.destroy().unwrap();
    });
}

/// Grow refusals need no newcomer: a size that adds no rank, a newcomer's rank outside the
/// grown size, an id of zeros.
#[test]
fn grow_refuses_sizes_that_add_no_rank_and_ids_of_nobody() {
    let Some(n) = gpus() else { return };
    if !has(Feature::Grow) {
        return;
    }
    on_gpus(n, move |_, mut c| {
        let cfg = CommConfig::new();
        let id = c.grow_id().unwrap();
        refused_arg(c.grow(n, &id, &cfg), "size");
        refused_arg(c.grow(n - 1, &id, &cfg), "size");
        let lib = c.backend().backend();
        refused_arg(Comm::join_grown(&lib, &id, n + 1, n + 1, 0, &cfg), "rank");
        refused_arg(Comm::join_grown(&lib, &id, 0, 0, 0, &cfg), "size");
        let zeros_id = UniqueId::from_bytes(&[0; UniqueId::LEN]).unwrap();
        refused_arg(Comm::join_grown(&lib, &zeros_id, n, n + 1, 0, &cfg), "id");
        c.barrier().unwrap();
        c.destroy().unwrap();
    });
}

/// The ranks on all GPUs but the last grow by a newcomer on the last (two GPUs or more).
#[test]
fn a_communicator_grows_by_a_newcomer() {
    let Some(n) = gpus() else { return };
    if n < 2 {
        eprintln!("skipped: growing needs two GPUs");
        return;
    }
    if !has(Feature::Grow) {
        return;
    }
    let lib = nccl();
    let (tx, rx) = std::sync::mpsc::channel::<UniqueId>();
    let newcomer = {
        let lib = lib.clone();
        std::thread::spawn(move || {
            let id = rx.recv().unwrap();
            let mut c = Comm::join_grown(&lib, &id, n - 1, n, n - 1, &CommConfig::new()).unwrap();
            let s = sum_of_ranks(&mut c, n - 1);
            c.destroy().unwrap();
            s
        })
    };
    let tx = std::sync::Mutex::new(Some(tx));
    let tx = std::sync::Arc::new(tx);
    let sums = on_gpus_with(lib, n - 1, move |r, mut c| {
        let s = grow_one(&tx, n, r, &mut c);
        c.destroy().unwrap();
        s
    });
    let want = n * (n + 1) / 2;
    assert!(sums.iter().all(|s| *s == want), "{sums:?}");
    assert_eq!(newcomer.join().unwrap(), want);
}

/// A running rank's part of the grow: rank 0 makes the id, hands it to the other running
/// ranks by broadcast and to the newcomer by channel.
fn grow_one(
    tx: &std::sync::Mutex<Option<std::sync::mpsc::Sender<UniqueId>>>,
    n: u32,
    r: u32,
    c: &mut Comm,
) -> u32 {
    let made = if r == 0 {
        *c.grow_id().unwrap().as_bytes()
    } else {
        [0; UniqueId::LEN]
    };
    let mut bytes = up(c, &made);
    c.broadcast_in_place(&mut bytes, 0).unwrap();
    let id = UniqueId::from_bytes(&down(c, &bytes)).unwrap();
    if r == 0 {
        let sender = tx.lock().unwrap().take().unwrap();
        sender.send(id).unwrap();
    }
    let mut big = c.grow(n, &id, &CommConfig::new()).unwrap();
    assert_eq!((big.rank(), big.size()), (r, n));
    let s = sum_of_ranks(&mut big, r);
    big.destroy().unwrap();
    s
}

/// On a library without them, each membership call names the feature it needs.
#[test]
fn membership_calls_name_the_feature_a_library_lacks() {
    let Some(n) = gpus() else { return };
    let lib: Nccl = [
        Feature::Revoke,
        Feature::Shrink,
        Feature::Grow,
        Feature::SuspendResume,
        Feature::MemStats,
    ]
    .into_iter()
    .fold(nccl(), |l, f| l.without(f));
    on_gpus_with(lib, n, move |r, mut c| {
        let lacks = |r: Result<(), Error>, want: Feature| match r {
            Err(Error::Unsupported { feature, .. }) if feature == want => {}
            other => panic!("expected {want} unsupported, got {other:?}"),
        };
        let cfg = CommConfig::new();
        lacks(c.mem_stats().map(drop), Feature::MemStats);
        lacks(c.suspend(false), Feature::SuspendResume);
        lacks(c.resume(), Feature::SuspendResume);
        lacks(c.grow_id().map(drop), Feature::Grow);
        lacks(c.revoke("no").map(drop), Feature::Revoke);
        lacks(
            c.shrink(&[], &cfg, ShrinkMode::Default).map(drop),
            Feature::Shrink,
        );
        assert_eq!(c.state(), CommState::Ready);
        assert_eq!(sum_of_ranks(&mut c, r), n * (n + 1) / 2);
        c.destroy().unwrap();
    });
}

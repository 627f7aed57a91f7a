//! Revoke and shrink: a lost rank's survivors stop what is in flight and go on without it.

mod common;

use common::*;
use oxccl_core::traits::ShrinkMode;
use oxccl_core::Reshape;
use oxccl_core::{
    CommConfig, CommState, Communicator, DataType, Error, Feature, FeatureSet, ReduceOp, Stream,
    Version,
};
use oxccl_mock::{MockComm, World};
use std::time::Duration;

/// A world of `n` imitating NCCL 2.28.9 (revoke needs 2.28.7; the mock's default is older).
fn world(n: u32) -> Vec<MockComm> {
    World::builder(n)
        .version(Version::new(2, 28, 9))
        .build()
        .unwrap()
}

/// The survivors of a dead rank 2 (of 4) shrink it away: ranks renumbered in order, sums over
/// the three, and the parent's abort does not touch the child.
#[test]
fn survivors_of_a_dead_rank_shrink_and_go_on() {
    let out = on_ranks(world(4), |c| {
        if c.rank() == 2 {
            c.abort("killed");
            return None;
        }
        // The dead rank fails the survivors' next collective.
        let e = sum_i64(&c, 1).expect_err("a sum with a dead rank");
        assert!(matches!(e, Error::Remote { .. }), "{e}");
        c.revoke("rank 2 is lost").unwrap();
        assert_eq!(c.state(), CommState::Revoked);
        let child = c
            .shrink(&[2], &CommConfig::new(), ShrinkMode::Default)
            .unwrap();
        c.abort("replaced by the shrunk communicator");
        let got = (
            child.rank(),
            child.size(),
            sum_i64(&child, 1 << c.rank()).unwrap(),
        );
        Some(got)
    });
    let total = 1 + 2 + 8;
    assert_eq!(
        out,
        vec![
            Some((0, 3, total)),
            Some((1, 3, total)),
            None,
            Some((2, 3, total))
        ]
    );
}

/// Revoke stops an operation waiting for a rank that never comes, refuses new ones, and
/// leaves a communicator that shrinks (here with the abort flag, from a failed state too).
#[test]
fn revoke_stops_the_operation_in_flight_and_refuses_the_next() {
    let out = on_ranks(world(3), |c| {
        if c.rank() == 0 {
            // Never calls the collective; later left out by the others.
            std::thread::sleep(Duration::from_millis(300));
            return None;
        }
        let s = stream();
        let mut b = Buf::from_bytes(&i64s(&[1]));
        // SAFETY: `b` outlives the stream's work: synchronized below, after the revoke.
        unsafe { all_reduce_in_place(&c, &s, &mut b, DataType::Int64, ReduceOp::Sum) }.unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            c.revoke("rank 0 never came"),
            Ok(oxccl_core::Progress::Done)
        );
        // The stream passes the stopped operation (as NCCL's does: its kernels exit), its
        // output undefined; nothing hangs and the communicator is quiescent.
        s.synchronize().unwrap();
        assert_eq!(c.poll(), Ok(oxccl_core::Progress::Done));
        assert_eq!(c.state(), CommState::Revoked);
        let refused = sum_i64(&c, 1).expect_err("an operation after revoke");
        assert!(
            matches!(
                refused,
                Error::InvalidState {
                    state: CommState::Revoked,
                    attempted: "all_reduce",
                    ..
                }
            ),
            "{refused}"
        );
        // Revoke again: nothing changes. Finalize: refused.
        assert!(c.revoke("again").is_ok());
        assert!(c.finalize().is_err());
        let child = c
            .shrink(&[0], &CommConfig::new(), ShrinkMode::AbortInFlight)
            .unwrap();
        Some((child.rank(), child.size(), sum_i64(&child, 10).unwrap()))
    });
    assert_eq!(out, vec![None, Some((0, 2, 20)), Some((1, 2, 20))]);
}

/// Every bad exclusion is refused before any rendezvous, naming `exclude`.
#[test]
fn bad_exclusions_are_refused_before_the_library() {
    let w = World::new(4).unwrap();
    let c = &w[1];
    for bad in [&[3u32, 3][..], &[1], &[4], &[0, 9]] {
        let e = c
            .shrink(bad, &CommConfig::new(), ShrinkMode::Default)
            .expect_err("a bad exclusion");
        assert!(
            matches!(e, Error::InvalidArgument { arg: "exclude", .. }),
            "{bad:?}: {e}"
        );
    }
    // Nothing was started: the communicator is as it was.
    assert_eq!(c.state(), CommState::Ready);
}

/// Survivors that leave out different ranks are told so instead of forming two children.
#[test]
fn survivors_that_disagree_on_the_exclusion_are_told() {
    let w = World::builder(3)
        .init_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let out = on_ranks(w, |c| match c.rank() {
        0 => Some(
            c.shrink(&[2], &CommConfig::new(), ShrinkMode::Default)
                .map(|_| ()),
        ),
        1 => {
            std::thread::sleep(Duration::from_millis(100));
            Some(
                c.shrink(&[0], &CommConfig::new(), ShrinkMode::Default)
                    .map(|_| ()),
            )
        }
        _ => None,
    });
    assert!(
        matches!(
            out[1],
            Some(Err(Error::Mismatch {
                what: "exclude",
                ..
            }))
        ),
        "{:?}",
        out[1]
    );
    // Rank 0 waited for rank 1 in vain: a timeout naming it.
    match &out[0] {
        Some(Err(Error::Timeout { what, .. })) => assert!(what.contains("rank(s) 1"), "{what}"),
        other => panic!("{other:?}"),
    }
}

/// The gates: revoke needs 2.28.7, shrink 2.27.3, each named with the version loaded.
#[test]
fn revoke_and_shrink_are_gated_by_the_version() {
    let w = World::builder(2)
        .features(FeatureSet::for_version(Version::new(2, 27, 3)))
        .build()
        .unwrap();
    let e = w[0].revoke("x").expect_err("revoke on 2.27.3");
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: Feature::Revoke,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("2.28.7"), "{e}");
    let w = World::builder(2)
        .features(FeatureSet::for_version(Version::new(2, 26, 6)))
        .build()
        .unwrap();
    let e = w[0]
        .shrink(&[1], &CommConfig::new(), ShrinkMode::Default)
        .expect_err("shrink on 2.26.6");
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: Feature::Shrink,
                ..
            }
        ),
        "{e}"
    );
}

/// A shrunk communicator shrinks again (two losses in a row), and splits.
#[test]
fn a_shrunk_communicator_shrinks_again() {
    let out = on_ranks(World::new(4).unwrap(), |c: MockComm| {
        if c.rank() == 3 {
            return None;
        }
        let a = c
            .shrink(&[3], &CommConfig::new(), ShrinkMode::Default)
            .unwrap();
        if a.rank() == 0 {
            return None;
        }
        let b = a
            .shrink(&[0], &CommConfig::new(), ShrinkMode::Default)
            .unwrap();
        let halves = b.split(Some(0), 0, &CommConfig::new()).unwrap().unwrap();
        Some((b.rank(), b.size(), sum_i64(&halves, 5).unwrap()))
    });
    assert_eq!(out, vec![None, Some((0, 2, 10)), Some((1, 2, 10)), None]);
}

//! Grow (running ranks keep theirs, new ranks join above them), suspend and resume, and
//! memory statistics on the mock, with NCCL's gates.

mod common;

use common::*;
use oxccl_core::{
    CommConfig, CommState, Communicator, Device, Error, Feature, FeatureSet, UniqueId, Version,
};
use oxccl_core::{Reshape, ReshapeBackend, Suspend};
use oxccl_mock::{MockBackend, MockComm, World};
use std::time::Duration;

fn v(minor: u32, patch: u32) -> Version {
    Version::new(2, minor, patch)
}

fn world(n: u32, version: Version) -> Vec<MockComm> {
    World::builder(n).version(version).build().unwrap()
}

fn backend(version: Version) -> MockBackend {
    MockBackend::with_options(
        FeatureSet::for_version(version),
        oxccl_mock::FaultPlan::new(),
        1,
        Duration::from_secs(10),
    )
}

#[test]
fn three_running_ranks_grow_to_five() {
    let running = world(3, v(32, 3));
    let id = running[0].grow_id().unwrap();
    let joiner = backend(v(32, 3));
    let out = std::thread::scope(|s| {
        let old: Vec<_> = running
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let g = c.grow(5, &id, &CommConfig::new()).unwrap();
                    (g.rank(), g.size(), sum_i64(&g, 1 << g.rank()).unwrap())
                })
            })
            .collect();
        let new: Vec<_> = (3..5u32)
            .map(|r| {
                let joiner = joiner.clone();
                s.spawn(move || {
                    let g = joiner
                        .join_grown(&id, r, 5, Device(r), &CommConfig::new())
                        .unwrap();
                    (g.rank(), g.size(), sum_i64(&g, 1 << g.rank()).unwrap())
                })
            })
            .collect();
        old.into_iter()
            .chain(new)
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(
        out,
        (0..5).map(|r| (r, 5, 31)).collect::<Vec<_>>(),
        "ranks kept, joiners above, sums over five"
    );
    // The running communicator is untouched.
    assert_eq!(on_ranks(running, |c| sum_i64(&c, 1).unwrap()), vec![3; 3]);
}

#[test]
fn bad_grows_are_refused_before_any_rendezvous() {
    let w = world(3, v(32, 3));
    let id = UniqueId([7; UniqueId::LEN]);
    for bad in [0, 2, 3] {
        let e = w[0]
            .grow(bad, &id, &CommConfig::new())
            .expect_err("a grow that does not grow");
        assert!(
            matches!(e, Error::InvalidArgument { arg: "size", .. }),
            "{bad}: {e}"
        );
    }
    // An id no root of this process made.
    let e = w[1]
        .grow(4, &id, &CommConfig::new())
        .expect_err("an unknown id");
    assert!(matches!(e, Error::InvalidArgument { arg: "id", .. }), "{e}");
    let b = backend(v(32, 3));
    let e = b
        .join_grown(&id, 4, 4, Device(0), &CommConfig::new())
        .expect_err("a rank past the size");
    assert!(
        matches!(e, Error::InvalidArgument { arg: "rank", .. }),
        "{e}"
    );
    let e = b
        .join_grown(
            &UniqueId([0; UniqueId::LEN]),
            3,
            4,
            Device(0),
            &CommConfig::new(),
        )
        .expect_err("an id nobody made");
    assert!(matches!(e, Error::InvalidArgument { arg: "id", .. }), "{e}");
    let e = b
        .join_grown(&id, 3, 4, Device(0), &CommConfig::new())
        .expect_err("an id no root of this process made");
    assert!(matches!(e, Error::InvalidArgument { arg: "id", .. }), "{e}");
}

#[test]
fn grow_suspend_and_memory_statistics_are_gated_by_the_version() {
    let w = world(2, v(28, 9));
    let e = w[0].grow_id().expect_err("grow on 2.28.9");
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: Feature::Grow,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("needs NCCL 2.29.2, loaded 2.28.9"),
        "{e}"
    );
    let e = backend(v(28, 9))
        .join_grown(
            &UniqueId([7; UniqueId::LEN]),
            2,
            3,
            Device(0),
            &CommConfig::new(),
        )
        .expect_err("join_grown on 2.28.9");
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: Feature::Grow,
                ..
            }
        ),
        "{e}"
    );
    // Suspend and statistics came in 2.29.7, after grow.
    let w = world(2, v(29, 2));
    let e = w[0].suspend(true).expect_err("suspend on 2.29.2");
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: Feature::SuspendResume,
                ..
            }
        ),
        "{e}"
    );
    let e = w[0].mem_stats().expect_err("statistics on 2.29.2");
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: Feature::MemStats,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_suspended_rank_refuses_operations_until_resumed() {
    let out = on_ranks(world(2, v(32, 3)), |c| {
        assert!(!c.mem_stats().unwrap().suspended);
        c.suspend(true).unwrap();
        assert_eq!(c.state(), CommState::Suspended);
        assert!(c.mem_stats().unwrap().suspended);
        let e = sum_i64(&c, 1).expect_err("an operation while suspended");
        assert!(
            matches!(
                e,
                Error::InvalidState {
                    state: CommState::Suspended,
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            c.suspend(false),
            Err(Error::InvalidState {
                attempted: "suspend",
                ..
            })
        ));
        c.resume().unwrap();
        assert!(matches!(
            c.resume(),
            Err(Error::InvalidState {
                attempted: "resume",
                ..
            })
        ));
        sum_i64(&c, 2).unwrap()
    });
    assert_eq!(out, vec![4, 4]);
}

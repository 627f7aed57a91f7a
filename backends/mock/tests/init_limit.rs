//! The bound on a blocking init's wait for the other ranks: the backend's init timeout, or
//! the limit given to `init_rank_within`, whichever the call uses; past it the error names the
//! ranks still missing and the rank is aborted.

use oxccl_core::{Backend, CommConfig, Device, Error, FeatureSet};
use oxccl_mock::{FaultPlan, MockBackend, DEFAULT_VERSION};
use std::time::{Duration, Instant};

/// A backend whose own init timeout is long (60 s), so only the call's limit can end a wait.
fn backend() -> MockBackend {
    MockBackend::with_options(
        FeatureSet::for_version(DEFAULT_VERSION),
        FaultPlan::new(),
        1,
        Duration::from_secs(60),
    )
}

/// Ranks 0 and 2 of 4 join with a 300 ms limit; 1 and 3 never come.
#[test]
fn a_missing_rank_ends_the_wait_at_the_calls_limit_naming_it() {
    let b = backend();
    let id = b.unique_id().unwrap();
    let limit = Duration::from_millis(300);
    let outcomes: Vec<(Error, Duration)> = std::thread::scope(|s| {
        let hs: Vec<_> = [0u32, 2]
            .into_iter()
            .map(|r| {
                let (b, id) = (b.clone(), id);
                s.spawn(move || {
                    let start = Instant::now();
                    let e = b
                        .init_rank_within(&id, r, 4, Device(r), &CommConfig::new(), limit)
                        .unwrap_err();
                    (e, start.elapsed())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (e, took) in outcomes {
        assert!(
            took >= limit && took < limit + Duration::from_secs(2),
            "waited {took:?}"
        );
        match e {
            Error::Timeout { what, after_ms } => {
                assert!(what.contains("rank(s) 1, 3 of 4"), "{what}");
                assert!(after_ms >= 300, "{after_ms}");
            }
            e => panic!("not a timeout: {e:?}"),
        }
    }
}

/// Once every waiter gave up, a late rank starts a rendezvous of its own and waits alone,
/// naming the ranks that left.
#[test]
fn a_late_rank_after_the_others_gave_up_times_out_alone() {
    let b = backend();
    let id = b.unique_id().unwrap();
    let limit = Duration::from_millis(100);
    let cfg = CommConfig::new();
    let first = b.init_rank_within(&id, 0, 2, Device(0), &cfg, limit);
    assert!(matches!(first, Err(Error::Timeout { .. })), "{first:?}");
    match b.init_rank_within(&id, 1, 2, Device(1), &cfg, limit) {
        Err(Error::Timeout { what, .. }) => assert!(what.contains("rank(s) 0 of 2"), "{what}"),
        other => panic!("{other:?}"),
    }
}

/// Within the limit, every rank joins as usual.
#[test]
fn ranks_that_all_come_within_the_limit_join() {
    let b = backend();
    let id = b.unique_id().unwrap();
    let ranks = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3u32)
            .map(|r| {
                let (b, id) = (b.clone(), id);
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(20 * u64::from(r)));
                    let c = b
                        .init_rank_within(
                            &id,
                            r,
                            3,
                            Device(r),
                            &CommConfig::new(),
                            Duration::from_secs(5),
                        )
                        .unwrap();
                    oxccl_core::Communicator::rank(&c)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(ranks, vec![0, 1, 2]);
}

/// A blocking split is bounded by the init limit too: ranks 0 and 1 of 3 split, rank 2 never
/// does; past the limit their splits fail naming rank 2, and their parent ranks are aborted
/// (a later call fails fast instead of waiting).
#[test]
fn a_blocking_split_missing_a_rank_ends_at_the_limit_naming_it() {
    let b = backend();
    let id = b.unique_id().unwrap();
    let limit = Duration::from_millis(300);
    let comms: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3u32)
            .map(|r| {
                let (b, id) = (b.clone(), id);
                s.spawn(move || {
                    b.init_rank_within(&id, r, 3, Device(r), &CommConfig::new(), limit)
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let outcomes: Vec<(Error, Duration, oxccl_core::CommState)> = std::thread::scope(|s| {
        let hs: Vec<_> = comms[..2]
            .iter()
            .enumerate()
            .map(|(r, c)| {
                s.spawn(move || {
                    let start = Instant::now();
                    // Rank 1 asks for no child: it still waits for every rank's call.
                    let color = (r == 0).then_some(7);
                    let e = oxccl_core::Communicator::split(c, color, 0, &CommConfig::new())
                        .unwrap_err();
                    (e, start.elapsed(), oxccl_core::Communicator::state(c))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (e, took, state) in outcomes {
        assert!(
            took >= limit && took < limit + Duration::from_secs(2),
            "waited {took:?}"
        );
        match e {
            Error::Timeout { what, after_ms } => {
                assert!(what.contains("waited for rank(s) 2 of 3"), "{what}");
                assert!(after_ms >= 300, "{after_ms}");
            }
            e => panic!("not a timeout: {e:?}"),
        }
        assert_eq!(state, oxccl_core::CommState::Aborted);
    }
    let again = oxccl_core::Communicator::split(&comms[0], Some(7), 0, &CommConfig::new());
    assert!(matches!(again, Err(Error::Aborted { .. })), "{again:?}");
}

//! Elastic admission and the alive rule under what careless and hostile processes do, on the
//! mock world with ranks as threads: a join as a current member, as a rank outside the world,
//! twice for one rank, with a size no world was made with; a `new` on a store whose elastic
//! world runs; a world that issues all its work through coalescing blocks and loses a rank.
//! Each refused process gets the typed error within its timeout; the members train on with
//! every sum right and their counters untouched.

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::{Error, FeatureSet, ReduceOp, Version};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn backend() -> MockBackend {
    MockBackend::with_options(
        FeatureSet::for_version(Version::new(2, 28, 9)),
        oxccl::mock::FaultPlan::new(),
        1,
        Duration::from_secs(20),
    )
}

fn opts(rank: u32, timeout: Duration) -> PgOptions {
    PgOptions {
        device: oxccl::Device(rank),
        elastic: true,
        elastic_window: Duration::from_millis(300),
        timeout,
        heartbeat: None,
        ..PgOptions::default()
    }
}

/// The world's sum of ones over a one-element buffer.
fn sum(pg: &ProcessGroup<MockBackend>) -> oxccl::Result<f32> {
    let mut b = pg.upload(&[1.0f32])?;
    pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
    Ok(pg.download(&b)?[0])
}

/// Four members step (an all-reduce every 50 ms) until `stop`; each returns its sums.
fn world(
    store: &Arc<dyn Store>,
    mock: &MockBackend,
    stop: &Arc<AtomicBool>,
    ready: &Arc<Barrier>,
) -> Vec<std::thread::JoinHandle<Vec<f32>>> {
    (0..4u32)
        .map(|r| {
            let (store, mock, stop, ready) =
                (store.clone(), mock.clone(), stop.clone(), ready.clone());
            std::thread::spawn(move || {
                let pg =
                    ProcessGroup::new(mock, store, r, 4, opts(r, Duration::from_secs(5))).unwrap();
                let mut sums = vec![sum(&pg).unwrap()];
                ready.wait();
                while !stop.load(Ordering::Acquire) {
                    sums.push(sum(&pg).unwrap());
                    assert_eq!(pg.admit().unwrap(), 0, "rank {r}: nobody is admitted");
                    std::thread::sleep(Duration::from_millis(50));
                }
                assert_eq!(pg.epoch(), 0, "rank {r}");
                sums
            })
        })
        .collect()
}

/// Join tickets taken so far: `store` the raw store, or a group's view of its namespace.
fn joiners(store: &Arc<dyn Store>) -> i64 {
    let key = "oxccl/elastic/joiners";
    let full = format!("oxccl/world/4/0/{key}");
    match store.full_key(key) == full {
        true => store.add(key, 0).unwrap(),
        false => store.add(&full, 0).unwrap(),
    }
}

/// A process joins as rank 1 (a member, alive), another as rank 4 (outside a world of 4),
/// another with size 3: each is refused with an `InvalidArgument` naming the argument,
/// within its timeout; the members never notice (no decision, no epoch, every sum 4) and no
/// ticket was taken.
#[test]
fn joins_as_a_member_outside_the_world_or_with_a_wrong_size_are_refused() {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let mock = backend();
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(5));
    let members = world(&store, &mock, &stop, &ready);
    ready.wait();

    let timeout = Duration::from_secs(2);
    let began = Instant::now();
    let e = ProcessGroup::join(mock.clone(), store.clone(), 1, 4, opts(1, timeout)).unwrap_err();
    let took = began.elapsed();
    assert!(
        matches!(&e, Error::InvalidArgument { arg: "rank", expected } if expected.contains("rank 1 is one of its members [0, 1, 2, 3] at epoch 0")),
        "{e}"
    );
    assert!(took < timeout + Duration::from_secs(2), "{took:?}");

    let began = Instant::now();
    let e = ProcessGroup::join(mock.clone(), store.clone(), 4, 4, opts(4, timeout)).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg: "rank", expected } if expected.contains("below its size 4, got 4")),
        "{e}"
    );
    assert!(began.elapsed() < Duration::from_secs(1));

    let e = ProcessGroup::join(mock.clone(), store.clone(), 2, 3, opts(2, timeout)).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg: "size", .. }),
        "{e}"
    );

    assert_eq!(joiners(&store), 0, "a refused join took a ticket");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Release);
    for (r, m) in members.into_iter().enumerate() {
        let sums = m.join().unwrap();
        assert!(sums.len() > 3, "rank {r} stepped");
        assert!(sums.iter().all(|s| *s == 4.0), "rank {r}: {sums:?}");
    }
}

/// A restarted rank calls `ProcessGroup::new` on the store of a running elastic world: it is
/// refused (saying to join), the world's incarnation counter stays at 4, and the members go
/// on at epoch 0.
#[test]
fn a_new_on_a_running_elastic_world_is_refused_and_counts_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let mock = backend();
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(5));
    let members = world(&store, &mock, &stop, &ready);
    ready.wait();
    let began = Instant::now();
    for elastic in [true, false] {
        let o = PgOptions {
            elastic,
            ..opts(2, Duration::from_secs(2))
        };
        let e = ProcessGroup::new(mock.clone(), store.clone(), 2, 4, o).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { arg: "store", expected } if expected.contains("rank 2 rejoins it with `ProcessGroup::join`")),
            "{e}"
        );
    }
    assert!(began.elapsed() < Duration::from_secs(5));
    assert_eq!(store.add("oxccl/world/4/incarnations", 0).unwrap(), 4);
    stop.store(true, Ordering::Release);
    for m in members {
        assert!(m.join().unwrap().iter().all(|s| *s == 4.0));
    }
    // Once the world is gone (its beat stopped), a new world of 4 may form on the store.
    let again: Vec<_> = (0..4u32)
        .map(|r| {
            let (store, mock) = (store.clone(), mock.clone());
            std::thread::spawn(move || {
                let pg =
                    ProcessGroup::new(mock, store, r, 4, opts(r, Duration::from_secs(5))).unwrap();
                sum(&pg).unwrap()
            })
        })
        .collect();
    for t in again {
        assert_eq!(t.join().unwrap(), 4.0);
    }
    assert_eq!(store.add("oxccl/world/4/incarnations", 0).unwrap(), 8);
}

/// A survivor's thread: how many it admitted, its group's size, its slowest admission.
type Survivor = std::thread::JoinHandle<Option<(u32, u32, Duration)>>;

/// The threads of a world that lost a rank, and its gates.
struct Refill {
    /// Passed by the 4 members and the watchers once the world is made.
    ready: Arc<Barrier>,
    /// Passed by the 3 survivors once they train at three again, and by the test once the
    /// join tickets it waits for are taken: from there the survivors admit at every step
    /// (all of them at the same steps, as admission asks), so one admission judges them all.
    admit_from: Arc<Barrier>,
    survivors: Vec<Survivor>,
}

/// Four members step once; then rank `lost` dies and the others step (a sum every 50 ms)
/// until the world is four again, admitting at every step past the `admit_from` gate. Each
/// survivor returns how many it admitted, its group's size and its slowest admission.
fn lose_and_refill(
    store: &Arc<dyn Store>,
    mock: &MockBackend,
    lost: u32,
    watchers: usize,
) -> Refill {
    let ready = Arc::new(Barrier::new(4 + watchers));
    let admit_from = Arc::new(Barrier::new(4));
    let timeout = Duration::from_secs(6);
    let survivors = (0..4u32)
        .map(|r| {
            let (store, mock, ready, gate) = (
                store.clone(),
                mock.clone(),
                ready.clone(),
                admit_from.clone(),
            );
            std::thread::spawn(move || {
                let pg = ProcessGroup::new(mock, store, r, 4, opts(r, timeout)).unwrap();
                assert_eq!(sum(&pg).unwrap(), 4.0);
                ready.wait();
                if r == lost {
                    pg.abort("killed");
                    return None;
                }
                let began = Instant::now();
                // Training at three again.
                loop {
                    match sum(&pg) {
                        Ok(s) => break assert_eq!(s, 3.0, "rank {r}"),
                        Err(Error::MembersLost { .. }) => {}
                        Err(e) => panic!("rank {r}: {e}"),
                    }
                }
                gate.wait();
                let (mut admitted, mut slowest) = (0, Duration::ZERO);
                while began.elapsed() < Duration::from_secs(15) {
                    let t = Instant::now();
                    admitted += pg.admit().unwrap();
                    slowest = slowest.max(t.elapsed());
                    match sum(&pg) {
                        Ok(4.0) => break,
                        Ok(s) => assert_eq!(s, 3.0, "rank {r}"),
                        Err(e) => panic!("rank {r}: {e}"),
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Some((admitted, pg.size(), slowest))
            })
        })
        .collect();
    Refill {
        ready,
        admit_from,
        survivors,
    }
}

/// Waits (up to 10 s) until `n` join tickets are taken on `store`.
fn await_tickets(store: &Arc<dyn Store>, n: i64) {
    let began = Instant::now();
    while joiners(store) < n {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{n} tickets never taken"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Rank 2 dies; two processes both ask to replace it while the survivors train: exactly one
/// is admitted, the other gets an `InvalidArgument` naming `rank`; the world trains on at
/// four.
#[test]
fn two_joins_for_one_rank_admit_one_and_refuse_the_other() {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let mock = backend();
    let timeout = Duration::from_secs(6);
    let Refill {
        ready,
        admit_from,
        survivors,
    } = lose_and_refill(&store, &mock, 2, 2);
    let joiners: Vec<_> = (0..2)
        .map(|_| {
            let (store, mock, ready) = (store.clone(), mock.clone(), ready.clone());
            std::thread::spawn(move || {
                ready.wait();
                std::thread::sleep(Duration::from_millis(100));
                let began = Instant::now();
                // The refusal comes from `join` itself: a process told it joined when it did
                // not would fail only later, in the members' way.
                let got = match ProcessGroup::join(mock, store, 2, 4, opts(2, timeout)) {
                    Ok(pg) => Ok(sum(&pg).map(|s| (s, pg.rank()))),
                    Err(e) => Err(e),
                };
                (got, began.elapsed())
            })
        })
        .collect();
    await_tickets(&store, 2);
    admit_from.wait();
    let outcomes: Vec<_> = joiners.into_iter().map(|j| j.join().unwrap()).collect();
    let ok: Vec<_> = outcomes.iter().filter(|(o, _)| o.is_ok()).collect();
    assert_eq!(ok.len(), 1, "{outcomes:?}");
    assert_eq!(ok[0].0.as_ref().unwrap().as_ref().unwrap(), &(4.0, Some(3)));
    for (o, took) in &outcomes {
        if let Err(e) = o {
            assert!(
                matches!(e, Error::InvalidArgument { arg: "rank", .. }),
                "{e}"
            );
            assert!(*took < timeout + Duration::from_secs(2), "{took:?}");
        }
    }
    for (r, s) in survivors.into_iter().enumerate() {
        if let Some((admitted, size, _)) = s.join().unwrap() {
            assert_eq!((admitted, size), (1, 4), "rank {r}");
        }
    }
}

/// Every member issues its collectives only through coalescing blocks; the group was made
/// longer ago than its timeout. Rank 3 is lost while rank 2 is between blocks (its last one
/// 0.6 s before, well within the timeout): rank 2's monitor joins the others' decision, and
/// the three go on at epoch 1 with sums of 3.
#[test]
fn ranks_that_issue_only_coalesced_blocks_stay_in() {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let mock = backend();
    let barrier = Arc::new(Barrier::new(4));
    let timeout = Duration::from_millis(1500);
    let block_sum = |pg: &ProcessGroup<MockBackend>| -> oxccl::Result<f32> {
        let mut a = pg.upload(&[1.0f32])?;
        let mut b = pg.upload(&[1.0f32])?;
        let mut block = pg.start_coalescing()?;
        block.all_reduce(&mut a, ReduceOp::Sum)?;
        block.all_reduce(&mut b, ReduceOp::Sum)?;
        block.end()?.wait()?;
        Ok(pg.download(&a)?[0] + pg.download(&b)?[0])
    };
    let threads: Vec<_> = (0..4u32)
        .map(|r| {
            let (store, mock, barrier) = (store.clone(), mock.clone(), barrier.clone());
            std::thread::spawn(move || {
                let pg = ProcessGroup::new(mock, store, r, 4, opts(r, timeout)).unwrap();
                // Older than the timeout before any work.
                std::thread::sleep(timeout + Duration::from_millis(500));
                assert_eq!(block_sum(&pg).unwrap(), 8.0);
                barrier.wait();
                match r {
                    3 => {
                        pg.abort("rank 3 killed");
                        return None;
                    }
                    // Between blocks while the others find the loss and decide.
                    2 => std::thread::sleep(Duration::from_millis(600)),
                    _ => {}
                }
                let mut seen = Vec::new();
                for _ in 0..40 {
                    match block_sum(&pg) {
                        Ok(s) => seen.push(s),
                        Err(Error::MembersLost { .. }) => seen.push(-1.0),
                        Err(e) => panic!("rank {r} was put out: {e}"),
                    }
                    if seen.ends_with(&[6.0, 6.0]) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Some((seen, pg.epoch(), pg.size()))
            })
        })
        .collect();
    for (r, t) in threads.into_iter().enumerate() {
        if let Some((seen, epoch, size)) = t.join().unwrap() {
            assert!(seen.ends_with(&[6.0, 6.0]), "rank {r}: {seen:?}");
            assert_eq!((epoch, size), (1, 3), "rank {r}");
        }
    }
}

/// A joiner killed between taking its ticket and writing its rank: the members' admission
/// voids the ticket at once (never waits for it) and admits the replacement behind it.
#[test]
fn a_joiner_killed_after_taking_its_ticket_holds_up_nobody() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let mock = backend();
    let Refill {
        ready,
        admit_from,
        survivors,
    } = lose_and_refill(&store, &mock, 1, 1);
    ready.wait();
    // The dead joiner: a ticket taken, no rank written.
    assert_eq!(joiners(&store), 0);
    store
        .add("oxccl/world/4/0/oxccl/elastic/joiners", 1)
        .unwrap();
    let joiner = {
        let store = store.clone();
        std::thread::spawn(move || {
            let pg = ProcessGroup::join(mock, store, 1, 4, opts(1, Duration::from_secs(6)))?;
            sum(&pg)
        })
    };
    await_tickets(&store, 2);
    admit_from.wait();
    assert_eq!(joiner.join().unwrap().unwrap(), 4.0);
    for (r, m) in survivors.into_iter().enumerate() {
        if let Some((admitted, size, slowest)) = m.join().unwrap() {
            assert_eq!((admitted, size), (1, 4), "rank {r}");
            assert!(
                slowest < Duration::from_secs(2),
                "rank {r}: an admission took {slowest:?}"
            );
        }
    }
}

/// A replacement that gives up (its timeout passes before the members admit anyone)
/// withdraws its ticket: the members' later admission takes nobody in, and they train on at
/// three without waiting at an init for a rank that will never come.
#[test]
fn a_joiner_that_gave_up_is_not_admitted_later() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let mock = backend();
    let ready = Arc::new(Barrier::new(5));
    let gave_up = Arc::new(AtomicBool::new(false));
    let members: Vec<_> = (0..4u32)
        .map(|r| {
            let (store, mock, ready, gave_up) =
                (store.clone(), mock.clone(), ready.clone(), gave_up.clone());
            std::thread::spawn(move || {
                let pg =
                    ProcessGroup::new(mock, store, r, 4, opts(r, Duration::from_secs(5))).unwrap();
                assert_eq!(sum(&pg).unwrap(), 4.0);
                ready.wait();
                if r == 3 {
                    pg.abort("killed");
                    return None;
                }
                let (mut sums, mut admitted, mut after) = (Vec::new(), None, 0);
                let began = Instant::now();
                // Steps on until four steps after the admission.
                while after < 4 && began.elapsed() < Duration::from_secs(15) {
                    match sum(&pg) {
                        Ok(s) => sums.push(s),
                        Err(Error::MembersLost { .. }) => {}
                        Err(e) => panic!("rank {r}: {e}"),
                    }
                    if admitted.is_some() {
                        after += 1;
                    } else if gave_up.load(Ordering::Acquire) {
                        admitted = Some(pg.admit().unwrap());
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Some((admitted, sums))
            })
        })
        .collect();
    ready.wait();
    let began = Instant::now();
    let e = ProcessGroup::join(
        mock,
        store.clone(),
        3,
        4,
        opts(3, Duration::from_millis(1500)),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "{:?}",
        began.elapsed()
    );
    gave_up.store(true, Ordering::Release);
    for (r, m) in members.into_iter().enumerate() {
        if let Some((admitted, sums)) = m.join().unwrap() {
            assert_eq!(admitted, Some(0), "rank {r}");
            assert!(sums.ends_with(&[3.0; 4]), "rank {r}: {sums:?}");
        }
    }
}

/// Every member's collective waits for a silent rank until the timeout; one member is slow to
/// wait on its work, so the others' decision begins before its own wait fails, a little more
/// than the timeout after its last work began. Its monitor joins the decision (the rank was
/// at work: blocked in that very collective), and the three go on at epoch 1.
#[test]
fn a_rank_blocked_in_the_collective_that_showed_the_loss_stays_in() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let mock = backend();
    let barrier = Arc::new(Barrier::new(4));
    let timeout = Duration::from_millis(1000);
    let threads: Vec<_> = (0..4u32)
        .map(|r| {
            let (store, mock, barrier) = (store.clone(), mock.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut o = opts(r, timeout);
                // Silent: not elastic, so no monitor speaks for it.
                o.elastic = r != 2;
                let pg = ProcessGroup::new(mock, store, r, 4, o).unwrap();
                assert_eq!(sum(&pg).unwrap(), 4.0);
                barrier.wait();
                if r == 2 {
                    std::thread::sleep(Duration::from_secs(4));
                    pg.abort("done being silent");
                    return None;
                }
                let mut b = pg.upload(&[1.0f32]).unwrap();
                let work = pg.all_reduce(&mut b, ReduceOp::Sum).unwrap();
                if r == 3 {
                    // The others' waits fail at the timeout and begin the decision meanwhile.
                    std::thread::sleep(timeout + Duration::from_millis(150));
                }
                let failed = work.wait().expect_err("a step with a silent rank");
                Some((failed, sum(&pg), pg.size()))
            })
        })
        .collect();
    for (r, t) in threads.into_iter().enumerate() {
        let Some((failed, after, size)) = t.join().unwrap() else {
            continue;
        };
        assert!(
            matches!(&failed, Error::MembersLost { epoch: 1, .. }),
            "rank {r}: {failed}"
        );
        assert_eq!((after.unwrap(), size), (3.0, 3), "rank {r}");
    }
}

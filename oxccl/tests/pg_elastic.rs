//! The elastic process group on the mock world, ranks as threads: a rank dies mid-training,
//! the survivors' work in flight fails with `MembersLost` naming it and the new epoch, the
//! next operations run on the smaller group (renumbered, subgroups shrunk where they held the
//! rank, untouched where they did not), on libraries with revoke and shrink, with shrink
//! alone, and with neither (a new communicator through the store).

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::{Error, FeatureSet, ReduceOp, Version};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn backend(version: Version) -> MockBackend {
    MockBackend::with_options(
        FeatureSet::for_version(version),
        oxccl::mock::FaultPlan::new(),
        1,
        Duration::from_secs(20),
    )
}

fn opts(rank: u32) -> PgOptions {
    PgOptions {
        device: oxccl::Device(rank),
        elastic: true,
        elastic_window: Duration::from_millis(300),
        timeout: Duration::from_secs(10),
        heartbeat: None,
        ..PgOptions::default()
    }
}

/// What a survivor saw: the error of the step in flight, then (size, rank) of the world and
/// the sums of the world and both subgroups afterwards, and how long the recovery took.
#[derive(Debug)]
struct Seen {
    failed: Error,
    world: (u32, Option<u32>),
    sums: (f32, f32, f32),
    took: Duration,
}

/// 4 ranks; subgroups {1, 2, 3} and {0, 1}; rank 2 aborts its communicators and leaves after
/// the first step.
fn run(version: Version) -> Vec<Option<Seen>> {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let barrier = Arc::new(Barrier::new(4));
    // One backend for every rank: its ids meet in one lobby.
    let mock = backend(version);
    let threads: Vec<_> = (0..4u32)
        .map(|r| {
            let (store, barrier, mock) = (store.clone(), barrier.clone(), mock.clone());
            std::thread::spawn(move || {
                let pg = ProcessGroup::new(mock, store, r, 4, opts(r)).unwrap();
                let odd = pg.new_group(&[1, 2, 3], None).unwrap();
                let low = pg.new_group(&[0, 1], None).unwrap();
                let mut b = pg.upload(&[1.0f32; 4]).unwrap();
                pg.all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .unwrap();
                assert_eq!(pg.download(&b).unwrap(), vec![4.0; 4]);
                barrier.wait();
                if r == 2 {
                    // Dies: its communicators abort (peers get remote errors) and it leaves.
                    pg.abort("rank 2 killed");
                    odd.abort("rank 2 killed");
                    return None;
                }
                let began = Instant::now();
                let mut b = pg.upload(&[1.0f32; 4]).unwrap();
                let failed = pg
                    .all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .expect_err("the step in flight when rank 2 died");
                let took = began.elapsed();
                let sum = |g: &ProcessGroup<MockBackend>| {
                    let mut b = g.upload(&[1.0f32]).unwrap();
                    g.all_reduce(&mut b, ReduceOp::Sum).unwrap().wait().unwrap();
                    g.download(&b).unwrap()[0]
                };
                let world_sum = sum(&pg);
                let odd_sum = if r == 0 { 0.0 } else { sum(&odd) };
                let low_sum = if r <= 1 { sum(&low) } else { 0.0 };
                Some(Seen {
                    failed,
                    world: (pg.size(), pg.rank()),
                    sums: (world_sum, odd_sum, low_sum),
                    took,
                })
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn check(version: Version) {
    let seen = run(version);
    assert!(seen[2].is_none());
    for (r, s) in seen.iter().enumerate().filter(|(r, _)| *r != 2) {
        let s = s.as_ref().unwrap();
        match &s.failed {
            Error::MembersLost { lost, epoch, .. } => {
                assert_eq!(lost.kept(), &[2], "{version} rank {r}");
                assert_eq!(*epoch, 1, "{version} rank {r}");
            }
            e => panic!("{version} rank {r}: {e}"),
        }
        // Renumbered: global 3 is group rank 2 of 3.
        let want_rank = if r == 3 { 2 } else { r as u32 };
        assert_eq!(s.world, (3, Some(want_rank)), "{version} rank {r}");
        assert_eq!(s.sums.0, 3.0, "{version} rank {r}: world");
        if r != 0 {
            assert_eq!(s.sums.1, 2.0, "{version} rank {r}: {{1, 3}}");
        }
        if r <= 1 {
            assert_eq!(s.sums.2, 2.0, "{version} rank {r}: {{0, 1}}");
        }
        // The window (300 ms) and the shrink, far within the group's timeout.
        assert!(
            s.took < Duration::from_secs(5),
            "{version} rank {r}: {:?}",
            s.took
        );
    }
}

#[test]
fn survivors_go_on_with_revoke_and_shrink() {
    check(Version::new(2, 28, 9));
}

#[test]
fn survivors_go_on_with_shrink_alone() {
    check(Version::new(2, 28, 3));
}

#[test]
fn survivors_go_on_through_the_store_without_shrink() {
    check(Version::new(2, 26, 6));
}

/// Rank 2 dies; the three survivors go on; a replacement process joins as rank 2 while they
/// train, is admitted at a step boundary, gets the weights by broadcast, and all four train
/// on with equal weights.
#[test]
fn a_replacement_joins_through_the_store_and_gets_the_weights_by_broadcast() {
    replacement_joins(Version::new(2, 28, 9));
}

/// The same with a library that grows (2.29+): the members grow their communicator and the
/// replacement joins the grow, numbered after them.
#[test]
fn a_replacement_joins_by_a_grow_and_gets_the_weights_by_broadcast() {
    replacement_joins(Version::new(2, 32, 3));
}

fn replacement_joins(version: Version) {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let mock = backend(version);
    let barrier = Arc::new(Barrier::new(4));
    let joined = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..4u32)
        .map(|r| {
            let (store, barrier, mock) = (store.clone(), barrier.clone(), mock.clone());
            let joined = joined.clone();
            std::thread::spawn(move || {
                let pg = ProcessGroup::new(mock.clone(), store.clone(), r, 4, opts(r)).unwrap();
                // Weights: every rank starts from rank 0's.
                let mut w = pg.upload(&[r as f32 * 100.0; 2]).unwrap();
                pg.broadcast(&mut w, 0).unwrap().wait().unwrap();
                barrier.wait();
                if r == 2 {
                    pg.abort("rank 2 killed");
                    drop(pg);
                    // The replacement: a new process in the test's eyes (a new group).
                    std::thread::sleep(Duration::from_millis(200));
                    // Its flight recorder dumps where its options say, as a starting rank's.
                    let trace_dir = std::env::temp_dir().join(format!(
                        "oxccl-joiner-dump-{version}-{}",
                        std::process::id()
                    ));
                    let _ = std::fs::remove_dir_all(&trace_dir);
                    std::fs::create_dir_all(&trace_dir).unwrap();
                    let o = PgOptions {
                        trace_dir: Some(trace_dir.clone()),
                        ..opts(2)
                    };
                    let pg = ProcessGroup::join(mock, store, 2, 4, o).unwrap();
                    joined.store(true, std::sync::atomic::Ordering::Release);
                    assert_eq!(pg.size(), 4);
                    // After the three that stayed, in their order.
                    assert_eq!(pg.ranks(), &[0, 1, 3, 2]);
                    assert_eq!(pg.rank(), Some(3));
                    let mut w = pg.upload(&[-1.0f32; 2]).unwrap();
                    pg.broadcast(&mut w, 0).unwrap().wait().unwrap();
                    let mut g = pg.upload(&[1.0f32; 2]).unwrap();
                    pg.all_reduce(&mut g, ReduceOp::Sum)
                        .unwrap()
                        .wait()
                        .unwrap();
                    oxccl::watchdog::Watchdog::global().dump("the test asks");
                    let dump = trace_dir.join("rank_2.json");
                    let text = std::fs::read_to_string(&dump)
                        .unwrap_or_else(|e| panic!("the joiner's dump {}: {e}", dump.display()));
                    assert!(
                        text.contains("all_reduce") && text.contains("broadcast"),
                        "the joiner's operations are in its dump: {text}"
                    );
                    let _ = std::fs::remove_dir_all(&trace_dir);
                    return (
                        pg.download(&w).unwrap(),
                        pg.download(&g).unwrap(),
                        pg.epoch(),
                    );
                }
                // Steps: a sum of ones each, the weights moved by it; a loss costs the step.
                let mut admitted = 0;
                for step in 0..200 {
                    let mut g = pg.upload(&[1.0f32; 2]).unwrap();
                    match pg.all_reduce(&mut g, ReduceOp::Sum).unwrap().wait() {
                        Ok(()) => {}
                        Err(Error::MembersLost { .. }) => continue,
                        Err(e) => panic!("rank {r} step {step}: {e}"),
                    }
                    admitted += pg.admit().unwrap();
                    if admitted > 0 {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                assert_eq!(admitted, 1, "rank {r}");
                assert_eq!(pg.size(), 4);
                pg.broadcast(&mut w, 0).unwrap().wait().unwrap();
                let mut g = pg.upload(&[1.0f32; 2]).unwrap();
                pg.all_reduce(&mut g, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .unwrap();
                (
                    pg.download(&w).unwrap(),
                    pg.download(&g).unwrap(),
                    pg.epoch(),
                )
            })
        })
        .collect();
    let got: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(joined.load(std::sync::atomic::Ordering::Acquire));
    for (r, (w, g, epoch)) in got.iter().enumerate() {
        assert_eq!(w, &vec![0.0f32; 2], "rank {r}: rank 0's weights");
        assert_eq!(g, &vec![4.0f32; 2], "rank {r}: four ranks again");
        assert_eq!(*epoch, 2, "rank {r}: one loss, one admission");
    }
}

/// A rank that stops answering (alive, its communicator open, its process gone quiet: no
/// monitor either) is seen through the group's timeout; the survivors decide without it.
/// A decision in which every member arrives loses nobody, and the group goes on whole on a
/// new communicator.
#[test]
fn a_silent_rank_is_left_out_after_the_timeout() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let mock = backend(Version::new(2, 28, 9));
    let barrier = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4u32)
        .map(|r| {
            let (store, barrier, mock) = (store.clone(), barrier.clone(), mock.clone());
            std::thread::spawn(move || {
                let mut o = opts(r);
                o.timeout = Duration::from_millis(1500);
                if r == 2 {
                    // Not elastic: no monitor speaks for it while it is silent.
                    o.elastic = false;
                }
                let pg = ProcessGroup::new(mock, store, r, 4, o).unwrap();
                let mut b = pg.upload(&[1.0f32]).unwrap();
                pg.all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .unwrap();
                barrier.wait();
                if r == 2 {
                    std::thread::sleep(Duration::from_secs(4));
                    pg.abort("done being silent");
                    return None;
                }
                let began = Instant::now();
                let e = pg
                    .all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .expect_err("a step with a silent rank");
                let took = began.elapsed();
                let mut b = pg.upload(&[1.0f32]).unwrap();
                pg.all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .unwrap();
                Some((e, took, pg.download(&b).unwrap()[0], pg.size()))
            })
        })
        .collect();
    let got: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (r, g) in got.iter().enumerate().filter(|(r, _)| *r != 2) {
        let (e, took, sum, size) = g.as_ref().unwrap();
        match e {
            Error::MembersLost {
                lost,
                epoch: 1,
                cause,
            } => {
                assert_eq!(lost.kept(), &[2], "rank {r}");
                assert!(cause.contains("timed out"), "rank {r}: {cause}");
            }
            e => panic!("rank {r}: {e}"),
        }
        // The timeout, the window, then the decision.
        assert!(
            *took >= Duration::from_millis(1500) && *took < Duration::from_millis(4000),
            "rank {r}: {took:?}"
        );
        assert_eq!((*sum, *size), (3.0, 3), "rank {r}");
    }
}

/// The monitors of an elastic group over a TCP store look for a begun decision without
/// querying the server: 4 idle ranks for a second (20 looks each) add no query (asking the
/// server at each look would cost it 80); what the server sees is the world's beat alone, two
/// members adding every 250 ms whatever the world's size. That a look still sees a decision
/// begun elsewhere is what the elastic example over its TCP store shows
/// (`tests/elastic_step.rs`).
#[test]
fn idle_monitors_cost_a_tcp_store_no_queries() {
    use oxccl::store::{TcpServer, TcpStore, TcpStoreOptions};
    let server = TcpServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    // The query count once it stops moving (queries sent are applied shortly after), or
    // after two seconds of movement.
    let settled = || {
        let mut last = server.stats().queries;
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(100));
            let now = server.stats().queries;
            if now == last {
                break;
            }
            last = now;
        }
        last
    };
    // What one beat costs the server at most, in queries: the add, and, when the add took
    // the connection a monitor had parked on its key, the monitor's ask and park again.
    let add_cost = 3;
    let mock = backend(Version::new(2, 28, 9));
    let ready = Arc::new(Barrier::new(5));
    let done = Arc::new(Barrier::new(5));
    let threads: Vec<_> = (0..4u32)
        .map(|r| {
            let (mock, ready, done) = (mock.clone(), ready.clone(), done.clone());
            std::thread::spawn(move || {
                let o = TcpStoreOptions {
                    timeout: Duration::from_secs(10),
                    ..TcpStoreOptions::client("127.0.0.1", port)
                };
                let store: Arc<dyn Store> = Arc::new(TcpStore::new(o).unwrap());
                let pg = ProcessGroup::new(mock, store, r, 4, opts(r)).unwrap();
                let mut b = pg.upload(&[1.0f32; 4]).unwrap();
                pg.all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .unwrap();
                ready.wait();
                done.wait();
                pg.destroy();
            })
        })
        .collect();
    ready.wait();
    // Every monitor has looked at least once by now.
    std::thread::sleep(Duration::from_millis(200));
    let before = settled();
    let began = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let after = settled();
    let took = began.elapsed();
    done.wait();
    for t in threads {
        t.join().unwrap();
    }
    // The beat's share: two beaters, four beats a second each, one more each at either edge.
    let beats = ((took.as_secs_f64() * 8.0).ceil() as u64 + 4) * add_cost;
    assert!(
        after - before <= beats,
        "4 idle monitors queried the store {} times in {took:?} (the beat alone: at most {beats})",
        after - before
    );
}

/// `n` ranks of one elastic world as threads on a mock of `version`, each with the options
/// `opts_of(rank)`: each makes its group, all-reduces once, waits for the others, then runs
/// `body`; what the bodies return, by rank.
fn elastic_world<T: Send + 'static>(
    n: u32,
    version: Version,
    opts_of: fn(u32) -> PgOptions,
    body: fn(u32, ProcessGroup<MockBackend>) -> T,
) -> Vec<T> {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let barrier = Arc::new(Barrier::new(n as usize));
    let mock = backend(version);
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let (store, barrier, mock) = (store.clone(), barrier.clone(), mock.clone());
            std::thread::spawn(move || {
                let pg = ProcessGroup::new(mock, store, r, n, opts_of(r)).unwrap();
                sum_of_ones(&pg).unwrap();
                barrier.wait();
                body(r, pg)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// An all-reduce of ones: the sum, or how it failed.
fn sum_of_ones(pg: &ProcessGroup<MockBackend>) -> oxccl::Result<f32> {
    let mut b = pg.upload(&[1.0f32; 4])?;
    pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
    Ok(pg.download(&b)?[0])
}

/// A rank that issues while the survivors' decision (begun by another member, joined by its
/// monitor) has stopped its communicator gets `MembersLost` like a failed wait, not the
/// stopped communicator's refusal; its next operation runs on the smaller group. On a library
/// without revoke (the decision aborts) and with it (it revokes).
#[test]
fn an_operation_issued_during_the_decision_reports_members_lost() {
    for version in [Version::new(2, 28, 3), Version::new(2, 28, 9)] {
        let seen = elastic_world(3, version, opts, |r, pg| {
            if r == 2 {
                pg.abort("rank 2 killed");
                return None;
            }
            if r == 1 {
                // Rank 0 begins the decision; this rank's monitor joins it (stopping the
                // communicator) while this rank computes.
                std::thread::sleep(Duration::from_millis(150));
            }
            let step = sum_of_ones(&pg);
            let sum = sum_of_ones(&pg).unwrap();
            Some((step, sum, pg.size()))
        });
        for (r, s) in seen.into_iter().enumerate() {
            let Some((step, sum, size)) = s else {
                continue;
            };
            assert!(
                matches!(&step, Err(Error::MembersLost { lost, epoch: 1, .. }) if lost.to_string() == "2"),
                "{version}, rank {r}: {step:?}"
            );
            assert_eq!((sum, size), (2.0, 2), "{version}, rank {r}");
        }
    }
}

/// A rank hung in its own code (it issues nothing for longer than the group's timeout) while
/// its process still answers is left out of a decision other members began, as a dead rank
/// is: its monitor stays out, the survivors go on without it, and its next operation is
/// refused instead of joining late.
#[test]
fn a_rank_idle_past_the_timeout_stays_out_of_the_decision() {
    let short = |r| PgOptions {
        timeout: Duration::from_millis(800),
        ..opts(r)
    };
    let seen = elastic_world(3, Version::new(2, 28, 9), short, |r, pg| match r {
        2 => {
            std::thread::sleep(Duration::from_millis(1200));
            pg.abort("rank 2 killed");
            None
        }
        1 => {
            // Hung in its own code past the timeout; wakes after the decision.
            std::thread::sleep(Duration::from_millis(2500));
            Some(match sum_of_ones(&pg) {
                Err(Error::Aborted { reason }) => format!("aborted: {reason}"),
                other => format!("unexpected: {other:?}"),
            })
        }
        _ => {
            std::thread::sleep(Duration::from_millis(1300));
            let step = match sum_of_ones(&pg) {
                Err(Error::MembersLost { lost, epoch, .. }) => format!("lost {lost} epoch {epoch}"),
                other => format!("unexpected: {other:?}"),
            };
            let sum = sum_of_ones(&pg).unwrap();
            Some(format!("{step}; sum {sum} size {}", pg.size()))
        }
    });
    let r0 = seen[0].as_deref().unwrap();
    assert_eq!(r0, "lost 1, 2 epoch 1; sum 1 size 1");
    let r1 = seen[1].as_deref().unwrap();
    assert!(
        r1.starts_with("aborted: ") && r1.contains("stayed out of the survivors' decision"),
        "{r1}"
    );
}

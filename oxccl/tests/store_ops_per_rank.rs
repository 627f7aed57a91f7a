//! The control plane's cost per rank: how many store calls one rank makes to make its
//! default group (with its communicator and the agreement on its tune table), a subgroup (as a member and as a non-member), a
//! barrier, and while its watchdog idles, in worlds of 2 to 16 ranks on one TCP store server
//! (the mock world, ranks as threads of this process, each with a client of its own as a
//! process would have). The counts must not grow with the world: at 100,000 ranks every call
//! of every rank lands on the one server.

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup, RegMode, TuneTable};
use oxccl::rules::env::ErrorHandling;
use oxccl::store::{Store, TcpServer, TcpStore, TcpStoreOptions};
use oxccl::{Device, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A store that counts the calls made through it.
struct Counting {
    inner: TcpStore,
    calls: AtomicU64,
}

impl Counting {
    fn tick(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Store for Counting {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.tick();
        self.inner.set(key, value)
    }
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.tick();
        self.inner.get(key, timeout)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.tick();
        self.inner.add(key, delta)
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.tick();
        self.inner.wait(keys, timeout)
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        self.tick();
        self.inner.check(keys)
    }
    fn check_watched(&self, key: &str) -> Result<bool> {
        self.tick();
        self.inner.check_watched(key)
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.tick();
        self.inner.compare_set(key, expected, desired)
    }
    fn delete(&self, key: &str) -> Result<bool> {
        self.tick();
        self.inner.delete(key)
    }
    fn num_keys(&self) -> Result<u64> {
        self.tick();
        self.inner.num_keys()
    }
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
}

fn opts(rank: u32) -> PgOptions {
    PgOptions {
        timeout: Duration::from_secs(20),
        device: Device(rank),
        // The communicator is made by `new` (and subgroups split at once).
        bound_device: Some(Device(rank)),
        error_handling: ErrorHandling::NoHandling,
        // Every communicator made is agreed on through the store too.
        tune: Some(Arc::new(TuneTable::uniform(RegMode::Registered))),
        ..PgOptions::default()
    }
}

/// A rank's store calls in each phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct PerRank {
    init: u64,
    new_group: u64,
    barrier: u64,
}

/// Runs a world of `n` ranks on one server; each rank's calls per phase, and the server's
/// queries per rank over all phases.
fn world(n: u32) -> (Vec<PerRank>, u64) {
    let server = TcpServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    let backend = MockBackend::new();
    let ranks: Vec<_> = (0..n)
        .map(|r| {
            let b = backend.clone();
            std::thread::spawn(move || -> Result<PerRank> {
                let o = TcpStoreOptions {
                    timeout: Duration::from_secs(20),
                    ..TcpStoreOptions::client("127.0.0.1", port)
                };
                let store = Arc::new(Counting {
                    inner: TcpStore::new(o)?,
                    calls: AtomicU64::new(0),
                });
                let mut seen = PerRank::default();
                let pg = ProcessGroup::new(b, store.clone(), r, n, opts(r))?;
                seen.init = store.calls();
                // Even ranks are members; the split takes every rank of the parent.
                let evens: Vec<u32> = (0..n).step_by(2).collect();
                let sub = pg.new_group(&evens, None)?;
                seen.new_group = store.calls() - seen.init;
                let before = store.calls();
                pg.barrier()?.wait()?;
                if r % 2 == 0 {
                    sub.barrier()?.wait()?;
                }
                seen.barrier = store.calls() - before;
                Ok(seen)
            })
        })
        .collect();
    let seen: Vec<PerRank> = ranks
        .into_iter()
        .map(|h| h.join().unwrap().expect("a rank failed"))
        .collect();
    let queries = server.stats().queries;
    (seen, queries / u64::from(n))
}

/// The most store calls one rank makes to make its default group (one of them the look for
/// an elastic world running on the store), and a subgroup: a few more for the rank that
/// arrives last (it says all came) or differs, never more with more ranks (a rank reading
/// every other rank's key makes 15 more at 16 ranks).
const MOST_PER_PHASE: u64 = 13;

#[test]
fn a_rank_makes_no_more_store_calls_in_a_world_of_16_than_in_a_world_of_2() {
    for n in [2u32, 4, 8, 16] {
        let (seen, queries_per_rank) = world(n);
        let most = PerRank {
            init: seen.iter().map(|s| s.init).max().unwrap(),
            new_group: seen.iter().map(|s| s.new_group).max().unwrap(),
            barrier: seen.iter().map(|s| s.barrier).max().unwrap(),
        };
        // Even ranks are the subgroup's members, odd ones take part in its split only.
        let in_group = |member: bool| {
            seen.iter()
                .enumerate()
                .filter(|(r, _)| (r % 2 == 0) == member)
                .map(|(_, s)| s.new_group)
                .max()
                .unwrap_or(0)
        };
        println!(
            "{n} ranks: most calls of one rank {most:?} (new_group: member {}, non-member {}); \
             server queries per rank {queries_per_rank}",
            in_group(true),
            in_group(false)
        );
        assert_eq!(most.barrier, 0, "a barrier is a collective: no store call");
        assert!(
            most.init <= MOST_PER_PHASE && most.new_group <= MOST_PER_PHASE,
            "{n} ranks: {seen:?}"
        );
        // A TCP store's get is a wait and a read; the handshake is 2 more.
        assert!(
            queries_per_rank <= 2 * 2 * MOST_PER_PHASE + 2,
            "{n} ranks: {queries_per_rank} queries per rank"
        );
    }
}

/// A world whose groups dump on timeout looks for the dump request all the time: idle, its
/// ranks send the server nothing for it, and each keeps one connection, whatever its groups.
#[test]
fn an_idle_world_that_dumps_on_timeout_sends_the_server_nothing() {
    let n = 4;
    let server = TcpServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    let dir = std::env::temp_dir().join(format!("oxccl-idle-{}", std::process::id()));
    let backend = MockBackend::new();
    let (go, ready) = (
        Arc::new(std::sync::Barrier::new(n as usize + 1)),
        Arc::new(std::sync::Barrier::new(n as usize + 1)),
    );
    let ranks: Vec<_> = (0..n)
        .map(|r| {
            let (b, dir, go, ready) = (backend.clone(), dir.clone(), go.clone(), ready.clone());
            std::thread::spawn(move || -> Result<()> {
                let store = Arc::new(TcpStore::new(TcpStoreOptions {
                    timeout: Duration::from_secs(20),
                    ..TcpStoreOptions::client("127.0.0.1", port)
                })?);
                let o = PgOptions {
                    trace_dir: Some(dir),
                    dump_on_timeout: true,
                    coord_check: Duration::from_millis(20),
                    ..opts(r)
                };
                let pg = ProcessGroup::new(b, store, r, n, o)?;
                let (half, _) = pg.new_subgroups(2)?;
                pg.barrier()?.wait()?;
                half.barrier()?.wait()?;
                ready.wait();
                // Idle while the test counts.
                go.wait();
                pg.barrier()?.wait()?;
                Ok(())
            })
        })
        .collect();
    ready.wait();
    // Let the coordination thread make its first checks, which leave the waits in place.
    std::thread::sleep(Duration::from_millis(200));
    let before = server.stats().queries;
    std::thread::sleep(Duration::from_millis(1000));
    let idle = server.stats().queries - before;
    let connections = server.stats().connections;
    go.wait();
    for h in ranks {
        h.join().unwrap().expect("a rank failed");
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        connections, n as usize,
        "one connection per process (here, per rank's client), whatever its groups"
    );
    assert_eq!(
        idle, 0,
        "{n} idle ranks checking the dump request every 20 ms sent {idle} queries in a second"
    );
}

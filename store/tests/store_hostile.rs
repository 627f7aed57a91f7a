//! The TCP store server against hostile clients: malformed frames, length prefixes up to
//! u64::MAX, slow and half-open connections, 1,000 clients at once, clients gone mid-query,
//! a flood of waits on keys that never come, queries past the memory bound. The server never
//! crashes, its tracked bytes stay within [`ServerLimits`] (read through `TcpServer::stats`),
//! its counts return to zero when the clients leave, and other clients keep working. Also
//! the optional shared token and the loopback-only default. Loopback, ephemeral ports.

use oxccl_store::tcp::wire::{self, QueryType};
use oxccl_store::tcp::{ServerLimits, ServerOptions, ServerStats};
use oxccl_store::Error;
use oxccl_store::{Store, TcpServer, TcpStore, TcpStoreOptions};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

const HOST: &str = "127.0.0.1";
const T: Duration = Duration::from_secs(5);

fn server(limits: ServerLimits, token: Option<&str>) -> TcpServer {
    let opts = ServerOptions {
        token: token.map(str::to_string),
        limits,
        // Several loops, so a misbehaving client on one cannot upset another's either.
        event_loops: 3,
    };
    TcpServer::bind_with(HOST, 0, opts).expect("bind")
}

/// A raw connection, validated.
fn raw(port: u16) -> TcpStream {
    let mut c = TcpStream::connect((HOST, port)).expect("connect");
    c.set_read_timeout(Some(T)).unwrap();
    let mut q = Vec::new();
    wire::put_query(&mut q, QueryType::Validate);
    wire::put_u32(&mut q, wire::VALIDATION_MAGIC);
    c.write_all(&q).unwrap();
    c
}

fn add_query(key: &[u8], delta: i64) -> Vec<u8> {
    let mut q = Vec::new();
    wire::put_query(&mut q, QueryType::Add);
    wire::put_bytes(&mut q, key);
    wire::put_i64(&mut q, delta);
    q
}

fn set_query(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut q = Vec::new();
    wire::put_query(&mut q, QueryType::Set);
    wire::put_bytes(&mut q, key);
    wire::put_bytes(&mut q, value);
    q
}

fn wait_query(keys: &[Vec<u8>]) -> Vec<u8> {
    let mut q = Vec::new();
    wire::put_query(&mut q, QueryType::Wait);
    wire::put_keys(&mut q, keys);
    q
}

/// Asserts the server closes `c` (EOF or reset) without answering, within `T`.
fn assert_closed(c: &mut TcpStream) {
    let mut b = [0u8; 8];
    let t0 = Instant::now();
    match c.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {}
        other => panic!("expected the server to close, got {other:?}"),
    }
    assert!(t0.elapsed() < T);
}

/// Polls `stats` until `ok` holds (the server's threads notice a close asynchronously).
fn eventually(s: &TcpServer, what: &str, ok: impl Fn(&ServerStats) -> bool) -> ServerStats {
    let t0 = Instant::now();
    loop {
        let st = s.stats();
        if ok(&st) {
            return st;
        }
        assert!(t0.elapsed() < T, "{what}: stuck at {st:?}");
        thread::sleep(Duration::from_millis(5));
    }
}

fn idle(st: &ServerStats) -> bool {
    st.connections == 0 && st.buffered_bytes == 0 && st.waiting_connections == 0
}

/// A well-behaved oxccl client of `port` adds and reads back.
fn still_serves(port: u16, key: &str) {
    let c = TcpStore::new(TcpStoreOptions {
        timeout: T,
        token: None,
        ..TcpStoreOptions::client(HOST, port)
    })
    .expect("a good client connects");
    assert_eq!(c.add(key, 5).unwrap(), 5);
    assert_eq!(c.get(key, T).unwrap(), b"5");
}

#[test]
fn huge_length_prefixes_and_malformed_frames_close_only_their_connection() {
    let s = server(ServerLimits::default(), None);
    let port = s.port();
    let mut cases: Vec<Vec<u8>> = Vec::new();
    for len in [u64::MAX, u64::MAX / 2, 1 << 40, (1 << 30) + 1] {
        // As a key, as a value, as a key count, as a multi-set count.
        let mut q = vec![QueryType::Get as u8];
        q.extend_from_slice(&len.to_ne_bytes());
        cases.push(q);
        let mut q = vec![QueryType::Set as u8];
        wire::put_bytes(&mut q, b"k");
        q.extend_from_slice(&len.to_ne_bytes());
        cases.push(q);
        let mut q = vec![QueryType::Wait as u8];
        q.extend_from_slice(&len.to_ne_bytes());
        cases.push(q);
        let mut q = vec![QueryType::MultiSet as u8];
        q.extend_from_slice(&len.to_ne_bytes());
        cases.push(q);
    }
    cases.push(vec![250]); // unknown query type
    cases.push(add_query(b"/k", 1)); // fine, then: ADD on a value that is no integer
    for q in &cases {
        let mut c = raw(port);
        c.write_all(q).unwrap();
        if q[0] == QueryType::Add as u8 {
            let mut r = [0u8; 8];
            c.read_exact(&mut r).unwrap();
            c.write_all(&set_query(b"/k", b"not a number")).unwrap();
            c.write_all(&add_query(b"/k", 1)).unwrap();
        }
        assert_closed(&mut c);
        // Nothing was allocated from the prefixes: the read-ahead stays at a few bytes.
        assert!(s.stats().buffered_bytes < 4096, "{:?}", s.stats());
    }
    // Before VALIDATE, and a wrong magic.
    let mut c = TcpStream::connect((HOST, port)).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    c.write_all(&add_query(b"/k", 1)).unwrap();
    assert_closed(&mut c);
    let mut c = TcpStream::connect((HOST, port)).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    c.write_all(&[QueryType::Validate as u8, 1, 2, 3, 4])
        .unwrap();
    assert_closed(&mut c);

    still_serves(port, "after-malformed");
    eventually(&s, "connections close", idle);
}

#[test]
fn slow_half_open_and_vanishing_clients_do_not_stall_others() {
    let s = server(ServerLimits::default(), None);
    let port = s.port();
    // Half-open: connected, validated, then silent; and half a query, then silent.
    let silent: Vec<TcpStream> = (0..50).map(|_| raw(port)).collect();
    let mut halves: Vec<TcpStream> = (0..50).map(|_| raw(port)).collect();
    for h in &mut halves {
        h.write_all(&set_query(b"/half", &[7u8; 1000])[..500])
            .unwrap();
    }
    // A slow client: one byte every 2 ms.
    let slow = thread::spawn(move || {
        let mut c = raw(port);
        for b in add_query(b"/slow", 3) {
            c.write_all(&[b]).unwrap();
            thread::sleep(Duration::from_millis(2));
        }
        let mut r = [0u8; 8];
        c.read_exact(&mut r).unwrap();
        i64::from_ne_bytes(r)
    });
    // Others are served meanwhile, at once.
    let t0 = Instant::now();
    still_serves(port, "beside-slow");
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(slow.join().unwrap(), 3);
    let st = eventually(&s, "all counted", |st| st.connections >= 100);
    assert!(
        st.buffered_bytes >= 50 * 500 && st.buffered_bytes < 64 * 1024,
        "{st:?}"
    );
    // Gone mid-query: their read-ahead is released, their threads end.
    drop(silent);
    drop(halves);
    eventually(&s, "vanished clients forgotten", idle);
    still_serves(port, "after-vanished");
}

#[test]
fn a_thousand_concurrent_clients() {
    let s = server(ServerLimits::default(), None);
    let port = s.port();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            thread::spawn(move || {
                let mut conns: Vec<TcpStream> = (0..125).map(|_| raw(port)).collect();
                for c in &mut conns {
                    c.write_all(&add_query(b"/n", 1)).unwrap();
                }
                for c in &mut conns {
                    let mut r = [0u8; 8];
                    c.read_exact(&mut r).unwrap();
                }
                conns
            })
        })
        .collect();
    let held: Vec<Vec<TcpStream>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let st = s.stats();
    assert_eq!(st.connections, 1000, "{st:?}");
    let c = TcpStore::new(TcpStoreOptions {
        timeout: T,
        ..TcpStoreOptions::client(HOST, port)
    })
    .unwrap();
    assert_eq!(c.get("n", T).unwrap(), b"1000");
    drop(c);
    drop(held);
    eventually(&s, "a thousand clients gone", idle);
}

#[test]
fn the_connection_limit_refuses_extra_clients_and_serves_the_rest() {
    let limits = ServerLimits {
        max_connections: 4,
        ..ServerLimits::default()
    };
    let s = server(limits, None);
    let port = s.port();
    let mut held: Vec<TcpStream> = (0..4).map(|_| raw(port)).collect();
    eventually(&s, "four in", |st| st.connections == 4);
    let mut extra = raw(port);
    assert_closed(&mut extra);
    assert_eq!(s.stats().connections, 4);
    held.pop();
    eventually(&s, "one left", |st| st.connections == 3);
    still_serves(port, "under-limit");
}

#[test]
fn a_flood_of_waits_on_keys_that_never_come_stays_within_the_wait_bound() {
    let limits = ServerLimits {
        max_waited_bytes: 64 * 1024,
        ..ServerLimits::default()
    };
    let s = server(limits, None);
    let port = s.port();
    // 200 clients each wait on 16 keys of 16 bytes: 51,200 bytes awaited, within the bound.
    let mut waiters: Vec<TcpStream> = (0..200)
        .map(|i| {
            let keys: Vec<Vec<u8>> = (0..16)
                .map(|j| format!("/never{i:05}-{j:04}").into_bytes())
                .collect();
            let mut c = raw(port);
            c.write_all(&wait_query(&keys)).unwrap();
            c
        })
        .collect();
    let st = eventually(&s, "waits registered", |st| st.waiting_connections == 200);
    assert_eq!(st.waited_bytes, 200 * 16 * 16);
    // The next wait of 16 KiB of keys would cross 64 KiB: that client is closed, nobody else.
    let big: Vec<Vec<u8>> = (0..1024)
        .map(|j| format!("/big{j:012}").into_bytes())
        .collect();
    let mut c = raw(port);
    c.write_all(&wait_query(&big)).unwrap();
    assert_closed(&mut c);
    let st = s.stats();
    assert!(st.waited_bytes <= 64 * 1024, "{st:?}");
    assert_eq!(st.waiting_connections, 200);
    still_serves(port, "beside-waits");
    // A waiter that cancels is answered, and forgotten.
    let w = &mut waiters[0];
    w.write_all(&[QueryType::CancelWait as u8]).unwrap();
    let mut r = [0u8; 1];
    w.read_exact(&mut r).unwrap();
    assert_eq!(r[0], wire::WAIT_CANCELED);
    eventually(&s, "cancelled", |st| st.waiting_connections == 199);
    drop(waiters);
    let st = eventually(&s, "waiters gone", idle);
    assert_eq!(st.waited_bytes, 0);
}

#[test]
fn a_wait_on_a_hundred_thousand_distinct_keys_does_not_hold_the_server() {
    let s = server(ServerLimits::default(), None);
    let port = s.port();
    let keys: Vec<Vec<u8>> = (0..100_000)
        .map(|j| format!("/k{j}").into_bytes())
        .collect();
    let mut c = raw(port);
    let t0 = Instant::now();
    c.write_all(&wait_query(&keys)).unwrap();
    eventually(&s, "registered", |st| st.waiting_connections == 1);
    still_serves(port, "beside-big-wait");
    // Was quadratic under the key-space lock (10^10 comparisons): now well under a second.
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[test]
fn queries_past_the_memory_bound_close_their_connection_and_the_bound_holds() {
    let limits = ServerLimits {
        max_query_bytes: 4096,
        max_buffered_bytes: 16 * 1024,
        max_stored_bytes: 64 * 1024,
        ..ServerLimits::default()
    };
    let s = server(limits, None);
    let port = s.port();
    // One query over 4 KiB: refused as it arrives.
    let mut c = raw(port);
    let _ = c.write_all(&set_query(b"/big", &[1u8; 8192]));
    assert_closed(&mut c);
    // Read-ahead over all connections stays within 16 KiB: the 5th half-query of 3.5 KiB is
    // refused (each is within the per-query bound).
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..8 {
        let mut c = raw(port);
        c.write_all(&set_query(b"/part", &[2u8; 4000])[..3500])
            .unwrap();
        held.push(c);
        let st = s.stats();
        assert!(st.buffered_bytes <= 16 * 1024, "{st:?}");
    }
    for c in &mut held {
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 1];
        if matches!(c.read(&mut b), Ok(0)) {
            refused += 1;
        }
    }
    assert!(refused >= 4, "{refused} of 8 refused, {:?}", s.stats());
    drop(held);
    eventually(&s, "read-ahead released", idle);
    // Stored bytes: 3 KiB values until the store is full; the one that would cross 64 KiB
    // closes its connection, and the count never passes the bound.
    let mut stored_ok = 0;
    for i in 0..40 {
        let mut c = raw(port);
        c.write_all(&set_query(format!("/v{i:02}").as_bytes(), &[3u8; 3000]))
            .unwrap();
        // A GETNUMKEYS after the SET answers only if the SET was taken.
        c.write_all(&[QueryType::GetNumKeys as u8]).unwrap();
        let mut r = [0u8; 8];
        if c.read_exact(&mut r).is_ok() {
            stored_ok += 1;
        }
        assert!(s.stats().stored_bytes <= 64 * 1024, "{:?}", s.stats());
    }
    assert_eq!(stored_ok, 64 * 1024 / 3004);
    assert_eq!(s.stats().stored_bytes, stored_ok * 3004);
    // Deleting makes room again.
    let mut c = raw(port);
    let mut q = Vec::new();
    wire::put_query(&mut q, QueryType::DeleteKey);
    wire::put_bytes(&mut q, b"/v00");
    c.write_all(&q).unwrap();
    let mut r = [0u8; 8];
    c.read_exact(&mut r).unwrap();
    assert_eq!(i64::from_ne_bytes(r), 1);
    assert_eq!(s.stats().stored_bytes, (stored_ok - 1) * 3004);
    still_serves(port, "x");
}

#[test]
fn a_store_token_refuses_clients_without_it() {
    let s = server(ServerLimits::default(), Some("s3cret"));
    let port = s.port();
    let opts = |token: Option<&str>| TcpStoreOptions {
        timeout: Duration::from_millis(600),
        token: token.map(str::to_string),
        ..TcpStoreOptions::client(HOST, port)
    };
    let good = TcpStore::new(opts(Some("s3cret"))).expect("the right token");
    good.set("k", b"v").unwrap();
    assert_eq!(good.get("k", T).unwrap(), b"v");
    for bad in [None, Some("s3creT"), Some("s3cret-and-more"), Some("")] {
        match TcpStore::new(opts(bad)) {
            Err(Error::Timeout { what, .. }) => {
                assert!(what.contains("OXCCL_STORE_TOKEN"), "{what}")
            }
            Err(e) => panic!("{bad:?}: {e:?}"),
            Ok(_) => panic!("{bad:?}: accepted"),
        }
    }
    // A raw client that skips the token is closed at its first query.
    let mut c = raw(port);
    c.write_all(&add_query(b"/k2", 1)).unwrap();
    assert_closed(&mut c);
    assert_eq!(good.get("k", T).unwrap(), b"v");
    // A client with a token works against a server without one (as against PyTorch's).
    let open = server(ServerLimits::default(), None);
    let c = TcpStore::new(TcpStoreOptions {
        timeout: T,
        token: Some("s3cret".into()),
        ..TcpStoreOptions::client(HOST, open.port())
    })
    .unwrap();
    assert_eq!(c.add("n", 2).unwrap(), 2);
}

#[test]
fn a_hosted_server_listens_on_its_host_only() {
    let store = TcpStore::new(TcpStoreOptions {
        timeout: T,
        token: None,
        ..TcpStoreOptions::server(HOST, 0)
    })
    .unwrap();
    store.set("k", b"v").unwrap();
    // Another loopback address of this machine is not listened on (no wildcard bind).
    let other = TcpStream::connect_timeout(
        &(std::net::Ipv4Addr::new(127, 0, 0, 2), store.port()).into(),
        Duration::from_secs(1),
    );
    assert!(other.is_err(), "reachable through 127.0.0.2");
    // Asked to, it listens on every interface.
    let wide = TcpStore::new(TcpStoreOptions {
        timeout: T,
        token: None,
        listen: Some("0.0.0.0".into()),
        ..TcpStoreOptions::server(HOST, 0)
    })
    .unwrap();
    let via = TcpStream::connect_timeout(
        &(std::net::Ipv4Addr::new(127, 0, 0, 2), wide.port()).into(),
        Duration::from_secs(1),
    );
    assert!(via.is_ok());
}

#[test]
fn a_client_that_does_not_read_its_replies_is_held_back_then_served_in_full() {
    let s = server(ServerLimits::default(), None);
    let port = s.port();
    let value = vec![9u8; 64 * 1024];
    let mut setter = raw(port);
    setter.write_all(&set_query(b"/big", &value)).unwrap();
    setter.write_all(&[QueryType::GetNumKeys as u8]).unwrap();
    let mut r = [0u8; 8];
    setter.read_exact(&mut r).unwrap();
    // 1,000 GETs of 64 KiB, none read yet: 64 MiB of replies the server must not pile up.
    const GETS: usize = 1000;
    let mut get = Vec::new();
    wire::put_query(&mut get, QueryType::Get);
    wire::put_bytes(&mut get, b"/big");
    let mut greedy = raw(port);
    let mut w = greedy.try_clone().unwrap();
    let writer = thread::spawn(move || {
        for _ in 0..GETS {
            w.write_all(&get).unwrap();
        }
    });
    thread::sleep(Duration::from_millis(300));
    still_serves(port, "beside-greedy");
    assert!(s.stats().buffered_bytes < 1 << 20, "{:?}", s.stats());
    // Read late, every reply arrives whole and in order.
    let mut reply = vec![0u8; 8 + value.len()];
    for _ in 0..GETS {
        greedy.read_exact(&mut reply).unwrap();
        assert_eq!(u64::from_ne_bytes(reply[..8].try_into().unwrap()), 65536);
        assert!(reply[8..] == value[..]);
    }
    writer.join().unwrap();
}

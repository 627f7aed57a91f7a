//! The TCP store against oxccl's own server: every operation with its values, timeouts with
//! their exact errors, concurrency, a server lost under a blocked client (the standalone
//! `oxccl store` process: cli/tests/cli_store.rs). Loopback and ephemeral ports only; the
//! whole file runs in seconds.

use oxccl_store::Error;
use oxccl_store::{Store, TcpServer, TcpStore, TcpStoreOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const HOST: &str = "127.0.0.1";

fn opts(port: u16, timeout: Duration) -> TcpStoreOptions {
    TcpStoreOptions {
        timeout,
        ..TcpStoreOptions::client(HOST, port)
    }
}

/// A store hosting its own server on a free port, and the port.
fn server_store() -> TcpStore {
    let o = TcpStoreOptions {
        timeout: Duration::from_secs(5),
        ..TcpStoreOptions::server(HOST, 0)
    };
    TcpStore::new(o).expect("server store")
}

fn client(port: u16) -> TcpStore {
    TcpStore::new(opts(port, Duration::from_secs(5))).expect("client store")
}

#[test]
fn every_operation_with_its_values() {
    let s = server_store();
    assert!(s.is_server());
    assert_ne!(s.port(), 0);
    assert_eq!(s.host(), HOST);
    assert_eq!(s.timeout(), Duration::from_secs(5));
    let t = Duration::from_secs(1);

    s.set("a", b"alpha").unwrap();
    assert_eq!(s.get("a", t).unwrap(), b"alpha");
    s.set("a", b"").unwrap();
    assert_eq!(s.get("a", t).unwrap(), b"", "an empty value is a value");
    s.set("bin", &[0, 255, 10, 0]).unwrap();
    assert_eq!(s.get("bin", t).unwrap(), [0, 255, 10, 0]);

    assert_eq!(s.add("n", 5).unwrap(), 5);
    assert_eq!(s.add("n", -7).unwrap(), -2);
    assert_eq!(s.get("n", t).unwrap(), b"-2", "counters are decimal text");

    assert!(s.check(&["a", "n"]).unwrap());
    assert!(!s.check(&["a", "missing"]).unwrap());
    s.wait(&["a", "bin", "n"], t).unwrap();

    assert_eq!(s.num_keys().unwrap(), 3);
    assert!(s.delete("bin").unwrap());
    assert!(!s.delete("bin").unwrap());
    assert_eq!(s.num_keys().unwrap(), 2);
    assert!(!s.check(&["bin"]).unwrap());

    s.append("log", b"x").unwrap();
    s.append("log", b"yz").unwrap();
    assert_eq!(s.get("log", t).unwrap(), b"xyz");
    s.multi_set(&[("m1", b"one"), ("m2", b"two")]).unwrap();
    assert_eq!(
        s.multi_get(&["m2", "m1"], t).unwrap(),
        [b"two".to_vec(), b"one".to_vec()]
    );
}

#[test]
fn compare_set_cases() {
    let s = server_store();
    // Missing key, empty expected: created.
    assert_eq!(s.compare_set("k", b"", b"v1").unwrap(), b"v1");
    // Matching expected: swapped.
    assert_eq!(s.compare_set("k", b"v1", b"v2").unwrap(), b"v2");
    // Wrong expected: unchanged, the current value comes back.
    assert_eq!(s.compare_set("k", b"nope", b"v3").unwrap(), b"v2");
    assert_eq!(s.get("k", Duration::from_secs(1)).unwrap(), b"v2");
    // Missing key, non-empty expected: not created; PyTorch answers `expected`.
    assert_eq!(s.compare_set("absent", b"exp", b"d").unwrap(), b"exp");
    assert!(!s.check(&["absent"]).unwrap());
}

#[test]
fn get_times_out_naming_the_key_and_the_store_still_works() {
    let s = server_store();
    let start = Instant::now();
    let e = s.get("never-set", Duration::from_millis(200)).unwrap_err();
    let took = start.elapsed();
    match &e {
        Error::Timeout { what, after_ms } => {
            assert!(what.contains("never-set"), "{e}");
            assert_eq!(*after_ms, 200);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // The cancelled wait left the connection in step.
    s.set("after", b"1").unwrap();
    assert_eq!(s.get("after", Duration::from_secs(1)).unwrap(), b"1");

    let e = s.wait(&["x", "y"], Duration::from_millis(50)).unwrap_err();
    assert!(
        matches!(&e, Error::Timeout { what, .. } if what.contains("`x`, `y`")),
        "{e}"
    );
}

#[test]
fn wait_is_released_by_a_set_from_another_client() {
    let s = server_store();
    let other = client(s.port());
    let waiter = thread::spawn(move || {
        other
            .wait(&["k1", "k2"], Duration::from_secs(5))
            .map(|()| Instant::now())
    });
    thread::sleep(Duration::from_millis(100));
    s.set("k1", b"1").unwrap();
    thread::sleep(Duration::from_millis(50));
    assert!(!waiter.is_finished(), "released with one key of two");
    let before_k2 = Instant::now();
    s.set("k2", b"2").unwrap();
    let released = waiter.join().unwrap().unwrap();
    assert!(
        released >= before_k2,
        "released before the second key was set"
    );
}

#[test]
fn a_blocked_get_does_not_block_other_threads_of_the_same_store() {
    let s = Arc::new(server_store());
    let s2 = Arc::clone(&s);
    let getter = thread::spawn(move || s2.get("late", Duration::from_secs(5)));
    thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    s.set("other", b"x").unwrap();
    assert_eq!(s.add("c", 1).unwrap(), 1);
    assert!(start.elapsed() < Duration::from_secs(1));
    s.set("late", b"now").unwrap();
    assert_eq!(getter.join().unwrap().unwrap(), b"now");
}

#[test]
fn add_from_many_threads_sums_exactly() {
    let s = Arc::new(server_store());
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                for _ in 0..50 {
                    s.add("sum", i + 1).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // 50 * (1 + 2 + ... + 16)
    assert_eq!(s.add("sum", 0).unwrap(), 50 * 136);
}

#[test]
fn sixty_four_clients_add_and_set() {
    let s = server_store();
    let port = s.port();
    let threads: Vec<_> = (0..64)
        .map(|i| {
            thread::spawn(move || {
                let c = client(port);
                for _ in 0..10 {
                    c.add("total", 2).unwrap();
                }
                c.set(&format!("client/{i}"), i.to_string().as_bytes())
                    .unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.add("total", 0).unwrap(), 64 * 10 * 2);
    for i in 0..64 {
        let v = s
            .get(&format!("client/{i}"), Duration::from_secs(1))
            .unwrap();
        assert_eq!(v, i.to_string().as_bytes());
    }
    assert_eq!(s.num_keys().unwrap(), 65);
}

#[test]
fn wait_for_workers_counts_clients_and_times_out_with_the_count() {
    let server_opts = TcpStoreOptions {
        world_size: Some(3),
        timeout: Duration::from_secs(5),
        ..TcpStoreOptions::server(HOST, 0)
    };
    // The server must exist before the clients know its port: bind one ourselves and hand
    // the store a fixed port instead.
    let port = {
        let l = TcpListener::bind((HOST, 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let server = thread::spawn(move || {
        TcpStore::new(TcpStoreOptions {
            port,
            ..server_opts
        })
    });
    let workers: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || {
                TcpStore::new(TcpStoreOptions {
                    world_size: Some(3),
                    ..opts(port, Duration::from_secs(5))
                })
            })
        })
        .collect();
    let server = server.join().unwrap().expect("all 3 joined");
    for w in workers {
        w.join().unwrap().unwrap();
    }
    assert_eq!(server.num_keys().unwrap(), 1, "only PyTorch's `init/` key");

    let start = Instant::now();
    let e = TcpStore::new(TcpStoreOptions {
        world_size: Some(2),
        timeout: Duration::from_millis(300),
        ..TcpStoreOptions::server(HOST, 0)
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::Timeout { what, .. } if what.contains("1/2 joined")),
        "{e}"
    );
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn server_shutdown_under_a_blocked_get_fails_the_get_at_once() {
    let server = TcpServer::bind(HOST, 0).unwrap();
    let timeout = Duration::from_secs(3);
    let c = TcpStore::new(opts(server.port(), timeout)).unwrap();
    let getter = thread::spawn(move || {
        let start = Instant::now();
        (c.get("never", timeout), start.elapsed())
    });
    thread::sleep(Duration::from_millis(100));
    server.shutdown();
    let (r, took) = getter.join().unwrap();
    let e = r.unwrap_err();
    assert!(
        matches!(&e, Error::Remote { detail } if detail.contains("closed")),
        "{e}"
    );
    assert!(
        took < timeout,
        "{took:?}: waited for the timeout instead of failing"
    );
}

#[test]
fn connecting_to_nothing_fails_after_the_timeout_naming_the_address() {
    let port = {
        let l = TcpListener::bind((HOST, 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let start = Instant::now();
    let e = TcpStore::new(opts(port, Duration::from_millis(300))).unwrap_err();
    let took = start.elapsed();
    let addr = format!("{HOST}:{port}");
    assert!(
        matches!(&e, Error::Timeout { what, .. } if what.contains(&addr)),
        "{e}"
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn a_server_that_never_answers_fails_the_connect_within_the_timeout() {
    // Listening (the kernel completes handshakes) but never reading: not a store.
    let silent = TcpListener::bind((HOST, 0)).unwrap();
    let port = silent.local_addr().unwrap().port();
    let start = Instant::now();
    let e = TcpStore::new(opts(port, Duration::from_millis(400))).unwrap_err();
    let took = start.elapsed();
    assert!(
        matches!(&e, Error::Timeout { what, .. } if what.contains(&format!("{HOST}:{port}"))),
        "{e}"
    );
    assert!(took < Duration::from_millis(1400), "{took:?}");
}

#[test]
fn bad_arguments_are_refused_before_the_network() {
    let s = server_store();
    let long = "k".repeat(9000);
    let e = s.set(&long, b"v").unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "key", .. }),
        "{e}"
    );
    let e = s.get(&long, Duration::from_millis(10)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "key", .. }),
        "{e}"
    );
}

#[test]
fn hostile_clients_lose_their_connection_and_the_server_serves_on() {
    let s = server_store();
    let addr = (HOST, s.port());
    let closed = |bytes: &[u8]| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c.write_all(bytes).unwrap();
        let mut b = [0u8; 1];
        // Closed by the server: EOF (or a reset), never an answer, never a hang.
        assert!(matches!(c.read(&mut b), Ok(0) | Err(_)));
    };
    // A query before VALIDATE.
    closed(&[3, 1, 0, 0, 0, 0, 0, 0, 0, b'k']);
    // A wrong magic.
    closed(&[0, 1, 2, 3, 4]);
    let mut validated = vec![0u8];
    validated.extend_from_slice(&0x3C85_F7CEu32.to_ne_bytes());
    // An unknown query type.
    let mut q = validated.clone();
    q.push(250);
    closed(&q);
    // A key length of 2^64 - 1.
    let mut q = validated.clone();
    q.push(3);
    q.extend_from_slice(&u64::MAX.to_ne_bytes());
    closed(&q);
    // A value over the 1 GiB cap.
    let mut q = validated;
    q.push(1);
    q.extend_from_slice(&1u64.to_ne_bytes());
    q.push(b'k');
    q.extend_from_slice(&((1u64 << 30) + 1).to_ne_bytes());
    closed(&q);
    // A half-sent query, then gone.
    drop(TcpStream::connect(addr).unwrap().write_all(&[1, 5, 0]));

    s.set("still", b"serving").unwrap();
    assert_eq!(s.get("still", Duration::from_secs(1)).unwrap(), b"serving");
}

#[test]
fn a_query_split_across_packets_is_assembled() {
    // PyTorch's own tests send a SET's key and value a second apart; the server must wait
    // for the rest of a query, not misread it.
    let s = server_store();
    let mut raw = TcpStream::connect((HOST, s.port())).unwrap();
    raw.set_nodelay(true).unwrap();
    let mut q = vec![0u8];
    q.extend_from_slice(&0x3C85_F7CEu32.to_ne_bytes());
    q.push(1); // SET
    q.extend_from_slice(&6u64.to_ne_bytes());
    q.extend_from_slice(b"/split");
    q.extend_from_slice(&5u64.to_ne_bytes());
    q.extend_from_slice(b"value");
    for part in q.chunks(3) {
        raw.write_all(part).unwrap();
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(s.get("split", Duration::from_secs(2)).unwrap(), b"value");
}

//! A watched key (`Store::check_watched`) on oxccl's own server: asking again and again
//! whether it is set sends the server nothing while it is not (the server's query count stays
//! put), the answer comes once another client sets it, whether the client was idle or in a
//! call at that moment, and the client's other calls stay in step throughout.

use oxccl_store::{Error, PrefixStore, Store, TcpServer, TcpStore, TcpStoreOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HOST: &str = "127.0.0.1";

fn client(port: u16) -> TcpStore {
    let o = TcpStoreOptions {
        timeout: Duration::from_secs(5),
        ..TcpStoreOptions::client(HOST, port)
    };
    TcpStore::new(o).expect("client store")
}

/// Asks `store` whether `key` is set until it says so, within a second.
fn until_set(store: &dyn Store, key: &str) -> Duration {
    let began = Instant::now();
    while !store.check_watched(key).expect("check_watched") {
        assert!(
            began.elapsed() < Duration::from_secs(1),
            "`{key}` set, but not seen after a second"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    began.elapsed()
}

/// The server's query count once it stops moving (a query sent is applied shortly after).
fn settled_queries(server: &TcpServer) -> u64 {
    let mut last = server.stats().queries;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = server.stats().queries;
        if now == last {
            return now;
        }
        last = now;
    }
}

#[test]
fn asking_for_a_watched_key_costs_the_server_nothing_until_it_is_set() {
    let server = TcpServer::bind(HOST, 0).unwrap();
    let (watcher, setter) = (client(server.port()), client(server.port()));
    // The first ask checks once, and leaves the idle connection waiting on the key.
    assert!(!watcher.check_watched("signal").unwrap());
    let before = settled_queries(&server);
    for _ in 0..200 {
        assert!(!watcher.check_watched("signal").unwrap());
    }
    assert_eq!(
        settled_queries(&server),
        before,
        "200 asks for an unset watched key reached the server"
    );
    setter.set("signal", b"7").unwrap();
    until_set(&watcher, "signal");
    // Set once, it stays set, and the connection answers the next call in step.
    assert!(watcher.check_watched("signal").unwrap());
    assert_eq!(watcher.get("signal", Duration::from_secs(1)).unwrap(), b"7");
    watcher.set("after", b"x").unwrap();
    assert_eq!(setter.get("after", Duration::from_secs(1)).unwrap(), b"x");
}

#[test]
fn calls_between_asks_keep_the_connection_in_step() {
    let server = TcpServer::bind(HOST, 0).unwrap();
    let (watcher, setter) = (client(server.port()), client(server.port()));
    assert!(!watcher.check_watched("signal").unwrap());
    for i in 0..50i64 {
        // Every call takes the waiting connection: cancel and query in one packet.
        assert_eq!(watcher.add("n", 1).unwrap(), i + 1);
        watcher.set(&format!("k{i}"), b"v").unwrap();
        assert!(watcher.check(&[&format!("k{i}")]).unwrap());
        assert!(!watcher.check_watched("signal").unwrap());
    }
    let waited = watcher.wait(&["never"], Duration::from_millis(30));
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    assert!(!watcher.check_watched("signal").unwrap());
    setter.set("signal", b"1").unwrap();
    until_set(&watcher, "signal");
}

#[test]
fn a_signal_set_while_the_connection_is_in_a_call_is_not_lost() {
    let server = TcpServer::bind(HOST, 0).unwrap();
    let watcher = Arc::new(client(server.port()));
    let setter = client(server.port());
    assert!(!watcher.check_watched("signal").unwrap());
    // The server answers the waiting connection; the next call reads that answer before its
    // own (the cancel crossed it), and the client keeps it.
    setter.set("signal", b"1").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(watcher.add("n", 5).unwrap(), 5);
    let before = settled_queries(&server);
    assert!(watcher.check_watched("signal").unwrap());
    assert_eq!(
        settled_queries(&server),
        before,
        "known set already: no query"
    );

    // Through a call blocked for longer than the asker's interval: asks meanwhile go to the
    // server (a connection of their own), so the answer is never late.
    let other = client(server.port());
    assert!(!other.check_watched("late").unwrap());
    let blocked = {
        let other = Arc::new(other);
        let o = other.clone();
        let t = std::thread::spawn(move || o.get("released", Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!other.check_watched("late").unwrap());
        setter.set("late", b"1").unwrap();
        until_set(&*other, "late");
        setter.set("released", b"r").unwrap();
        t.join().unwrap()
    };
    assert_eq!(blocked.unwrap(), b"r");
}

#[test]
fn a_prefix_store_watches_its_own_key_and_other_keys_are_checked() {
    let server = TcpServer::bind(HOST, 0).unwrap();
    let raw: Arc<dyn Store> = Arc::new(client(server.port()));
    let setter = client(server.port());
    let view = PrefixStore::new("world/3", raw.clone());
    assert!(!view.check_watched("signal").unwrap());
    // A second key on the same client is watched too (up to four): its wait is answered by
    // the server on its own connection, so it is seen set shortly after the set, not at once.
    assert!(!raw.check_watched("other").unwrap());
    setter.set("other", b"1").unwrap();
    until_set(&*raw, "other");
    // Another key of the same name outside the view is not the view's.
    setter.set("signal", b"1").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!view.check_watched("signal").unwrap());
    setter.set("world/3/signal", b"1").unwrap();
    until_set(&view, "signal");
}

#[test]
fn several_keys_are_watched_at_once_and_a_key_seen_set_makes_room() {
    let server = TcpServer::bind(HOST, 0).unwrap();
    let (watcher, setter) = (client(server.port()), client(server.port()));
    let keys = ["dump", "alarm/0", "a", "b"];
    for k in keys {
        assert!(!watcher.check_watched(k).unwrap());
    }
    // A call between asks takes one waiting connection and gives it back waiting again.
    watcher.set("between", b"1").unwrap();
    for k in keys {
        assert!(!watcher.check_watched(k).unwrap());
    }
    let before = settled_queries(&server);
    for _ in 0..100 {
        for k in keys {
            assert!(!watcher.check_watched(k).unwrap());
        }
    }
    assert_eq!(
        settled_queries(&server),
        before,
        "asks for four unset watched keys reached the server"
    );
    // A fifth key is not watched: each ask is a query.
    assert!(!watcher.check_watched("fifth").unwrap());
    let after_fifth = settled_queries(&server);
    assert!(after_fifth > before);
    setter.set("alarm/0", b"1").unwrap();
    until_set(&watcher, "alarm/0");
    // The key seen set makes room: the next epoch's alarm is watched, and costs nothing.
    assert!(!watcher.check_watched("alarm/1").unwrap());
    watcher.set("between", b"2").unwrap();
    assert!(!watcher.check_watched("alarm/1").unwrap());
    let settled = settled_queries(&server);
    for _ in 0..100 {
        assert!(!watcher.check_watched("alarm/1").unwrap());
        assert!(!watcher.check_watched("dump").unwrap());
    }
    assert_eq!(settled_queries(&server), settled);
    for k in ["dump", "alarm/1", "a", "b"] {
        setter.set(k, b"x").unwrap();
        until_set(&watcher, k);
    }
    assert_eq!(
        watcher.get("between", Duration::from_secs(1)).unwrap(),
        b"2"
    );
}

//! A server of several event loops (`ServerOptions::event_loops`): clients dealt to different
//! loops see one key space, a set on one loop releases waiters on every other, and a wait
//! cancelled while another loop's set releases it still answers in PyTorch's order
//! (`STOP_WAITING` before `WAIT_CANCELED`, nothing after), so the connection stays in step.

use oxccl_store::tcp::wire::{self, QueryType};
use oxccl_store::tcp::ServerOptions;
use oxccl_store::{Store, TcpServer, TcpStore, TcpStoreOptions};
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

const HOST: &str = "127.0.0.1";

fn server(loops: usize) -> TcpServer {
    let opts = ServerOptions {
        event_loops: loops,
        ..ServerOptions::default()
    };
    TcpServer::bind_with(HOST, 0, opts).expect("bind")
}

fn client(port: u16) -> TcpStore {
    TcpStore::new(TcpStoreOptions {
        timeout: Duration::from_secs(5),
        ..TcpStoreOptions::client(HOST, port)
    })
    .expect("client")
}

/// A validated raw connection.
fn raw(port: u16) -> TcpStream {
    let mut c = TcpStream::connect((HOST, port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.set_nodelay(true).unwrap();
    let mut q = Vec::new();
    wire::put_query(&mut q, QueryType::Validate);
    wire::put_u32(&mut q, wire::VALIDATION_MAGIC);
    c.write_all(&q).unwrap();
    c
}

fn ping(c: &mut TcpStream, nonce: u32) {
    let mut q = Vec::new();
    wire::put_query(&mut q, QueryType::Ping);
    wire::put_u32(&mut q, nonce);
    c.write_all(&q).unwrap();
    assert_eq!(
        wire::read_u32(c).unwrap(),
        nonce,
        "the connection is out of step"
    );
}

#[test]
fn a_set_on_one_loop_releases_waiters_on_every_loop() {
    let s = server(4);
    let setter = client(s.port());
    let waiters: Vec<TcpStore> = (0..32).map(|_| client(s.port())).collect();
    std::thread::scope(|sc| {
        let hs: Vec<_> = waiters
            .iter()
            .map(|w| sc.spawn(move || w.get("go", Duration::from_secs(5))))
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        setter.set("go", b"now").unwrap();
        for h in hs {
            assert_eq!(h.join().unwrap().unwrap(), b"now");
        }
    });
    // One key space: counts from every loop add up.
    for w in &waiters {
        w.add("n", 1).unwrap();
    }
    assert_eq!(setter.add("n", 0).unwrap(), 32);
    assert_eq!(s.stats().connections, 33);
}

#[test]
fn a_cancel_that_crosses_another_loops_set_keeps_the_order() {
    let s = server(2);
    // Dealt in turn: the waiter to one loop, the setter to the other.
    let mut waiter = raw(s.port());
    let mut setter = raw(s.port());
    let (mut stopped_first, mut cancelled_only) = (0, 0);
    for i in 0..400u32 {
        let key = format!("/k{i}");
        let mut wait = Vec::new();
        wire::put_query(&mut wait, QueryType::Wait);
        wire::put_keys(&mut wait, &[key.as_str()]);
        waiter.write_all(&wait).unwrap();
        let mut set = Vec::new();
        wire::put_query(&mut set, QueryType::Set);
        wire::put_bytes(&mut set, key.as_bytes());
        wire::put_bytes(&mut set, b"v");
        // The set and the cancel race, from two loops.
        setter.write_all(&set).unwrap();
        waiter.write_all(&[QueryType::CancelWait as u8]).unwrap();
        match wire::read_u8(&mut waiter).unwrap() {
            wire::WAIT_STOP_WAITING => {
                assert_eq!(wire::read_u8(&mut waiter).unwrap(), wire::WAIT_CANCELED);
                stopped_first += 1;
            }
            wire::WAIT_CANCELED => cancelled_only += 1,
            b => panic!("round {i}: answer {b} to a cancelled wait"),
        }
        // Nothing stray follows: the next reply is the ping's.
        ping(&mut waiter, i);
        ping(&mut setter, i);
    }
    println!("stop first {stopped_first}, cancelled only {cancelled_only}");
    assert_eq!(stopped_first + cancelled_only, 400);
}

//! Fan-in on one TCP store server: 4,096 light clients (non-blocking sockets driven from a
//! few threads, speaking the wire protocol directly) meet at a barrier three times. Each round
//! every client adds one to the round's counter; the one whose add reaches 4,096 sets the
//! round's key, and every client waits on that key. Every client must finish every round,
//! and each round's adds must answer 1..=4,096, each exactly once.

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use oxccl_store::tcp::wire::{self, QueryType};
use oxccl_store::tcp::{descriptor_limit, ServerOptions};
use oxccl_store::{Store, TcpServer, TcpStore, TcpStoreOptions};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

const HOST: &str = "127.0.0.1";
const CLIENTS: usize = 4096;
const THREADS: usize = 4;
const ROUNDS: usize = 3;
/// Descriptors the test needs: both ends of every connection, and some to spare.
const FDS_NEEDED: usize = 2 * CLIENTS + 256;
const DEADLINE: Duration = Duration::from_secs(60);

fn count_key(round: usize) -> Vec<u8> {
    format!("/fanin-count-{round}").into_bytes()
}

fn done_key(round: usize) -> Vec<u8> {
    format!("/fanin-done-{round}").into_bytes()
}

fn add_query(out: &mut Vec<u8>, round: usize) {
    wire::put_query(out, QueryType::Add);
    wire::put_bytes(out, &count_key(round));
    wire::put_i64(out, 1);
}

/// Writes all of `bytes` to a non-blocking socket (a few dozen bytes: the socket's buffer
/// takes them, at worst after a short wait).
fn send(s: &mut TcpStream, bytes: &[u8]) {
    let mut at = 0;
    while at < bytes.len() {
        match s.write(&bytes[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Where one client stands.
struct Client {
    stream: Option<TcpStream>,
    /// The connection is up and its first queries are sent.
    connected: bool,
    inbuf: Vec<u8>,
    round: usize,
    /// Waiting for the round's ADD reply (else for its WAIT's).
    adding: bool,
    adds: [i64; ROUNDS],
}

/// Drives `n` clients of `port` through every round; their adds' answers, per client.
fn drive(port: u16, n: usize) -> Vec<[i64; ROUNDS]> {
    let mut poll = Poll::new().unwrap();
    // Connects without blocking: a connection the listener's queue drops for a moment is
    // retried by the kernel while the others go on.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut clients: Vec<Client> = (0..n)
        .map(|i| {
            let mut s = TcpStream::connect(addr).expect("connect");
            poll.registry()
                .register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)
                .unwrap();
            Client {
                stream: Some(s),
                connected: false,
                inbuf: Vec::new(),
                round: 0,
                adding: true,
                adds: [0; ROUNDS],
            }
        })
        .collect();
    let mut events = Events::with_capacity(1024);
    let mut done = 0;
    let t0 = Instant::now();
    let mut chunk = [0u8; 256];
    while done < n {
        assert!(t0.elapsed() < DEADLINE, "{done} of {n} clients finished");
        poll.poll(&mut events, Some(Duration::from_millis(100)))
            .unwrap();
        for ev in events.iter() {
            let c = &mut clients[ev.token().0];
            let Some(s) = c.stream.as_mut() else { continue };
            if !c.connected {
                if let Some(e) = s.take_error().unwrap() {
                    panic!("connect: {e}");
                }
                if s.peer_addr().is_err() {
                    continue;
                }
                c.connected = true;
                s.set_nodelay(true).unwrap();
                let mut q = Vec::new();
                wire::put_query(&mut q, QueryType::Validate);
                wire::put_u32(&mut q, wire::VALIDATION_MAGIC);
                add_query(&mut q, 0);
                send(s, &q);
            }
            loop {
                match s.read(&mut chunk) {
                    Ok(0) => panic!("the server closed a client in round {}", c.round),
                    Ok(k) => c.inbuf.extend_from_slice(&chunk[..k]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => panic!("read: {e}"),
                }
            }
            if step(c) {
                let mut s = c.stream.take().unwrap();
                poll.registry().deregister(&mut s).unwrap();
                done += 1;
            }
        }
    }
    clients.into_iter().map(|c| c.adds).collect()
}

/// Takes the replies `c` has, sending its next queries; whether it finished every round.
fn step(c: &mut Client) -> bool {
    loop {
        let s = c.stream.as_mut().unwrap();
        if c.adding {
            let Some(reply) = c.inbuf.get(..8) else {
                return false;
            };
            let v = i64::from_ne_bytes(reply.try_into().unwrap());
            c.inbuf.drain(..8);
            c.adds[c.round] = v;
            let mut q = Vec::new();
            if v == CLIENTS as i64 {
                wire::put_query(&mut q, QueryType::Set);
                wire::put_bytes(&mut q, &done_key(c.round));
                wire::put_bytes(&mut q, b"1");
            }
            wire::put_query(&mut q, QueryType::Wait);
            wire::put_keys(&mut q, &[done_key(c.round)]);
            send(s, &q);
            c.adding = false;
        } else {
            let Some(&r) = c.inbuf.first() else {
                return false;
            };
            assert_eq!(r, wire::WAIT_STOP_WAITING);
            c.inbuf.drain(..1);
            c.round += 1;
            if c.round == ROUNDS {
                return true;
            }
            let mut q = Vec::new();
            add_query(&mut q, c.round);
            send(s, &q);
            c.adding = true;
        }
    }
}

#[test]
fn four_thousand_clients_meet_at_a_barrier_three_times() {
    let fds = descriptor_limit().unwrap_or(0);
    if fds < FDS_NEEDED {
        eprintln!(
            "skipped: {CLIENTS} clients and their server connections need {FDS_NEEDED} \
             descriptors, and the soft limit (ulimit -n) stays at {fds}"
        );
        return;
    }
    let t0 = Instant::now();
    let server = TcpServer::bind_with(HOST, 0, ServerOptions::default()).expect("bind");
    let port = server.port();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| std::thread::spawn(move || drive(port, CLIENTS / THREADS)))
        .collect();
    let adds: Vec<[i64; ROUNDS]> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(adds.len(), CLIENTS);
    for round in 0..ROUNDS {
        let mut got: Vec<i64> = adds.iter().map(|a| a[round]).collect();
        got.sort_unstable();
        let want: Vec<i64> = (1..=CLIENTS as i64).collect();
        assert_eq!(got, want, "round {round}'s adds");
    }
    let check = TcpStore::new(TcpStoreOptions {
        timeout: Duration::from_secs(10),
        token: None,
        ..TcpStoreOptions::client(HOST, port)
    })
    .unwrap();
    for round in 0..ROUNDS {
        let key = format!("fanin-count-{round}");
        let v = check.get(&key, Duration::from_secs(5)).unwrap();
        assert_eq!(v, CLIENTS.to_string().as_bytes());
    }
    drop(check);
    let stats_deadline = Instant::now() + Duration::from_secs(5);
    while server.stats().connections > 0 {
        assert!(Instant::now() < stats_deadline, "{:?}", server.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("{CLIENTS} clients, {ROUNDS} barriers: {:?}", t0.elapsed());
}

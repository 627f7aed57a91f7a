//! The TCP store server end to end on arbitrary bytes: a fresh server on loopback, small
//! limits, one client that validates and then sends whatever the fuzzer made (in one or two
//! writes), closes its sending side and reads until the server closes. The server answers or
//! closes, never hangs, and once the client is gone it holds no connection, no read-ahead and
//! no wait, and keeps its stored bytes within the bound; a second client is still served.

use oxccl::store::tcp::wire::{self, QueryType};
use oxccl::store::tcp::{ServerLimits, ServerOptions, ServerStats};
use oxccl::store::TcpServer;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long the server may take to finish with a client before it counts as a hang.
const LIMIT: Duration = Duration::from_secs(5);

const LIMITS: ServerLimits = ServerLimits {
    max_connections: 8,
    max_query_bytes: 2048,
    max_buffered_bytes: 4096,
    max_stored_bytes: 4096,
    max_waited_bytes: 256,
};

fn connect(port: u16) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", port)).expect("connect to the fuzzed server");
    c.set_read_timeout(Some(LIMIT)).expect("timeout");
    c
}

/// Ports tried in turn for the servers (offsets into [`PORTS`]).
static NEXT_PORT: AtomicU32 = AtomicU32::new(0);
/// Loopback ports below Linux's ephemeral range (32768 up).
const PORTS: (u32, u32) = (20_000, 10_000);

/// A fresh server on a loopback port below the ephemeral range, else on any port. Every input
/// makes a connection that the client closes first, so its port stays in TIME_WAIT for a
/// minute: at a few hundred inputs a second they fill the ephemeral range, and a server bound
/// to port 0 then fails with "Address already in use" (seen 2 minutes into a 10-minute
/// campaign). A port below the range stays free (a listener reuses its address); a taken
/// one is skipped.
fn bind(opts: ServerOptions) -> TcpServer {
    let from = std::process::id() % PORTS.1;
    for _ in 0..64 {
        let i = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        let port = PORTS.0 + (from + i) % PORTS.1;
        let port = u16::try_from(port).unwrap_or(0);
        if let Ok(s) = TcpServer::bind_with("127.0.0.1", port, opts.clone()) {
            return s;
        }
    }
    TcpServer::bind_with("127.0.0.1", 0, opts).expect("bind")
}

fn validated() -> Vec<u8> {
    let mut q = Vec::new();
    wire::put_query(&mut q, QueryType::Validate);
    wire::put_u32(&mut q, wire::VALIDATION_MAGIC);
    q
}

fn settled(s: &TcpServer) -> ServerStats {
    let t0 = Instant::now();
    loop {
        let st = s.stats();
        if st.connections == 0 && st.buffered_bytes == 0 && st.waiting_connections == 0 {
            return st;
        }
        assert!(
            t0.elapsed() < LIMIT,
            "the server kept a gone client: {st:?}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// One fuzz input: the first byte says where to split the writes, the rest is sent.
pub fn fuzz(data: &[u8]) {
    let Some((&split, body)) = data.split_first() else {
        return;
    };
    let opts = ServerOptions {
        token: None,
        limits: LIMITS,
        // More than one loop: wake-ups cross loops through their mailboxes.
        event_loops: 2,
    };
    let s = bind(opts);
    let port = s.port();
    {
        let mut c = connect(port);
        let mut q = validated();
        q.extend_from_slice(body);
        let at = (usize::from(split) * q.len() / 256).min(q.len());
        // The server may close on a bad query before all is written: that is its right.
        let _ = c.write_all(&q[..at]).and_then(|()| c.write_all(&q[at..]));
        let _ = c.shutdown(Shutdown::Write);
        let t0 = Instant::now();
        let mut sink = [0u8; 4096];
        loop {
            match c.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    panic!("the server neither answered nor closed within {LIMIT:?}")
                }
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    panic!("the server neither answered nor closed within {LIMIT:?}")
                }
                Err(_) => break,
            }
            assert!(t0.elapsed() < LIMIT, "the server keeps talking");
        }
    }
    let st = settled(&s);
    assert!(st.stored_bytes <= LIMITS.max_stored_bytes, "{st:?}");
    assert_eq!(st.waited_bytes, 0, "{st:?}");
    // Still serving: a ping is answered.
    let mut c = connect(port);
    let mut q = validated();
    wire::put_query(&mut q, QueryType::Ping);
    wire::put_u32(&mut q, 0x0bad_cafe);
    c.write_all(&q).expect("write a ping");
    assert_eq!(wire::read_u32(&mut c).expect("pong"), 0x0bad_cafe);
}

//! The standalone `oxccl store` process (a TCP store server until killed) against the library's
//! TCP store client: it serves clients, and killing it fails a blocked get within the timeout.
//! Loopback and ephemeral ports only.

use oxccl::store::{Store, TcpStore, TcpStoreOptions};
use oxccl::Error;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const HOST: &str = "127.0.0.1";

fn opts(port: u16, timeout: Duration) -> TcpStoreOptions {
    TcpStoreOptions {
        timeout,
        ..TcpStoreOptions::client(HOST, port)
    }
}

fn client(port: u16) -> TcpStore {
    TcpStore::new(opts(port, Duration::from_secs(5))).expect("client store")
}

/// `oxccl store --port 0` as a child process, and the port it printed.
fn standalone() -> (Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(["store", "--port", "0", "--host", HOST])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn oxccl store");
    let mut line = String::new();
    let out = child.stdout.take().expect("stdout");
    BufReader::new(out)
        .read_line(&mut line)
        .expect("address line");
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (child, port)
}

#[test]
fn a_killed_store_process_fails_a_blocked_get_within_the_timeout() {
    let (mut child, port) = standalone();
    let timeout = Duration::from_secs(3);
    let c = TcpStore::new(opts(port, timeout)).unwrap();
    c.set("alive", b"1").unwrap();
    let getter = thread::spawn(move || {
        let start = Instant::now();
        (c.get("never", timeout), start.elapsed())
    });
    thread::sleep(Duration::from_millis(100));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let (r, took) = getter.join().unwrap();
    let e = r.unwrap_err();
    assert!(matches!(e, Error::Remote { .. }), "{e}");
    assert!(took < timeout + Duration::from_millis(500), "{took:?}");
}

#[test]
fn the_standalone_store_serves_clients() {
    let (mut child, port) = standalone();
    let a = client(port);
    let b = client(port);
    a.set("k", b"from a").unwrap();
    assert_eq!(b.get("k", Duration::from_secs(1)).unwrap(), b"from a");
    assert_eq!(b.add("n", 3).unwrap(), 3);
    assert_eq!(a.add("n", 4).unwrap(), 7);
    child.kill().unwrap();
    child.wait().unwrap();
}

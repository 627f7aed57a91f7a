//! The store handshake of `examples/torch_share.rs` against the real PyTorch trainer
//! (`examples/torch_share/trainer.py --dry-store`), without a GPU: the trainer hosts its
//! `TCPStore` and sets the NCCL unique id; the example's own handshake code
//! (`examples/torch_share/handshake.rs`) reads it through oxccl's `TcpStore` and answers, and
//! the trainer checks the id came through unchanged. Skipped with a message without the torch
//! venv (`scripts/torch-env.sh`), as the other interop tests.

#[path = "../examples/torch_share/handshake.rs"]
mod handshake;
mod torch_env;

use oxccl::store::Store;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// The trainer in dry-store mode on a free port; returns it and the port it printed (the
/// caller waits for it, in `finish`).
#[allow(clippy::zombie_processes)]
fn trainer(py: &PathBuf) -> (Child, BufReader<std::process::ChildStdout>, u16) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/torch_share/trainer.py");
    let mut child = Command::new(py)
        .args(["-u", "-W", "ignore"])
        .arg(script)
        .args(["--dry-store", "--port", "0", "--timeout", "60"])
        .args(["--steps", "3", "--elems", "4096"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the trainer");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let status = child.wait();
            panic!("the trainer exited before hosting its store ({status:?})");
        }
        if let Some(addr) = line.trim().strip_prefix("TCPStore on ") {
            let port = addr.rsplit_once(':').unwrap().1.parse().unwrap();
            return (child, out, port);
        }
    }
}

fn finish(mut child: Child, mut out: BufReader<std::process::ChildStdout>) -> (i32, String) {
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    (code, rest)
}

#[test]
fn the_id_travels_through_torchs_tcpstore_both_ways() {
    let Some(py) = torch_env::python() else {
        return;
    };
    let (child, out, port) = trainer(&py);
    let store = handshake::connect(&format!("127.0.0.1:{port}"), LIMIT).unwrap();
    let shared = handshake::read(&store, LIMIT).unwrap();
    assert_eq!((shared.world, shared.steps, shared.elems), (2, 3, 4096));
    assert!(
        shared.nccl_version.split('.').count() == 3,
        "{:?}",
        shared.nccl_version
    );
    // The reply the real server gives in --dry-store mode: the id's bytes, echoed.
    let echo = format!("dry-ok id={}", handshake::hex(shared.id.as_bytes()));
    store.set(handshake::KEY_SERVER, echo.as_bytes()).unwrap();
    let (code, rest) = finish(child, out);
    assert_eq!(code, 0, "trainer output:\n{rest}");
    assert!(
        rest.contains("RESULT torch_share trainer: OK (dry-store"),
        "{rest}"
    );
}

#[test]
fn a_server_that_gives_up_is_reported_by_the_trainer() {
    let Some(py) = torch_env::python() else {
        return;
    };
    let (child, out, port) = trainer(&py);
    let store = handshake::connect(&format!("127.0.0.1:{port}"), LIMIT).unwrap();
    handshake::read(&store, LIMIT).unwrap();
    store
        .set(handshake::KEY_SERVER, b"fail: no CUDA driver")
        .unwrap();
    let (code, rest) = finish(child, out);
    assert_eq!(code, 1, "trainer output:\n{rest}");
    assert!(rest.contains("RESULT torch_share trainer: FAIL"), "{rest}");
    assert!(rest.contains("no CUDA driver"), "{rest}");
}

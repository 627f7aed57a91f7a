//! The TCP store against the real PyTorch, both ways: oxccl's client on torch's
//! `TCPStore(is_master=True)` server (the libuv one and the legacy one, when this torch has
//! both), and torch clients (`TCPStore(host, port, is_master=False)`) on oxccl's server.
//!
//! The interpreter comes from `OXCCL_TORCH_PYTHON` or `.cache/torch-venv/bin/python` (made by
//! `scripts/torch-env.sh`). Without one the tests say so and pass, except under CI (`CI` set),
//! where a missing torch is a failure.

use oxccl::store::{Store, TcpServer, TcpStore, TcpStoreOptions};
use oxccl::Error;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

mod torch_env;

use torch_env::python;

const HOST: &str = "127.0.0.1";

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(name)
}

fn spawn_python(py: &PathBuf, args: &[&str]) -> Child {
    Command::new(py)
        .arg("-W")
        .arg("ignore")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn python")
}

fn line(out: &mut BufReader<ChildStdout>) -> String {
    let mut s = String::new();
    out.read_line(&mut s).expect("read from python");
    s.trim().to_string()
}

/// A torch server in a child process; `None` when this torch lacks the backend.
struct TorchServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    port: u16,
}

impl TorchServer {
    fn start(py: &PathBuf, libuv: bool) -> Option<TorchServer> {
        let flag = if libuv { "1" } else { "0" };
        let mut child = spawn_python(py, &[script("torch_server.py").to_str().unwrap(), flag]);
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let first = line(&mut stdout);
        if first.starts_with("unavailable") {
            eprintln!("torch server with use_libuv={libuv}: {first}; not tested");
            let _ = child.wait();
            return None;
        }
        let mut parts = first.split_whitespace();
        let port = parts.next().and_then(|p| p.parse().ok());
        let port = port.unwrap_or_else(|| panic!("torch server printed {first:?}"));
        assert_eq!(parts.next(), Some(flag), "torch picked another backend");
        Some(TorchServer {
            child,
            stdin,
            stdout,
            port,
        })
    }

    fn say(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").expect("write to python");
        self.stdin.flush().expect("flush to python");
    }
}

impl Drop for TorchServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// oxccl's client through every operation on a torch server, then torch checks what it set.
fn oxccl_client_on_torch_server(py: &PathBuf, libuv: bool) -> bool {
    let Some(mut torch) = TorchServer::start(py, libuv) else {
        return false;
    };
    let opts = TcpStoreOptions {
        timeout: Duration::from_secs(10),
        ..TcpStoreOptions::client(HOST, torch.port)
    };
    let s = TcpStore::new(opts).expect("connect to torch's server");
    let t = Duration::from_secs(2);

    assert_eq!(s.get("from_py", t).unwrap(), b"py-value");
    s.set("from_rust", b"rust-value").unwrap();
    assert_eq!(s.get("from_rust", t).unwrap(), b"rust-value");
    assert_eq!(s.add("counter", 10).unwrap(), 10);
    assert_eq!(s.add("counter", -3).unwrap(), 7);
    assert_eq!(s.compare_set("cas", b"", b"a").unwrap(), b"a");
    assert_eq!(s.compare_set("cas", b"a", b"b").unwrap(), b"b");
    assert_eq!(s.compare_set("cas", b"zz", b"c").unwrap(), b"b");
    assert_eq!(s.compare_set("nokey", b"exp", b"d").unwrap(), b"exp");
    assert!(s.check(&["from_py", "from_rust"]).unwrap());
    assert!(!s.check(&["from_py", "nope"]).unwrap());
    s.wait(&["from_py", "counter"], t).unwrap();

    // A get that runs out is cancelled on the wire; the connection stays in step.
    let start = Instant::now();
    let e = s.get("never", Duration::from_millis(200)).unwrap_err();
    assert!(
        matches!(&e, Error::Timeout { what, after_ms: 200 } if what.contains("never")),
        "{e}"
    );
    assert!(start.elapsed() < Duration::from_secs(2));

    assert!(s.delete("to_delete").unwrap());
    assert!(!s.delete("to_delete").unwrap());
    s.append("ap", b"x").unwrap();
    s.append("ap", b"y").unwrap();
    s.multi_set(&[("m1", b"one"), ("m2", b"two")]).unwrap();
    assert_eq!(
        s.multi_get(&["m1", "m2"], t).unwrap(),
        [b"one".to_vec(), b"two".to_vec()]
    );
    // from_py, from_rust, counter, cas, ap, m1, m2
    assert_eq!(s.num_keys().unwrap(), 7);

    // A blocking get released by a torch set.
    let late = thread::scope(|sc| {
        let g = sc.spawn(|| s.get("py_late", Duration::from_secs(10)));
        thread::sleep(Duration::from_millis(50));
        torch.say("late");
        g.join().unwrap()
    });
    assert_eq!(late.unwrap(), b"late-value");

    torch.say("done");
    assert_eq!(
        line(&mut torch.stdout),
        "ok",
        "torch's checks of what oxccl set"
    );
    assert_eq!(
        s.get("counter", t).unwrap(),
        b"8",
        "torch's add seen by oxccl"
    );
    true
}

#[test]
fn oxccl_client_on_torch_libuv_server() {
    let Some(py) = python() else { return };
    assert!(
        oxccl_client_on_torch_server(&py, true),
        "torch's default (libuv) server must be available"
    );
}

#[test]
fn oxccl_client_on_torch_legacy_server() {
    let Some(py) = python() else { return };
    // Older and newer torch may lack this backend: then it says so and there is nothing to test.
    oxccl_client_on_torch_server(&py, false);
}

#[test]
fn torch_clients_on_oxccl_server() {
    let Some(py) = python() else { return };
    let server = TcpServer::bind(HOST, 0).unwrap();
    let opts = TcpStoreOptions {
        timeout: Duration::from_secs(20),
        ..TcpStoreOptions::client(HOST, server.port())
    };
    let s = TcpStore::new(opts).unwrap();
    s.set("from_rust", b"hello").unwrap();

    let port = server.port().to_string();
    let mut child = spawn_python(&py, &[script("torch_client.py").to_str().unwrap(), &port]);
    drop(child.stdin.take());

    // A Rust get blocked until torch sets the key.
    let start = Instant::now();
    assert_eq!(s.get("py_ready", Duration::from_secs(20)).unwrap(), b"1");
    assert!(start.elapsed() > Duration::from_millis(10));
    // Torch's wait on "rust_release" is released by this set.
    thread::sleep(Duration::from_millis(200));
    s.set("rust_release", b"go").unwrap();

    let out = child.wait_with_output().expect("python finished");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "torch client failed: {stdout}");
    assert_eq!(stdout.trim(), "ok");

    // What torch set, read by oxccl.
    let t = Duration::from_secs(1);
    assert_eq!(s.get("py_key", t).unwrap(), b"py_value");
    assert_eq!(s.add("py_counter", 0).unwrap(), 7);
    assert_eq!(s.get("py_cas", t).unwrap(), b"second");
    assert_eq!(s.get("py_append", t).unwrap(), b"abcd");
    assert_eq!(
        s.multi_get(&["py_m1", "py_m2"], t).unwrap(),
        [b"v1".to_vec(), b"v2".to_vec()]
    );
    assert!(!s.check(&["py_tmp", "py_absent"]).unwrap());
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind((HOST, 0)).unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn wait_for_workers_counts_across_torch_and_oxccl() {
    let Some(py) = python() else { return };
    // A torch master for 3 workers blocks in its constructor until two oxccl clients joined
    // (they count themselves on torch's own `init/` key).
    let port = free_port();
    let master = format!(
        "import datetime\n\
import torch.distributed as d\n\
s = d.TCPStore('127.0.0.1', {port}, world_size=3, is_master=True,\n\
               timeout=datetime.timedelta(seconds=20))\n\
print('joined', flush=True)\n"
    );
    let mut child = Command::new(&py)
        .args(["-W", "ignore", "-c", &master])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || {
                TcpStore::new(TcpStoreOptions {
                    world_size: Some(3),
                    timeout: Duration::from_secs(20),
                    ..TcpStoreOptions::client(HOST, port)
                })
            })
        })
        .collect();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    assert_eq!(line(&mut stdout), "joined");
    for w in workers {
        w.join().unwrap().unwrap();
    }
    let _ = child.wait();

    // And the other way: an oxccl server store for 3 waits for two torch workers.
    let port = free_port();
    let worker = format!(
        "import datetime\n\
import torch.distributed as d\n\
s = d.TCPStore('127.0.0.1', {port}, world_size=3, is_master=False,\n\
               timeout=datetime.timedelta(seconds=20))\n\
s.wait(['done'])\n"
    );
    let kids: Vec<Child> = (0..2)
        .map(|_| {
            Command::new(&py)
                .args(["-W", "ignore", "-c", &worker])
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let store = TcpStore::new(TcpStoreOptions {
        world_size: Some(3),
        timeout: Duration::from_secs(20),
        ..TcpStoreOptions::server(HOST, port)
    })
    .expect("two torch workers joined");
    store.set("done", b"1").unwrap();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
}

//! The TCP store against the real PyTorch, both ways: oxccl's client on torch's
//! `TCPStore(is_master=True)` server (the libuv one and the legacy one, when this torch has
//! both), and torch clients (`TCPStore(host, port, is_master=False)`) on oxccl's server.
//!
//! The interpreter comes from `OXCCL_TORCH_PYTHON` or `.cache/torch-venv/bin/python` (made by
//! `scripts/torch-env.sh`). Without one the tests say so and pass, except under CI (`CI` set),
//! where a missing torch is a failure. The legacy server's test is skipped, saying why, only
//! when the script sees that this torch lacks that backend; any other failure to start a torch
//! server fails the test with the script's stderr.

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

/// A torch server in a child process.
struct TorchServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    port: u16,
}

/// What the torch server's stderr said so far (drained on a thread, so the child never blocks
/// on a full pipe).
fn drain(mut from: std::process::ChildStderr) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut from, &mut s);
        s
    })
}

impl TorchServer {
    /// The server with `use_libuv=libuv`; `Err` with torch's reason only when this torch is
    /// seen to lack that backend (the script's `unavailable:` line). Any other failure to
    /// start fails the test with the script's output and stderr.
    fn start(py: &PathBuf, libuv: bool) -> Result<TorchServer, String> {
        let flag = if libuv { "1" } else { "0" };
        let mut child = Command::new(py)
            .args(["-W", "ignore"])
            .arg(script("torch_server.py"))
            .arg(flag)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn python");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let stderr = drain(child.stderr.take().unwrap());
        let first = line(&mut stdout);
        let port = {
            let mut parts = first.split_whitespace();
            match (parts.next().map(str::parse::<u16>), parts.next()) {
                (Some(Ok(port)), Some(f)) if f == flag => Some(port),
                _ => None,
            }
        };
        if let Some(port) = port {
            // Its stderr is drained for as long as it runs; nothing waits for it.
            drop(stderr);
            return Ok(TorchServer {
                child,
                stdin,
                stdout,
                port,
            });
        }
        let status = child.wait().expect("python exits");
        let stderr = stderr.join().unwrap_or_default();
        match first.strip_prefix("unavailable: ") {
            Some(why) if status.code() == Some(3) => Err(why.to_string()),
            _ => panic!(
                "torch server with use_libuv={libuv} did not start ({status}): printed \
                 {first:?}; stderr:\n{stderr}"
            ),
        }
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
fn oxccl_client_on_torch_server(mut torch: TorchServer) {
    let opts = TcpStoreOptions {
        timeout: Duration::from_secs(10),
        ..TcpStoreOptions::client(HOST, torch.port)
    };
    let s = TcpStore::new(opts).expect("connect to torch's server");
    let t = Duration::from_secs(2);
    // A watched key: from here on, every call below cancels the idle connection's wait on
    // it in front of its own query, and the connection waits again once the call is done.
    assert!(!s.check_watched("py_signal").unwrap());

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

    // torch's server answers the wait when torch sets the watched key.
    assert!(!s.check_watched("py_signal").unwrap());
    torch.say("signal");
    let start = Instant::now();
    while !s.check_watched("py_signal").unwrap() {
        assert!(start.elapsed() < Duration::from_secs(5), "signal not seen");
        thread::sleep(Duration::from_millis(5));
    }

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
}

#[test]
fn oxccl_client_on_torch_libuv_server() {
    let Some(py) = python() else { return };
    let torch = TorchServer::start(&py, true)
        .unwrap_or_else(|why| panic!("torch's default (libuv) server must be available: {why}"));
    oxccl_client_on_torch_server(torch);
    println!("tested: oxccl's client on torch's libuv server");
}

#[test]
fn oxccl_client_on_torch_legacy_server() {
    let Some(py) = python() else { return };
    // Older and newer torch may lack this backend: only then is there nothing to test.
    match TorchServer::start(&py, false) {
        Ok(torch) => {
            oxccl_client_on_torch_server(torch);
            println!("tested: oxccl's client on torch's legacy server");
        }
        Err(why) => println!("skipped: {why}"),
    }
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

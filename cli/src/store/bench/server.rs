//! The servers under test, each in a process of its own so that its memory and CPU are its
//! own: oxccl's (this tool again, as `oxccl store --port 0`) and PyTorch's libuv server (a
//! few lines of Python). Both print their port once they listen.

use super::error::BenchError;
use super::failure::{self, Phase, Stop, Subject};
use super::proc_stat::mono_ns;
use super::procs::{first_line, Owned, Tail};
use oxccl::core::text::Escaped;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Which server a column measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// `oxccl store`, the event loop of `oxccl::store::TcpServer`.
    Oxccl,
    /// `torch.distributed.TCPStore(is_master=True, use_libuv=True)`.
    Torch,
}

impl ServerKind {
    /// The column's name.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Oxccl => "oxccl",
            ServerKind::Torch => "torch",
        }
    }
}

/// PyTorch's server, as a job's rank 0 starts it, but with the descriptor room a large job
/// needs (Python does not raise the soft limit itself). `argv[1]` is its timeout in seconds.
const TORCH_SERVER: &str = r#"
import resource, sys, time
from datetime import timedelta
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True,
                      wait_for_workers=False, timeout=timedelta(seconds=int(sys.argv[1])))
print(store.port, flush=True)
while True:
    time.sleep(3600)
"#;

/// Whether `python` imports torch's TCPStore; the error says how to get one when not.
pub fn check_torch(python: &Path) -> Result<(), BenchError> {
    let shown = Escaped(&python.to_string_lossy()).to_string();
    let out = Command::new(python)
        .args(["-c", "import torch.distributed as d; d.TCPStore"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| BenchError::NoTorch {
            python: shown.clone(),
            why: e.to_string(),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
    Err(BenchError::NoTorch {
        python: shown,
        why: Escaped(last.unwrap_or("no message")).to_string(),
    })
}

/// The Python the torch server runs under when `--python` is not given.
pub fn default_python() -> PathBuf {
    match std::env::var_os("OXCCL_TORCH_VENV") {
        Some(v) if !v.is_empty() => PathBuf::from(v).join("bin/python"),
        _ => PathBuf::from(".cache/torch-venv/bin/python"),
    }
}

/// A server process that listens on `port` of 127.0.0.1.
pub struct Server {
    /// The column's server.
    pub kind: ServerKind,
    /// The process (killed when dropped).
    pub proc: Owned,
    /// The port it listens on.
    pub port: u16,
    /// Its stderr's last lines (the lines themselves go on to this process's stderr).
    pub stderr: Tail,
    /// TcpExt ListenOverflows and ListenDrops before it started.
    pub listen0: Option<(u64, u64)>,
}

impl Server {
    /// The measured failure of a phase that `stop` ended; `lookup_of` is the address that
    /// phase's clients connected from (`None`: none had connected).
    pub fn failed(&mut self, stop: Stop, lookup_of: Option<Ipv4Addr>) -> BenchError {
        let subject = Subject {
            server: self.kind.name(),
            proc: &mut self.proc,
            stderr: &self.stderr,
            port: Some(self.port),
            listen0: self.listen0,
        };
        BenchError::Failed(Box::new(failure::observe(subject, stop, lookup_of)))
    }
}

/// Starts a `kind` server and waits (at most `timeout`) for its port.
pub fn start(kind: ServerKind, python: &Path, timeout: Duration) -> Result<Server, BenchError> {
    let mut cmd = match kind {
        ServerKind::Oxccl => {
            let exe = std::env::current_exe()
                .map_err(|e| BenchError::Start(format!("cannot find this tool's binary: {e}")))?;
            let mut c = Command::new(exe);
            c.args(["store", "--port", "0", "--host", "127.0.0.1"]);
            // The defaults are measured: no token (the light clients present none), the
            // connection limit from the descriptor limit.
            c.env_remove("OXCCL_STORE_TOKEN");
            c.env_remove("OXCCL_STORE_MAX_CONNECTIONS");
            c
        }
        ServerKind::Torch => {
            let mut c = Command::new(python);
            c.args(["-c", TORCH_SERVER, &timeout.as_secs().max(1).to_string()]);
            // Python warnings about torch's optional modules (numpy) are not the bench's.
            c.env("PYTHONWARNINGS", "ignore");
            c
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let what = format!("the {} server", kind.name());
    let listen0 = failure::listen_counters();
    let began = mono_ns();
    let mut proc = Owned::spawn(&mut cmd, what).map_err(BenchError::Start)?;
    let stderr = proc
        .child()
        .stderr
        .take()
        .map(Tail::forward)
        .unwrap_or_default();
    let Some(out) = proc.child().stdout.take() else {
        return Err(BenchError::Start(format!("{} has no stdout", proc.what)));
    };
    let failed = |proc: &mut Owned, what: String| {
        let subject = Subject {
            server: kind.name(),
            proc,
            stderr: &stderr,
            port: None,
            listen0,
        };
        let stop = Stop::new(Phase::Start, began, what);
        BenchError::Failed(Box::new(failure::observe(subject, stop, None)))
    };
    let Some(line) = first_line(out, timeout) else {
        let what = format!("it printed no port within {} s", timeout.as_secs());
        return Err(failed(&mut proc, what));
    };
    // oxccl prints `host:port`, the Python script the port alone.
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p != 0);
    match port {
        Some(port) => Ok(Server {
            kind,
            proc,
            port,
            stderr,
            listen0,
        }),
        None => {
            let what = format!("it printed {} instead of its port", Escaped(line.trim()));
            Err(failed(&mut proc, what))
        }
    }
}

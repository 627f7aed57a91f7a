//! The options of `oxccl store bench` and the plan they make: which servers, how the ranks
//! are spread over client processes, and whether this machine's descriptor limit holds them.

use super::error::BenchError;
use super::server::{self, ServerKind};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Descriptors a server process keeps for its own files beyond its connections (Python with
/// torch loaded holds more than this tool does).
const SERVER_RESERVE: usize = 512;
/// Descriptors a client process keeps beyond its sockets.
const CLIENT_RESERVE: usize = 64;
/// The most sockets a client process holds unless `--client-procs` says otherwise.
const SOCKETS_PER_CLIENT: usize = 8000;
/// Client processes bind 127.0.0.2, 127.0.0.3, ...: one source address each, so that each
/// has the whole ephemeral port range to itself.
pub const MAX_CLIENT_PROCS: usize = 253;

/// Which servers to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Servers {
    /// oxccl's server (`oxccl store`).
    Oxccl,
    /// PyTorch's libuv TCPStore server.
    Torch,
    /// Both, oxccl's first.
    Both,
}

/// Options of `oxccl store bench`.
#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  oxccl store bench                                 4096 ranks, 10 barriers, oxccl's server
  oxccl store bench --ranks 16384 --server both     oxccl's server and PyTorch's, side by side
  oxccl store bench --server torch --python ~/venv/bin/python --json

Every server and client process raises its soft descriptor limit to the hard one; a server
must hold a descriptor per rank, so N is bounded by the hard limit (less a reserve).

A failed column says what was measured when it failed: the phase and how far into it, the
ranks that joined, the errors the ranks saw by kind (refused, reset, closed, timed-out, ...)
and when the first came, the server process's state, open descriptors, RLIMIT_NOFILE, accept
queue and last lines of stderr, net.core.somaxconn and the machine's TcpExt listen overflow
and drop counts, and the times of a burst of reverse lookups of the clients' address.")]
pub struct BenchArgs {
    /// Simulated ranks: each one connection that joins, meets at every barrier, and leaves.
    #[arg(long, default_value_t = 4096)]
    pub ranks: usize,
    /// Barriers (rounds of add, set, wait).
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// Which servers to measure.
    #[arg(long, value_enum, default_value_t = Servers::Oxccl)]
    pub server: Servers,
    /// Client processes driving the ranks (default: enough that each holds at most 8,000).
    #[arg(long)]
    pub client_procs: Option<usize>,
    /// Threads of oxccl's store client doing set/get of a small value for about 2 s per
    /// server, for ops/s (0 skips it).
    #[arg(long, default_value_t = 16)]
    pub ops_clients: usize,
    /// Python with torch for PyTorch's server (default: $OXCCL_TORCH_VENV/bin/python, else
    /// .cache/torch-venv/bin/python, which `bash scripts/torch-env.sh` creates).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// The bound on each phase (server start, join, the rounds, leave), in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Run even where the descriptor limit cannot hold the connections (to see how it fails).
    #[arg(long)]
    pub force: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What a run does, checked against this machine.
#[derive(Debug)]
pub struct Plan {
    /// Simulated ranks.
    pub ranks: usize,
    /// Barriers.
    pub rounds: usize,
    /// The servers, in order.
    pub servers: Vec<ServerKind>,
    /// Ranks per client process (as even as can be).
    pub shares: Vec<usize>,
    /// Threads of the ops/s measure (0: none).
    pub ops_clients: usize,
    /// The Python of the torch server.
    pub python: PathBuf,
    /// The bound on each phase.
    pub timeout: Duration,
    /// This process's descriptor limit, as its children get it.
    pub fd_limit: usize,
}

impl Plan {
    /// The plan for `a`, or why it cannot run here.
    pub fn new(a: &BenchArgs) -> Result<Plan, BenchError> {
        let usage = |m: String| Err(BenchError::Usage(m));
        if a.ranks == 0 || a.rounds == 0 {
            return usage("--ranks and --rounds must be at least 1".into());
        }
        if a.timeout == 0 {
            return usage("--timeout must be at least 1 s".into());
        }
        let procs = a
            .client_procs
            .unwrap_or_else(|| a.ranks.div_ceil(SOCKETS_PER_CLIENT));
        if procs == 0 || procs > a.ranks.min(MAX_CLIENT_PROCS) {
            return usage(format!(
                "--client-procs must be 1 to {} (each rank needs a process, and each process \
                 a loopback address of its own), got {procs}",
                a.ranks.min(MAX_CLIENT_PROCS)
            ));
        }
        let fd_limit = oxccl::store::tcp::descriptor_limit().unwrap_or(1024);
        let shares: Vec<usize> = (0..procs)
            .map(|i| a.ranks / procs + usize::from(i < a.ranks % procs))
            .collect();
        if !a.force {
            let fits = fd_limit.saturating_sub(SERVER_RESERVE);
            if a.ranks > fits {
                return Err(BenchError::TooManyRanks {
                    holder: "the server process",
                    wanted: a.ranks,
                    fits,
                    fd_limit,
                });
            }
            let fits = fd_limit.saturating_sub(CLIENT_RESERVE);
            if shares[0] > fits {
                return Err(BenchError::TooManyRanks {
                    holder: "each client process",
                    wanted: shares[0],
                    fits,
                    fd_limit,
                });
            }
        }
        let servers = match a.server {
            Servers::Oxccl => vec![ServerKind::Oxccl],
            Servers::Torch => vec![ServerKind::Torch],
            Servers::Both => vec![ServerKind::Oxccl, ServerKind::Torch],
        };
        let python = a.python.clone().unwrap_or_else(server::default_python);
        if servers.contains(&ServerKind::Torch) {
            server::check_torch(&python)?;
        }
        Ok(Plan {
            ranks: a.ranks,
            rounds: a.rounds,
            servers,
            shares,
            ops_clients: a.ops_clients,
            python,
            timeout: Duration::from_secs(a.timeout),
            fd_limit,
        })
    }
}

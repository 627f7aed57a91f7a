//! Why a bench run stops or a server's column fails, each with the exit code it earns.

use super::failure::Failure;
use crate::exit;
use std::fmt;

/// What went wrong in `oxccl store bench`.
#[derive(Debug)]
pub enum BenchError {
    /// More connections than one process may hold descriptors for (the hard limit cannot be
    /// raised); `--force` runs anyway.
    TooManyRanks {
        /// What would hold them: "the server process" or "each client process".
        holder: &'static str,
        /// The connections it would hold.
        wanted: usize,
        /// The most it can hold here.
        fits: usize,
        /// The process's descriptor limit.
        fd_limit: usize,
    },
    /// An option out of range, said in words.
    Usage(String),
    /// The torch server was asked for and the Python given cannot import torch.
    NoTorch {
        /// The interpreter tried.
        python: String,
        /// What it said (or why it could not run).
        why: String,
    },
    /// A process could not be started or did not come up.
    Start(String),
    /// A server or client process misbehaved or ended early.
    Run(String),
    /// A server's column failed: what was measured then.
    Failed(Box<Failure>),
    /// The run finished but its counts are wrong.
    Wrong(String),
}

impl BenchError {
    /// The tool's exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            BenchError::Usage(_) => exit::USAGE,
            BenchError::TooManyRanks { .. } | BenchError::NoTorch { .. } => exit::ENV,
            BenchError::Start(_)
            | BenchError::Run(_)
            | BenchError::Failed(_)
            | BenchError::Wrong(_) => exit::FAILED,
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::TooManyRanks {
                holder,
                wanted,
                fits,
                fd_limit,
            } => write!(
                f,
                "{holder} would hold {wanted} connections, and at most {fits} fit its \
                 descriptor limit of {fd_limit} (the hard RLIMIT_NOFILE, less a reserve for its \
                 own files); use fewer ranks{}, or --force to try anyway",
                if *holder == "the server process" {
                    ""
                } else {
                    " or more --client-procs"
                }
            ),
            BenchError::Usage(m) => f.write_str(m),
            BenchError::NoTorch { python, why } => write!(
                f,
                "the torch server needs a Python with torch, and {python} cannot import \
                 torch.distributed ({why}); run `bash scripts/torch-env.sh` to create \
                 .cache/torch-venv, or point --python or OXCCL_TORCH_VENV at one"
            ),
            BenchError::Failed(failure) => f.write_str(&failure.render()),
            BenchError::Start(m) | BenchError::Run(m) | BenchError::Wrong(m) => f.write_str(m),
        }
    }
}

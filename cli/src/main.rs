//! `oxccl`: the command-line tool, the project's main job. `info` says which NCCL and GPUs
//! this machine has; `perf` measures the collectives as nccl-tests does, through the raw
//! function pointer, `Comm` and `ProcessGroup` side by side; `tune` writes the buffer-mode
//! table the process group reads; `ping-pong` measures one-sided latency; `check` verifies
//! every operation against a host reference; `store` serves a TCP store; `trace` reads
//! flight-recorder dumps. Without a GPU or NCCL, the measuring commands and `check` run on
//! the mock world and say so.

mod check;
mod elem;
mod exit;
mod expect;
mod gpus;
mod info;
mod nvml;
mod ops;
mod output;
mod perf;
mod ping_pong;
mod shown;
mod store;
mod trace;
mod tune;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Examples:
  oxccl info                          the NCCL found, its features, GPUs and links, launcher
  oxccl perf                          all_reduce 8 B..1 MiB (mock world without a GPU)
  oxccl perf all -b 8 -e 1G -f 2 -g 2 --layer all --svg perf.svg
  oxccl perf all_gather -d bfloat16 -n 50 -w 10 -c 1 --json
  torchrun --nproc-per-node 2 --no-python oxccl perf all_reduce   one process per GPU
  oxccl tune all -g 2 --out oxccl.tune  the buffer-mode table to give as OXCCL_TUNE_FILE
  oxccl ping-pong -g 2                one-sided latency (put with a signal) beside send/recv
  oxccl check                         every op x type x reduce op, exit 1 on a mismatch
  oxccl store --port 29500            a TCP store server for a job's rendezvous
  oxccl store bench --server both     that server and PyTorch's under fan-in from 4096 ranks

Exit codes: 0 ok, 1 wrong results or a failed check, 2 usage, 3 environment (no library,
no GPU for a command that needs one). The library is found in this order: --library,
OXCCL_NCCL_LIBRARY, libnccl.so.2 and libnccl.so through the system search, then
nvidia/nccl/lib/libnccl.so.2 in visible Python environments (pip install nvidia-nccl-cu12).";

/// NCCL for Rust: what this machine has, how fast the collectives run, whether they are right.
#[derive(Parser)]
#[command(name = "oxccl", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The NCCL library (and where it was looked for), its features, the GPUs and their links,
    /// the NCCL_*/OXCCL_* variables in effect and the launcher recognised.
    Info(info::InfoArgs),
    /// nccl-tests' sweep: time, algbw, busbw and #wrong per size, per layer (raw, comm, pg).
    Perf(perf::PerfArgs),
    /// The buffer-mode table for OXCCL_TUNE_FILE: each mode timed per collective and size.
    ///
    /// Every tuned collective at every size in each buffer mode (plain, registered, window),
    /// rounds alternating, and oxccl's kernels beside them; the fastest per collective and
    /// size is written as a tune table, to give every rank as OXCCL_TUNE_FILE. A thread per
    /// local GPU, a process per GPU under torchrun, srun or mpirun (rank 0 writes), or the
    /// mock world.
    Tune(tune::TuneArgs),
    /// One-sided latency between 2 ranks: put with a signal, beside send/recv.
    ///
    /// Rank 0 puts each size into rank 1's window with a signal, rank 1 waits for it and puts
    /// it back (NCCL 2.29.2+, or the mock); beside it the same ping-pong with send/recv. Half
    /// the round trip is reported. Sizes 8 B to 1 MiB (to 16 KiB on NCCL unless
    /// NCCL_P2P_USE_CUDA_MEMCPY=1: larger puts need it where GDRCopy is absent) unless -b/-e
    /// say otherwise.
    PingPong(ping_pong::PingPongArgs),
    /// Every operation x data type x reduce op x placement against a host reference.
    Check(check::CheckArgs),
    /// A TCP store server (PyTorch's TCPStore protocol) until killed; prints its address.
    /// `store bench` measures such servers under fan-in.
    Store(store::StoreArgs),
    /// Flight-recorder traces.
    Trace(trace::TraceArgs),
}

fn main() -> ExitCode {
    // SAFETY: restores the default action of SIGPIPE before any thread starts, so that
    // `oxccl perf | head` ends quietly, as other command-line tools do, instead of panicking
    // in println! (Rust ignores SIGPIPE by default).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli: Cli = shown::parse_cli();
    match &cli.command {
        Command::Info(a) => info::run(a),
        Command::Perf(a) => perf::run(a),
        Command::Tune(a) => tune::run(a),
        Command::PingPong(a) => ping_pong::run(a),
        Command::Check(a) => check::run(a),
        Command::Store(a) => store::run(a),
        Command::Trace(a) => trace::run(a),
    }
}

//! `oxccl store`: a standalone TCP store server (`oxccl store --port P`, see [`serve`]) and
//! `oxccl store bench`, the fan-in benchmark of such servers (see [`bench`]).

mod bench;
mod serve;

use clap::{Args, Subcommand};
use std::process::ExitCode;

/// Options of `oxccl store`: the server's own, or one of its subcommands.
#[derive(Args)]
#[command(after_help = "Examples:
  oxccl store --port 29500            a store server on loopback, port 29500, until killed
  oxccl store --port 0                a free port: the address alone on stdout, for scripts
  OXCCL_STORE_TOKEN=secret oxccl store --port 29500 --host 0.0.0.0
                                      every interface, clients presenting the token only
  oxccl store bench --server both     this server and PyTorch's under fan-in from 4096 ranks")]
// A subcommand takes the place of the server's flags, so `--port` is required only without one.
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct StoreArgs {
    #[command(subcommand)]
    command: Option<StoreCommand>,
    #[command(flatten)]
    serve: serve::ServeArgs,
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Fan-in from N simulated ranks against oxccl's server, PyTorch's libuv server or both,
    /// each in a process of its own: join, barrier and leave times, memory, CPU, ops/s.
    Bench(bench::BenchArgs),
    /// One client process of `oxccl store bench` (started by it, not by people).
    #[command(hide = true)]
    BenchClient(bench::ClientArgs),
}

/// Runs `oxccl store` or its subcommand.
pub fn run(opts: &StoreArgs) -> ExitCode {
    match &opts.command {
        None => serve::run(&opts.serve),
        Some(StoreCommand::Bench(a)) => bench::run(a),
        Some(StoreCommand::BenchClient(a)) => bench::run_client(a),
    }
}

//! `oxccl`: the command-line tool. `info` today; `perf` and `check` are new variants of
//! [`Command`] with a module each.
//!
//! The arguments are parsed by hand rather than with clap: one command with two flags does not
//! need a parser crate yet (clap is the choice once `perf` and `check` bring many flags). Each
//! subcommand parses its own flags, so adding one touches only `Command` and its module.

mod info;
mod json;
mod store;

use std::process::ExitCode;

const USAGE: &str = "usage: oxccl <command> [options]

commands:
  info [--library PATH] [--json]   the NCCL library found, its version, load time, and every
                                   feature with why it is unavailable
  store --port P [--host H]        a TCP store server (PyTorch's TCPStore protocol) until
                                   killed; prints the bound address (port 0 picks one)
  help                             this text

The library is found in this order: --library, OXCCL_NCCL_LIBRARY, libnccl.so.2 and libnccl.so
through the system search, then nvidia/nccl/lib/libnccl.so.2 in visible Python environments.";

/// A subcommand with its parsed options.
enum Command {
    Info(info::Options),
    Store(store::Options),
    Help,
}

fn parse(args: &[String]) -> Result<Command, String> {
    match args.first().map(String::as_str) {
        None | Some("help" | "-h" | "--help") => Ok(Command::Help),
        Some("info") => info::Options::parse(&args[1..]).map(Command::Info),
        Some("store") => store::Options::parse(&args[1..]).map(Command::Store),
        Some(other) => Err(format!("unknown command `{other}`")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args) {
        Ok(Command::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Command::Info(opts)) => info::run(&opts),
        Ok(Command::Store(opts)) => store::run(&opts),
        Err(e) => {
            eprintln!("oxccl: {e}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

//! `oxccl store --port P`: a standalone TCP store server (PyTorch's TCPStore protocol) that
//! runs until killed, for jobs whose rendezvous should outlive any one rank.

use crate::exit;
use clap::Args;
use oxccl::store::TcpServer;
use std::io::Write;
use std::process::ExitCode;

/// Options of `oxccl store` without a subcommand.
#[derive(Args)]
pub struct ServeArgs {
    /// The port to listen on (0 picks a free one, printed on stdout).
    // An `Option` only so that a subcommand may go without it: clap requires it otherwise.
    #[arg(long, required = true)]
    port: Option<u16>,
    /// The interface to listen on: loopback by default (nothing is exposed unless asked);
    /// `--host 0.0.0.0` listens on every one, as PyTorch's server does, so ranks on other
    /// machines reach it through MASTER_ADDR. Set OXCCL_STORE_TOKEN to refuse clients
    /// without that token.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
}

/// Runs the server until the process is killed; prints the bound address on one line.
pub fn run(opts: &ServeArgs) -> ExitCode {
    let Some(port) = opts.port else {
        eprintln!("oxccl store: --port is required (0 picks a free one)");
        return ExitCode::from(exit::USAGE);
    };
    let server = match TcpServer::bind(&opts.host, port) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("oxccl store: {e} (choose another --port, or 0 for a free one)");
            return ExitCode::from(exit::ENV);
        }
    };
    let mut out = std::io::stdout().lock();
    // The address alone, so scripts can read the port a `--port 0` server picked.
    if writeln!(out, "{}", server.local_addr())
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::from(exit::ENV);
    }
    drop(out);
    loop {
        // The server's threads do the work; this one only keeps the process alive.
        std::thread::park();
    }
}

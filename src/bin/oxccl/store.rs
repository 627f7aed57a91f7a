//! `oxccl store`: a standalone TCP store server (PyTorch's TCPStore protocol) that runs until
//! killed, for jobs whose rendezvous should outlive any one rank.

use oxccl::store::TcpServer;
use std::io::Write;
use std::process::ExitCode;

/// Options of `oxccl store`.
pub struct Options {
    host: String,
    port: Option<u16>,
}

impl Options {
    /// Parses the arguments after `store`.
    pub fn parse(args: &[String]) -> Result<Options, String> {
        // Every interface by default, as PyTorch's server listens: ranks on other machines
        // reach it through MASTER_ADDR.
        let mut opts = Options {
            host: "0.0.0.0".to_owned(),
            port: None,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let (flag, inline) = match a.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
                _ => (a.as_str(), None),
            };
            let mut value = |name: &str| match inline.clone().or_else(|| it.next().cloned()) {
                Some(v) => Ok(v),
                None => Err(format!("store: {name} needs a value")),
            };
            match flag {
                "--host" => opts.host = value("--host")?,
                "--port" => {
                    let v = value("--port")?;
                    let p = v
                        .parse::<u16>()
                        .map_err(|_| format!("store: --port wants 0..=65535, got `{v}`"))?;
                    opts.port = Some(p);
                }
                other => return Err(format!("store: unknown option `{other}`")),
            }
        }
        if opts.port.is_none() {
            return Err("store: --port is required (0 picks a free port)".to_owned());
        }
        Ok(opts)
    }
}

/// Runs the server until the process is killed; prints the bound address on one line.
pub fn run(opts: &Options) -> ExitCode {
    let server = match TcpServer::bind(&opts.host, opts.port.unwrap_or(0)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("oxccl store: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    // The address alone, so scripts can read the port a `--port 0` server picked.
    if writeln!(out, "{}", server.local_addr())
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    drop(out);
    loop {
        // The server's threads do the work; this one only keeps the process alive.
        std::thread::park();
    }
}

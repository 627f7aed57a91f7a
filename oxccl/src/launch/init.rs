//! [`InitMethod`]: c10d's `init_method` URLs (`env://`, `tcp://host:port`, `file:///path`).

use oxccl_core::text::Escaped;
use oxccl_core::{Error, Result};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// How the ranks find their rendezvous store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitMethod {
    /// `env://`: `MASTER_ADDR`/`MASTER_PORT` name the TCP store, the launcher the ranks.
    Env,
    /// `tcp://host:port`: the TCP store at that address (`tcp://[::1]:29500` for IPv6).
    Tcp {
        /// The store's host name or address (IPv6 without brackets).
        host: String,
        /// The store's port (1..=65535).
        port: u16,
    },
    /// `file:///path`: a [`crate::store::FileStore`] at that absolute path.
    File {
        /// The store's file.
        path: PathBuf,
    },
}

impl InitMethod {
    /// Parses an init-method URL. Errors name `init_method` and say what was wrong: an
    /// unknown scheme, a missing or bad port, a relative file path, anything after `env://`.
    pub fn parse(url: &str) -> Result<InitMethod> {
        let bad = |why: fmt::Arguments<'_>| {
            Error::invalid(
                "init_method",
                format_args!(
                    "env://, tcp://host:port or file:///path: {why}, got \"{}\"",
                    Escaped(url)
                ),
            )
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad(format_args!("no `scheme://`")));
        };
        match scheme {
            "env" if rest.is_empty() => Ok(InitMethod::Env),
            "env" => Err(bad(format_args!("nothing may follow env://"))),
            "tcp" => {
                let (host, port) =
                    split_host_port(rest).map_err(|why| bad(format_args!("{why}")))?;
                let port = match port.parse::<u16>() {
                    Ok(p) if p != 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
                    _ => return Err(bad(format_args!("a port in 1..=65535"))),
                };
                Ok(InitMethod::Tcp {
                    host: host.to_owned(),
                    port,
                })
            }
            "file" if rest.starts_with('/') => Ok(InitMethod::File {
                path: PathBuf::from(rest),
            }),
            "file" => Err(bad(format_args!(
                "an absolute path (three slashes: file:///tmp/store)"
            ))),
            _ => Err(bad(format_args!("unknown scheme `{}`", Escaped(scheme)))),
        }
    }
}

/// `host:port` or `[v6]:port`, each part non-empty.
fn split_host_port(s: &str) -> std::result::Result<(&str, &str), &'static str> {
    if s.contains(['/', '?', '#', ' ']) {
        return Err("a bare host:port (no path, query or spaces)");
    }
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("an IPv6 address closed by `]`")?;
        let port = after.strip_prefix(':').ok_or("a port after the address")?;
        (host, port)
    } else {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or("a port after the host (host:port)")?;
        if host.contains(':') {
            return Err("an IPv6 address in brackets ([::1]:port)");
        }
        (host, port)
    };
    if host.is_empty() {
        return Err("a host before the port");
    }
    if port.is_empty() {
        return Err("a port after the host (host:port)");
    }
    Ok((host, port))
}

impl FromStr for InitMethod {
    type Err = Error;
    fn from_str(s: &str) -> Result<InitMethod> {
        InitMethod::parse(s)
    }
}

impl fmt::Display for InitMethod {
    /// The URL form, which [`InitMethod::parse`] reads back: raw, so a message that shows it
    /// escapes it (`oxccl_core::text::Escaped`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InitMethod::Env => f.write_str("env://"),
            InitMethod::Tcp { host, port } if host.contains(':') => {
                write!(f, "tcp://[{host}]:{port}")
            }
            InitMethod::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
            InitMethod::File { path } => write!(f, "file://{}", path.display()),
        }
    }
}

//! A TCP store that speaks PyTorch's TCPStore wire protocol, both ways: oxccl's [`TcpStore`]
//! works against a torch `TCPStore(is_master=True)` server (libuv or not), and torch clients
//! work against oxccl's [`TcpServer`] (or a [`TcpStore`] with `is_server`).
//!
//! Keys are sent with PyTorch's `/` prefix, so a key `k` set by oxccl is `k` for torch's
//! `store.get("k")` too. The protocol itself is described in [`wire`].

mod acceptor;
mod client;
mod conn;
mod event_loop;
mod fd_limit;
mod limits;
mod server;
mod state;
pub mod wire;

pub use fd_limit::descriptor_limit;
pub use limits::{ServerLimits, ServerOptions, ServerStats};
pub use server::TcpServer;

use crate::store::Store;
use client::Client;
use limits::token_from_env;
use oxccl_core::text::Escaped;
use oxccl_core::{text, Error, Result};
use std::net::ToSocketAddrs;
use std::time::{Duration, Instant};

/// PyTorch's default store timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How to open a [`TcpStore`] (PyTorch's `TCPStoreOptions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpStoreOptions {
    /// The server's host name or address (clients connect there).
    pub host: String,
    /// The server's port; with `is_server`, 0 picks a free one (see [`TcpStore::port`]).
    pub port: u16,
    /// Whether this process hosts the server (rank 0's case).
    pub is_server: bool,
    /// How many clients make up the job, for `wait_for_workers`.
    pub world_size: Option<u32>,
    /// With `world_size`, whether [`TcpStore::new`] counts this client in and (on the
    /// server) waits until `world_size` clients joined, as PyTorch does.
    pub wait_for_workers: bool,
    /// The bound on connecting, on each call, and the default wait of `get`/`wait`.
    pub timeout: Duration,
    /// The shared token: the hosted server refuses clients without it, and this client
    /// presents it. [`TcpStoreOptions::client`] and [`TcpStoreOptions::server`] take it from
    /// `OXCCL_STORE_TOKEN`; `None` (unset) behaves as PyTorch's store.
    pub token: Option<String>,
    /// Where the hosted server listens. `None`: the address `host` resolves to and no other
    /// (loopback for `localhost`, that one interface for a machine's name); `Some("0.0.0.0")`
    /// or `Some("::")` listens on every interface, as PyTorch's server does.
    pub listen: Option<String>,
}

impl TcpStoreOptions {
    /// A client of the server at `host:port` (timeout 300 s, as PyTorch's).
    pub fn client(host: &str, port: u16) -> Self {
        TcpStoreOptions {
            host: host.to_string(),
            port,
            is_server: false,
            world_size: None,
            wait_for_workers: true,
            timeout: DEFAULT_TIMEOUT,
            token: token_from_env(),
            listen: None,
        }
    }

    /// A store that hosts the server on `port` (listening on `host`'s address only, see
    /// [`TcpStoreOptions::listen`]) and connects to it through `host`.
    pub fn server(host: &str, port: u16) -> Self {
        TcpStoreOptions {
            is_server: true,
            ..TcpStoreOptions::client(host, port)
        }
    }
}

/// A [`Store`] over PyTorch's TCPStore protocol: a client of a TCP store server, and, when
/// opened with `is_server`, that server too (shut down when the store is dropped). A
/// PyTorch program's `TCPStore` can be either side. Through `oxccl`, it is
/// `oxccl::store::TcpStore`.
///
/// ```
/// use oxccl_store::{Store, TcpStore, TcpStoreOptions};
/// use std::time::Duration;
///
/// fn main() -> oxccl_core::Result<()> {
///     // Rank 0 serves (port 0: any free port), another process connects to it.
///     let server = TcpStore::new(TcpStoreOptions::server("127.0.0.1", 0))?;
///     let client = TcpStore::new(TcpStoreOptions::client("127.0.0.1", server.port()))?;
///     client.set("greeting", b"hello")?;
///     assert_eq!(server.get("greeting", Duration::from_secs(5))?, b"hello");
///     assert_eq!(server.add("arrived", 1)? + client.add("arrived", 1)?, 3);
///     Ok(())
/// }
/// ```
pub struct TcpStore {
    // Declared first so its connections close before the server stops.
    client: Client,
    server: Option<TcpServer>,
    host: String,
    port: u16,
    timeout: Duration,
}

impl TcpStore {
    /// Opens the store: binds the server first when `opts.is_server`, connects (retrying
    /// until `opts.timeout`, since the server may start later), then waits for the workers
    /// when asked.
    pub fn new(opts: TcpStoreOptions) -> Result<TcpStore> {
        let server = if opts.is_server {
            let listen = opts.listen.clone().unwrap_or_else(|| bind_host(&opts.host));
            let server_opts = ServerOptions {
                token: opts.token.clone(),
                ..ServerOptions::from_env()
            };
            Some(TcpServer::bind_with(&listen, opts.port, server_opts)?)
        } else {
            None
        };
        let port = server.as_ref().map_or(opts.port, TcpServer::port);
        let client = Client::connect(&opts.host, port, opts.timeout, opts.token.as_deref())?;
        let store = TcpStore {
            client,
            server,
            host: opts.host,
            port,
            timeout: opts.timeout,
        };
        if let (Some(n), true) = (opts.world_size, opts.wait_for_workers) {
            store.wait_for_workers(n)?;
        }
        Ok(store)
    }

    /// The server's port (the one picked when opened with port 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's host, as given.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether this store hosts the server.
    pub fn is_server(&self) -> bool {
        self.server.is_some()
    }

    /// Appends `value` to the bytes at `key` (created if missing), as torch's `append`.
    pub fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        let k = wire_key(key)?;
        check_value(value)?;
        let mut q = Vec::new();
        wire::put_query(&mut q, wire::QueryType::Append);
        wire::put_bytes(&mut q, k.as_bytes());
        wire::put_bytes(&mut q, value);
        self.client.tell("append", q)
    }

    /// The values of `keys`, waiting up to `timeout` for all of them (torch's `multi_get`).
    pub fn multi_get(&self, keys: &[&str], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let ks = wire_keys(keys)?;
        let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
        self.client.get(&refs, timeout)
    }

    /// Sets every `(key, value)` pair in one query (torch's `multi_set`).
    pub fn multi_set(&self, pairs: &[(&str, &[u8])]) -> Result<()> {
        if pairs.len() > wire::MAX_KEY_COUNT {
            return Err(Error::invalid(
                "pairs",
                format_args!("at most {} pairs, got {}", wire::MAX_KEY_COUNT, pairs.len()),
            ));
        }
        let mut q = Vec::new();
        wire::put_query(&mut q, wire::QueryType::MultiSet);
        wire::put_u64(&mut q, pairs.len() as u64);
        for (k, v) in pairs {
            check_value(v)?;
            wire::put_bytes(&mut q, wire_key(k)?.as_bytes());
            wire::put_bytes(&mut q, v);
        }
        self.client.tell("multi_set", q)
    }

    /// Counts this client in on PyTorch's `init/` key; the server's store then waits until
    /// `n` clients did (polling every 10 ms, as PyTorch does), bounded by the timeout.
    fn wait_for_workers(&self, n: u32) -> Result<()> {
        self.client.add(wire::INIT_KEY, 1)?;
        if self.server.is_none() {
            return Ok(());
        }
        let start = Instant::now();
        loop {
            let v = self.client.get(&[wire::INIT_KEY], self.timeout)?;
            let joined = v.first().and_then(|v| wire::parse_counter(v)).unwrap_or(0);
            if joined >= i64::from(n) {
                return Ok(());
            }
            if start.elapsed() >= self.timeout {
                return Err(Error::Timeout {
                    what: text!(
                        "workers joining the TCP store at {}:{}: {joined}/{n} joined",
                        Escaped(&self.host),
                        self.port
                    ),
                    after_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl std::fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStore")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("is_server", &self.server.is_some())
            .finish()
    }
}

/// Where a store's server binds unless told ([`TcpStoreOptions::listen`]): the address
/// `host` resolves to, and only it. A loopback host stays on loopback; a machine's name or
/// address (torchrun's `MASTER_ADDR` on rank 0) binds that interface, which is the one the
/// other machines reach; no wildcard, so no interface the job did not name is exposed.
fn bind_host(host: &str) -> String {
    match (host, 0).to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => a.ip().to_string(),
        _ => host.to_string(),
    }
}

/// The key as sent: PyTorch's prefix, then the key, bounded by what servers accept.
fn wire_key(key: &str) -> Result<String> {
    let k = format!("{}{key}", wire::KEY_PREFIX);
    if k.len() > wire::MAX_KEY_LEN {
        return Err(Error::invalid(
            "key",
            format_args!(
                "a key of at most {} bytes, got {}",
                wire::MAX_KEY_LEN - wire::KEY_PREFIX.len(),
                key.len()
            ),
        ));
    }
    Ok(k)
}

fn wire_keys(keys: &[&str]) -> Result<Vec<String>> {
    if keys.len() > wire::MAX_KEY_COUNT {
        return Err(Error::invalid(
            "keys",
            format_args!("at most {} keys, got {}", wire::MAX_KEY_COUNT, keys.len()),
        ));
    }
    keys.iter().map(|k| wire_key(k)).collect()
}

fn check_value(v: &[u8]) -> Result<()> {
    if v.len() > wire::MAX_VALUE_LEN {
        return Err(Error::invalid(
            "value",
            format_args!("at most {} bytes, got {}", wire::MAX_VALUE_LEN, v.len()),
        ));
    }
    Ok(())
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        check_value(value)?;
        self.client.set(&wire_key(key)?, value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let k = wire_key(key)?;
        let mut v = self.client.get(&[&k], timeout)?;
        v.pop().ok_or_else(|| Error::Remote {
            detail: text!("the TCP store answered no value for `{}`", Escaped(key)),
        })
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.client.add(&wire_key(key)?, delta)
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let ks = wire_keys(keys)?;
        let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
        self.client.wait(&refs, timeout)
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let ks = wire_keys(keys)?;
        let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
        self.client.check(&refs)
    }

    fn check_watched(&self, key: &str) -> Result<bool> {
        self.client.watched_is_set(&wire_key(key)?)
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        check_value(expected)?;
        check_value(desired)?;
        self.client.compare_set(&wire_key(key)?, expected, desired)
    }

    fn delete(&self, key: &str) -> Result<bool> {
        self.client.delete(&wire_key(key)?)
    }

    fn num_keys(&self) -> Result<u64> {
        self.client.num_keys()
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

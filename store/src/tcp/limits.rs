//! What a store server accepts and holds at most, its optional shared token, and the counts
//! that show it keeps to them.
//!
//! # The memory bound
//!
//! With limits `L`, the server's memory beyond a fixed base is at most
//!
//! - per connection (at most `L.max_connections`): its socket and a few hundred bytes of
//!   bookkeeping; an idle connection holds no buffer (the event loop reads through one shared
//!   64 KiB chunk);
//! - replies queued to a client that reads slowly: a connection stops having its queries
//!   applied while more than 256 KiB of its replies wait, so it holds at most that plus one
//!   reply, and it is dropped when its replies make no progress for 30 s;
//! - query bytes read but not yet applied: at most `L.max_query_bytes` per connection and
//!   `L.max_buffered_bytes` over all connections together;
//! - the key space (keys, values, queued values): at most `L.max_stored_bytes`, counted as
//!   the bytes of keys and values;
//! - pending waits: at most `L.max_waited_bytes` of awaited keys over all connections (one
//!   wait per connection).
//!
//! A query that would cross one of these closes the connection that sent it (the protocol has
//! no error replies; PyTorch's servers close on bad queries too): other clients go on. With
//! the defaults that is under 4 GiB of data (1 GiB buffered, 2 GiB stored, 64 MiB of waits)
//! plus a few KiB per connection. [`super::TcpServer::stats`] reports the counts.
//!
//! # The connection limit
//!
//! By default a server holds as many clients as the process may open descriptors (the soft
//! `RLIMIT_NOFILE`, which the server raises to the hard limit where allowed) minus a reserve
//! for the rest of the process. `OXCCL_STORE_MAX_CONNECTIONS` sets the default instead, and
//! [`ServerLimits::max_connections`] overrides both.

use super::fd_limit;
use super::wire::{MAX_KEY_LEN, MAX_VALUE_LEN};

/// The environment variable that sets [`ServerOptions::event_loops`].
const EVENT_LOOPS_ENV: &str = "OXCCL_STORE_EVENT_LOOPS";

/// The environment variable that sets the default [`ServerLimits::max_connections`].
pub(super) const MAX_CONNECTIONS_ENV: &str = "OXCCL_STORE_MAX_CONNECTIONS";

/// The connection limit when none is given: `OXCCL_STORE_MAX_CONNECTIONS` when set to a
/// number, else the descriptor limit (raised to the hard one) less a reserve, else 8192.
fn default_max_connections() -> usize {
    if let Some(n) = std::env::var(MAX_CONNECTIONS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return n;
    }
    match fd_limit::descriptor_limit() {
        Some(fds) => fds.saturating_sub(fd_limit::RESERVE).max(1),
        None => 8192,
    }
}

/// The bounds a server keeps to (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Clients served at once; more are closed at accept (see the module doc for the default).
    pub max_connections: usize,
    /// Bytes one connection may have read ahead of the query it is in (so the largest query).
    pub max_query_bytes: usize,
    /// Bytes all connections together may have read ahead.
    pub max_buffered_bytes: usize,
    /// Bytes of keys and values the key space may hold.
    pub max_stored_bytes: usize,
    /// Bytes of keys all pending waits together may await.
    pub max_waited_bytes: usize,
}

impl Default for ServerLimits {
    /// As many clients as descriptors allow (or `OXCCL_STORE_MAX_CONNECTIONS`: see the module
    /// doc); a query of one maximal value (1 GiB) and its key; 1 GiB read ahead in all; 2 GiB
    /// stored; 64 MiB of awaited keys.
    fn default() -> Self {
        ServerLimits {
            max_connections: default_max_connections(),
            max_query_bytes: MAX_VALUE_LEN + MAX_KEY_LEN + 64,
            max_buffered_bytes: 1 << 30,
            max_stored_bytes: 2 << 30,
            max_waited_bytes: 64 << 20,
        }
    }
}

/// How a server is started: its limits and its optional shared token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerOptions {
    /// Clients must present this token right after `VALIDATE` (see
    /// [`super::wire::TOKEN_KEY_PREFIX`]) or are closed; `None` (the default) accepts every
    /// client, as PyTorch's server does.
    pub token: Option<String>,
    /// The bounds kept.
    pub limits: ServerLimits,
    /// Event-loop threads serving the clients (each takes its share of the connections);
    /// 0 (the default) picks by cores, one to eight (`OXCCL_STORE_EVENT_LOOPS` sets it too).
    pub event_loops: usize,
}

impl ServerOptions {
    /// The default limits, the token of `OXCCL_STORE_TOKEN` when set and not empty, and the
    /// event loops of `OXCCL_STORE_EVENT_LOOPS` when set to a number.
    pub fn from_env() -> ServerOptions {
        ServerOptions {
            token: token_from_env(),
            limits: ServerLimits::default(),
            event_loops: std::env::var(EVENT_LOOPS_ENV)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
        }
    }
}

/// `OXCCL_STORE_TOKEN`, when set to something non-empty.
pub fn token_from_env() -> Option<String> {
    std::env::var("OXCCL_STORE_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
}

/// What a server holds now, against its [`ServerLimits`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Client connections being served.
    pub connections: usize,
    /// Query bytes read ahead, over all connections.
    pub buffered_bytes: usize,
    /// Bytes of keys and values in the key space.
    pub stored_bytes: usize,
    /// Connections with a pending wait.
    pub waiting_connections: usize,
    /// Bytes of keys the pending waits await.
    pub waited_bytes: usize,
    /// Queries applied since the server started (after each connection's handshake): how
    /// much its clients ask of it.
    pub queries: u64,
}

//! The store side of `examples/torch_share.rs`: the keys the PyTorch trainer
//! (`examples/torch_share/trainer.py`) sets in its `TCPStore`, read with oxccl's [`TcpStore`]
//! client, and the weights both sides agree on. Shared with `tests/torch_share_handshake.rs`,
//! which runs it against the trainer's `--dry-store` mode without a GPU.
//!
//! The keys (docs/guide/pytorch.md), all under `oxccl/torch_share/`:
//!
//! | key | set by | value |
//! |---|---|---|
//! | `config` | trainer | `world=2 steps=S elems=E` (ASCII) |
//! | `nccl` | trainer | lines `version 2.28.9`, `torch 2.11.0`, `path /…/libnccl.so.2` (what torch loaded) |
//! | `unique_id` | trainer, last | the 128 bytes of `torch.cuda.nccl.unique_id()`, raw |
//! | `server` | server | `joining` (about to init rank 1), `fail: why`, or `dry-ok id=<256 hex digits>` |
//! | `ack` | server, at the end | `ok steps=S checksum=C mismatches=M`, or `fail: why` |
#![allow(dead_code)]

use oxccl::store::{Store, TcpStore, TcpStoreOptions};
use oxccl::UniqueId;
use std::time::Duration;

pub const KEY_CONFIG: &str = "oxccl/torch_share/config";
pub const KEY_NCCL: &str = "oxccl/torch_share/nccl";
pub const KEY_ID: &str = "oxccl/torch_share/unique_id";
pub const KEY_SERVER: &str = "oxccl/torch_share/server";
pub const KEY_ACK: &str = "oxccl/torch_share/ack";

/// What the trainer published.
#[derive(Debug, Clone)]
pub struct Shared {
    pub id: UniqueId,
    pub world: u32,
    pub steps: u32,
    pub elems: usize,
    /// torch's NCCL version, `major.minor.patch` (as `torch.cuda.nccl.version()`).
    pub nccl_version: String,
    /// torch's own version.
    pub torch_version: String,
    /// The libnccl file torch has loaded, when the trainer could see it (`/proc/self/maps`).
    pub nccl_path: Option<String>,
}

/// Connects to the trainer's store at `HOST:PORT`, retrying until `timeout` (the trainer may
/// start later).
pub fn connect(addr: &str, timeout: Duration) -> Result<TcpStore, String> {
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("--store wants HOST:PORT, got {addr:?}"))?;
    let opts = TcpStoreOptions {
        timeout,
        ..TcpStoreOptions::client(host, port)
    };
    TcpStore::new(opts).map_err(|e| format!("no store at {addr} within {timeout:?}: {e}"))
}

fn text(store: &TcpStore, key: &str, timeout: Duration) -> Result<String, String> {
    let v = store
        .get(key, timeout)
        .map_err(|e| format!("reading {key}: {e}"))?;
    String::from_utf8(v).map_err(|_| format!("{key} is not UTF-8 text"))
}

/// Reads the trainer's keys (the id last: it is set last), each waited for up to `timeout`.
pub fn read(store: &TcpStore, timeout: Duration) -> Result<Shared, String> {
    let raw = store
        .get(KEY_ID, timeout)
        .map_err(|e| format!("reading {KEY_ID}: {e}"))?;
    let id = UniqueId::from_bytes(&raw).map_err(|e| {
        format!(
            "{KEY_ID} holds {} bytes, an NCCL unique id has {}: {e}",
            raw.len(),
            UniqueId::LEN
        )
    })?;
    let config = text(store, KEY_CONFIG, timeout)?;
    let (mut world, mut steps, mut elems) = (None, None, None);
    for field in config.split_whitespace() {
        match field.split_once('=') {
            Some(("world", v)) => world = v.parse().ok(),
            Some(("steps", v)) => steps = v.parse().ok(),
            Some(("elems", v)) => elems = v.parse().ok(),
            _ => {}
        }
    }
    let bad = || format!("{KEY_CONFIG} is {config:?}, wanted `world=2 steps=S elems=E`");
    let (world, steps, elems) = (
        world.ok_or_else(bad)?,
        steps.ok_or_else(bad)?,
        elems.ok_or_else(bad)?,
    );
    if world != 2 {
        return Err(format!(
            "{KEY_CONFIG}: world={world}, this example is 2 ranks"
        ));
    }
    let nccl = text(store, KEY_NCCL, timeout)?;
    let (mut version, mut torch, mut path) = (None, None, None);
    for line in nccl.lines() {
        match line.split_once(' ') {
            Some(("version", v)) => version = Some(v.trim().to_string()),
            Some(("torch", v)) => torch = Some(v.trim().to_string()),
            Some(("path", v)) if !v.trim().is_empty() => path = Some(v.trim().to_string()),
            _ => {}
        }
    }
    Ok(Shared {
        id,
        world,
        steps,
        elems,
        nccl_version: version.ok_or_else(|| format!("{KEY_NCCL} has no `version` line"))?,
        torch_version: torch.unwrap_or_else(|| "?".into()),
        nccl_path: path,
    })
}

/// The id as hex, for the dry run's echo.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Weight `i` at `step`: exact in f32 (multiples of 0.25 below 2^20), the trainer's
/// `(step + 1) + (arange(E) % 1024) * 0.25`.
pub fn weight(step: u32, i: usize) -> f32 {
    (step + 1) as f32 + (i % 1024) as f32 * 0.25
}

//! [`Bootstrap`]: from an init method and the launcher's environment to this rank's place in
//! the job and the store the ranks rendezvous through (c10d's rendezvous handlers).

use super::InitMethod;
use crate::store::{FileStore, Store, TcpStore, TcpStoreOptions};
use oxccl_core::env::EnvConfig;
use oxccl_core::launch::{LaunchInfo, Launcher};
use oxccl_core::{Device, Error, Result};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A snapshot of environment variables, read once so that every decision of one bootstrap
/// sees the same values (and tests can pass their own without touching the process's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvVars(HashMap<String, String>);

impl EnvVars {
    /// The process's environment now. A value that is not UTF-8 is kept with replacement
    /// characters, so it fails its parser with an error naming the variable instead of
    /// vanishing (or panicking, as `std::env::vars` would).
    pub fn from_process() -> EnvVars {
        EnvVars(
            std::env::vars_os()
                .map(|(k, v)| {
                    (
                        k.to_string_lossy().into_owned(),
                        v.to_string_lossy().into_owned(),
                    )
                })
                .collect(),
        )
    }

    /// Exactly these variables.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> EnvVars {
        EnvVars(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// This rank's place in the job and its rendezvous store.
#[derive(Clone)]
pub struct Bootstrap {
    /// This process's rank.
    pub rank: u32,
    /// How many ranks the job has.
    pub world_size: u32,
    /// The rank among this node's processes, when the launcher says.
    pub local_rank: Option<u32>,
    /// The GPU to use: `local_rank`, else 0 (one process per GPU, as torchrun lays them out).
    pub device: Device,
    /// Which launcher the rank and size came from.
    pub launcher: Launcher,
    /// Everything the launcher said (local size, master address, agent store).
    pub info: LaunchInfo,
    /// The store every rank of the job shares.
    pub store: Arc<dyn Store>,
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("local_rank", &self.local_rank)
            .field("device", &self.device)
            .field("launcher", &self.launcher)
            .finish_non_exhaustive()
    }
}

impl Bootstrap {
    /// `env://` from the process's environment, with the store timeout of
    /// `OXCCL_TIMEOUT_MS` (600 s when unset): what a process started by torchrun, `srun` or
    /// `mpirun` calls.
    pub fn from_env() -> Result<Bootstrap> {
        let env = EnvVars::from_process();
        let timeout = EnvConfig::from_lookup(|k| env.get(k))?.timeout_for(None, None);
        Bootstrap::with_env(&InitMethod::Env, None, None, timeout, &env)
    }

    /// Joins the job through `init`, with c10d's optional explicit `rank` and `world_size`
    /// (each taken from the launcher's environment when `None`); `timeout` bounds connecting
    /// and is the store's default wait.
    pub fn new(
        init: &InitMethod,
        rank: Option<u32>,
        world_size: Option<u32>,
        timeout: Duration,
    ) -> Result<Bootstrap> {
        Bootstrap::with_env(init, rank, world_size, timeout, &EnvVars::from_process())
    }

    /// [`Bootstrap::new`] reading `env` instead of the process's environment.
    ///
    /// For `env://` and `tcp://`, rank 0 hosts the TCP store and the others connect to it,
    /// except under `TORCHELASTIC_USE_AGENT_STORE=True`, where torchrun's agent already
    /// serves one: then every rank, rank 0 too, is a client. `file://` opens a
    /// [`FileStore`] counted for `world_size` processes (the last one out removes the file).
    pub fn with_env(
        init: &InitMethod,
        rank: Option<u32>,
        world_size: Option<u32>,
        timeout: Duration,
        env: &EnvVars,
    ) -> Result<Bootstrap> {
        let info = LaunchInfo::resolve(|k| env.get(k), rank, world_size)?;
        log::info!(
            "oxccl bootstrap: {init}, launcher {:?}: rank {} of {}, local rank {:?}",
            info.launcher,
            info.rank,
            info.world_size,
            info.local_rank
        );
        let store: Arc<dyn Store> = match init {
            InitMethod::Env => {
                let host = info.master_addr.as_ref().ok_or_else(|| {
                    Error::invalid(
                        "MASTER_ADDR",
                        format_args!("the host of rank 0's store for env://, but it is unset"),
                    )
                })?;
                let port = info.master_port.ok_or_else(|| {
                    Error::invalid(
                        "MASTER_PORT",
                        format_args!("the port of rank 0's store for env://, but it is unset"),
                    )
                })?;
                Arc::new(tcp_store(host, port, &info, timeout)?)
            }
            InitMethod::Tcp { host, port } => Arc::new(tcp_store(host, *port, &info, timeout)?),
            InitMethod::File { path } => {
                Arc::new(FileStore::new(path, Some(info.world_size))?.with_timeout(timeout))
            }
        };
        Ok(Bootstrap {
            rank: info.rank,
            world_size: info.world_size,
            local_rank: info.local_rank,
            device: Device(info.local_rank.unwrap_or(0)),
            launcher: info.launcher,
            info,
            store,
        })
    }
}

/// The TCP store at `host:port`: hosted by rank 0 unless the agent's store is used.
fn tcp_store(host: &str, port: u16, info: &LaunchInfo, timeout: Duration) -> Result<TcpStore> {
    let hosts = info.rank == 0 && !info.use_agent_store;
    let mut opts = if hosts {
        TcpStoreOptions::server(host, port)
    } else {
        TcpStoreOptions::client(host, port)
    };
    opts.world_size = Some(info.world_size);
    // The agent's server counts its own workers; joining it must not wait for a count it
    // does not keep the way a rank-0 server does.
    opts.wait_for_workers = !info.use_agent_store;
    opts.timeout = timeout;
    log::info!(
        "oxccl bootstrap: {} the TCP store at {host}:{port}",
        if hosts { "hosting" } else { "joining" }
    );
    TcpStore::new(opts)
}

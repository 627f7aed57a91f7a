//! [`Bootstrap`]: from an init method and the launcher's environment to this rank's place in
//! the job and the store the ranks rendezvous through (c10d's rendezvous handlers).

use super::init::InitMethod;
use crate::env_vars::EnvVars;
use crate::store::{FileStore, PrefixStore, Store, TcpStore, TcpStoreOptions};
use oxccl_core::text::Escaped;
use oxccl_core::{Device, Error, Result};
use oxccl_rules::env::parse_u64;
use oxccl_rules::launch::{LaunchInfo, Launcher, SLURM_PORT_RULE};
use std::sync::Arc;
use std::time::Duration;

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
    /// The store every rank of the job shares, as the launcher serves it: no prefix, so keys
    /// the program sets meet those of a PyTorch program of the same launch (PyTorch since
    /// 2.5 adds none to torchrun's agent store either).
    pub store: Arc<dyn Store>,
    /// Where in `store` this launch's process groups go, when it is scoped (see
    /// [`restart_scope`]): [`Bootstrap::group_store`] is the view under it.
    pub group_scope: Option<String>,
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("local_rank", &self.local_rank)
            .field("device", &self.device)
            .field("launcher", &self.launcher)
            .field("group_scope", &self.group_scope)
            .finish_non_exhaustive()
    }
}

impl Bootstrap {
    /// The store a default group of this launch is made on: [`Bootstrap::store`], under
    /// [`Bootstrap::group_scope`] when there is one (what [`init_process_group`](super::choose::init_process_group) uses).
    pub fn group_store(&self) -> Arc<dyn Store> {
        match &self.group_scope {
            Some(scope) => Arc::new(PrefixStore::new(scope.clone(), self.store.clone())),
            None => self.store.clone(),
        }
    }

    /// `env://` from the process's environment, with the store timeout of
    /// `OXCCL_TIMEOUT_MS` (600 s when unset): what a process started by torchrun, `srun` or
    /// `mpirun` calls. Any refused setting ([`EnvVars::settings`]) is the error.
    pub fn from_env() -> Result<Bootstrap> {
        let env = EnvVars::from_process();
        let timeout = env.settings().config?.timeout_for(None, None);
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
    /// On torchrun's agent store with one agent, [`Bootstrap::group_scope`] is the restart's
    /// (see [`restart_scope`]; logged).
    pub fn with_env(
        init: &InitMethod,
        rank: Option<u32>,
        world_size: Option<u32>,
        timeout: Duration,
        env: &EnvVars,
    ) -> Result<Bootstrap> {
        let info = LaunchInfo::resolve(|k| env.get(k), rank, world_size)?;
        log::info!(
            "oxccl bootstrap: {}, launcher {:?}: rank {} of {}, local rank {:?}",
            Escaped(&init.to_string()),
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
                let port = info.store_port()?;
                if let Some(step) = info.derived_port {
                    log::info!(
                        "oxccl bootstrap: MASTER_PORT unset: port {port} for rank 0's store, \
                         derived from Slurm job {} step {} by the rule {SLURM_PORT_RULE} \
                         (set MASTER_PORT to choose another)",
                        step.job_id,
                        step.step_id
                    );
                }
                Arc::new(
                    tcp_store(host, port, &info, timeout)
                        .map_err(|e| derived_port_taken(e, &info))?,
                )
            }
            InitMethod::Tcp { host, port } => Arc::new(tcp_store(host, *port, &info, timeout)?),
            InitMethod::File { path } => {
                Arc::new(FileStore::new(path, Some(info.world_size))?.with_timeout(timeout))
            }
        };
        // A file store is the program's own, even under torchrun.
        let on_agent_store = info.use_agent_store && !matches!(init, InitMethod::File { .. });
        let group_scope = restart_scope(on_agent_store, env.get(RESTART_COUNT), env.get(AGENTS))?;
        match (&group_scope, env.get(RESTART_COUNT)) {
            (Some(scope), _) => log::info!(
                "oxccl bootstrap: torchrun's agent store outlives restarts; restart {} of this launch: process groups under `{scope}/`",
                env.get(RESTART_COUNT).unwrap_or_default()
            ),
            (None, Some(n)) if on_agent_store => log::info!(
                "oxccl bootstrap: torchrun's agent store of {} agents, restart {n} here: restart counts differ between nodes, so process groups are told apart by their incarnation count alone",
                env.get(AGENTS).unwrap_or("an unknown number of")
            ),
            _ => {}
        }
        Ok(Bootstrap {
            rank: info.rank,
            world_size: info.world_size,
            local_rank: info.local_rank,
            device: Device(info.local_rank.unwrap_or(0)),
            launcher: info.launcher,
            info,
            store,
            group_scope,
        })
    }
}

/// torchrun's restart count, set in every worker it starts.
const RESTART_COUNT: &str = "TORCHELASTIC_RESTART_COUNT";
/// torchrun's number of agents (nodes) in the rendezvous.
const AGENTS: &str = "GROUP_WORLD_SIZE";

/// The scope of a launch's process groups in its store: `oxccl/restart/<n>` when the store is
/// torchrun's agent store (`use_agent_store`), which outlives a restart of the workers, and
/// the restart count `n` (`TORCHELASTIC_RESTART_COUNT`) is the same on every rank, which it is
/// only with one agent (`GROUP_WORLD_SIZE=1`): each agent counts its own restarts, and one
/// that restarts its workers because another node failed, or that replaced a node, counts
/// differently (PyTorch's issue 135712, why PyTorch since 2.5 no longer scopes the agent store
/// by it). Elsewhere `None`: the groups' incarnation count (`pg::keys`) alone keeps them apart;
/// the scope adds that a restart after a rank died before making its group starts afresh.
/// Values are parsed strictly: an error names the variable.
pub fn restart_scope(
    use_agent_store: bool,
    restart_count: Option<&str>,
    agents: Option<&str>,
) -> Result<Option<String>> {
    if !use_agent_store {
        return Ok(None);
    }
    let n = restart_count
        .map(|v| parse_u64(RESTART_COUNT, v, 0, u64::from(u32::MAX)))
        .transpose()?;
    let agents = agents
        .map(|v| parse_u64(AGENTS, v, 1, u64::from(u32::MAX)))
        .transpose()?;
    Ok(match (n, agents) {
        (Some(n), Some(1)) => Some(format!("oxccl/restart/{n}")),
        _ => None,
    })
}

/// A port the Slurm rule derived that rank 0 cannot bind (another program holds it): the
/// error names `MASTER_PORT`, the way to choose another, instead of the store's `port`.
fn derived_port_taken(e: Error, info: &LaunchInfo) -> Error {
    match (&e, info.derived_port) {
        (
            Error::InvalidArgument {
                arg: "port",
                expected,
            },
            Some(step),
        ) => Error::invalid(
            "MASTER_PORT",
            format_args!(
                "set, to replace the port Slurm job {} step {} gave, which is not {expected}",
                step.job_id, step.step_id
            ),
        ),
        _ => e,
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
        "oxccl bootstrap: {} the TCP store at {}:{port}",
        if hosts { "hosting" } else { "joining" },
        Escaped(host)
    );
    TcpStore::new(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_agent_scopes_by_restart_and_several_do_not() {
        let s = |agent, n, k| restart_scope(agent, n, k).unwrap();
        assert_eq!(
            s(true, Some("1"), Some("1")).as_deref(),
            Some("oxccl/restart/1")
        );
        assert_eq!(
            s(true, Some("0"), Some("1")).as_deref(),
            Some("oxccl/restart/0")
        );
        // Counts differ between agents; without the agent store the store dies with rank 0.
        assert_eq!(s(true, Some("1"), Some("2")), None);
        assert_eq!(s(true, Some("1"), None), None);
        assert_eq!(s(true, None, Some("1")), None);
        assert_eq!(s(false, Some("1"), Some("1")), None);
    }

    #[test]
    fn a_file_store_under_torchrun_is_not_scoped() {
        let dir = std::env::temp_dir().join(format!("oxccl-scope-{}", std::process::id()));
        let init = InitMethod::File { path: dir.clone() };
        let env = EnvVars::from_pairs([
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            (RESTART_COUNT, "2"),
            (AGENTS, "1"),
        ]);
        let t = Duration::from_secs(5);
        let b = Bootstrap::with_env(&init, Some(0), Some(1), t, &env).unwrap();
        assert_eq!(b.group_scope, None);
        drop(b);
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn bad_counts_name_their_variable() {
        for (n, k, var) in [
            ("x", "1", RESTART_COUNT),
            ("-1", "1", RESTART_COUNT),
            ("1", "0", AGENTS),
            ("1", "two", AGENTS),
        ] {
            match restart_scope(true, Some(n), Some(k)) {
                Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, var),
                other => panic!("{n} {k}: {other:?}"),
            }
        }
    }
}

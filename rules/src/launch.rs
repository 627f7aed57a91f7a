//! Where a rank learns its place in the job from the launcher's environment: torchrun, Slurm,
//! Open MPI, MPICH (Hydra), or explicit arguments.
//!
//! A pure function over a lookup closure, so every launcher and every conflict is tested
//! without touching the process environment.
//!
//! Precedence and conflicts:
//! - Explicit arguments (c10d's `rank=`, `world_size=`) win over the environment, unchecked
//!   against it, as in c10d.
//! - Then torchrun-style `RANK`/`WORLD_SIZE`. When they were set by hand (no
//!   `TORCHELASTIC_RUN_ID`) and another launcher also gives a complete rank and size that
//!   disagree, that is an error naming both variables: a script exported the wrong value. Under
//!   torchrun's agent the outer launcher (`srun torchrun …`) numbers the agents, not the
//!   workers, so it is not compared.
//! - Then Open MPI, then MPICH (they disagreeing is an error), then Slurm. A process-level MPI
//!   launcher wins over Slurm without comparison: `mpirun` inside an allocation inherits the
//!   batch step's `SLURM_PROCID`, which numbers nodes or is 0 everywhere.
//! - A rank without its size (or the reverse), a size of 0, a rank not below the size, a
//!   non-number: errors naming the variable.
//!
//! Host names are [`HostName`]s (bounded `heapless` strings) rather than text borrowed from the
//! lookup: the Slurm master address is built (`node[01-04]` → `node01`), so it cannot borrow,
//! and a bounded string keeps [`LaunchInfo`] plain data that needs no allocator.
//!
//! Rank 0's store: `MASTER_ADDR`, else the first host of Slurm's node list (the step's, else
//! the job's: `srun` places task 0 on the first node of its step); `MASTER_PORT`, else under
//! `srun` the port the job and step ids give ([`slurm_port`], rule [`SLURM_PORT_RULE`]).

mod hostlist;
mod port;

pub use hostlist::{HostIter, HostList, HostName, HOST_CAPACITY};
pub use port::{
    missing_port, slurm_port, slurm_step, SlurmStep, SLURM_BATCH_STEP, SLURM_PORT_BASE,
    SLURM_PORT_RULE, SLURM_PORT_SPAN,
};

use crate::env::{parse_bool, parse_u64};
use oxccl_core::error::{Error, Result};
use oxccl_core::text::Escaped;

/// The program that started the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Launcher {
    /// `RANK`/`WORLD_SIZE` (torchrun, or set by hand).
    Torchrun,
    /// Slurm's `srun` (`SLURM_PROCID`/`SLURM_NTASKS`).
    Slurm,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// MPICH's Hydra (`PMI_RANK`/`PMI_SIZE`).
    Mpich,
    /// The caller gave rank and world size explicitly.
    Explicit,
}

/// The variables one launcher sets.
#[derive(Debug, Clone, Copy)]
struct Source {
    launcher: Launcher,
    rank: &'static str,
    size: &'static str,
    local_rank: &'static str,
    local_size: Option<&'static str>,
}

const TORCHRUN: Source = Source {
    launcher: Launcher::Torchrun,
    rank: "RANK",
    size: "WORLD_SIZE",
    local_rank: "LOCAL_RANK",
    local_size: Some("LOCAL_WORLD_SIZE"),
};
const OPEN_MPI: Source = Source {
    launcher: Launcher::OpenMpi,
    rank: "OMPI_COMM_WORLD_RANK",
    size: "OMPI_COMM_WORLD_SIZE",
    local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
    local_size: Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
};
const MPICH: Source = Source {
    launcher: Launcher::Mpich,
    rank: "PMI_RANK",
    size: "PMI_SIZE",
    local_rank: "MPI_LOCALRANKID",
    local_size: Some("MPI_LOCALNRANKS"),
};
/// Slurm's local size comes from `SLURM_NTASKS_PER_NODE` or `SLURM_TASKS_PER_NODE`.
const SLURM: Source = Source {
    launcher: Launcher::Slurm,
    rank: "SLURM_PROCID",
    size: "SLURM_NTASKS",
    local_rank: "SLURM_LOCALID",
    local_size: None,
};

/// Where this rank stands in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchInfo {
    /// Which launcher the rank and size came from.
    pub launcher: Launcher,
    /// This process's rank, below `world_size`.
    pub rank: u32,
    /// How many ranks the job has (at least 1).
    pub world_size: u32,
    /// The rank among the processes of this node, when the launcher says.
    pub local_rank: Option<u32>,
    /// How many processes run on this node, when the launcher says.
    pub local_world_size: Option<u32>,
    /// `MASTER_ADDR`, else the first host of Slurm's node list.
    pub master_addr: Option<HostName>,
    /// `MASTER_PORT` (1..=65535); when it is unset under `srun`, the port of the Slurm job
    /// step's rule ([`slurm_port`]; see [`LaunchInfo::derived_port`]).
    pub master_port: Option<u16>,
    /// The Slurm job step `master_port` was derived from, when it was (`MASTER_PORT` unset,
    /// launcher [`Launcher::Slurm`], `SLURM_JOB_ID` set); `None` for an explicit `MASTER_PORT`.
    pub derived_port: Option<SlurmStep>,
    /// `TORCHELASTIC_USE_AGENT_STORE`: every rank, rank 0 too, joins the agent's store as a
    /// client instead of rank 0 hosting one.
    pub use_agent_store: bool,
}

impl LaunchInfo {
    /// The launch as the environment describes it (no explicit rank or size).
    pub fn detect<'a>(lookup: impl Fn(&str) -> Option<&'a str>) -> Result<LaunchInfo> {
        LaunchInfo::resolve(lookup, None, None)
    }

    /// The launch with the caller's explicit `rank` and `world_size`, each taking the
    /// environment's value when `None` (see the module's precedence rules).
    pub fn resolve<'a>(
        lookup: impl Fn(&str) -> Option<&'a str>,
        rank: Option<u32>,
        world_size: Option<u32>,
    ) -> Result<LaunchInfo> {
        let lookup = &lookup;
        let (launcher, source, rank_out, world_out) = match (rank, world_size) {
            (Some(r), Some(w)) => (Launcher::Explicit, None, r, w),
            _ => {
                let (src, r, w) = from_environment(lookup)?;
                (
                    src.launcher,
                    Some(src),
                    rank.unwrap_or(r),
                    world_size.unwrap_or(w),
                )
            }
        };
        // Name what the caller gave, else the launcher's variable.
        let var = |given: bool, arg: &'static str, env: Option<&'static str>| {
            if given {
                arg
            } else {
                env.unwrap_or(arg)
            }
        };
        check_rank(
            var(rank.is_some(), "rank", source.map(|s| s.rank)),
            rank_out,
            var(world_size.is_some(), "world_size", source.map(|s| s.size)),
            world_out,
        )?;
        let (rank, world_size) = (rank_out, world_out);
        let (local_rank, local_world_size) = match source {
            Some(src) => local_of(lookup, &src, world_size)?,
            // Explicit rank and size: the node-local numbering still comes from the launcher.
            None => explicit_local(lookup, world_size)?,
        };
        let use_agent_store = match lookup("TORCHELASTIC_USE_AGENT_STORE") {
            None => false,
            Some(v) => parse_bool("TORCHELASTIC_USE_AGENT_STORE", v)?,
        };
        let (master_port, derived_port) = match master_port(lookup)? {
            Some(p) => (Some(p), None),
            // Only srun's tasks of one step are sure to see the same job and step ids (the
            // ranks of an mpirun inside an allocation may not).
            None if launcher == Launcher::Slurm => match slurm_step(lookup)? {
                Some(step) => (Some(step.port()), Some(step)),
                None => (None, None),
            },
            None => (None, None),
        };
        Ok(LaunchInfo {
            launcher,
            rank,
            world_size,
            local_rank,
            local_world_size,
            master_addr: master_addr(lookup)?,
            master_port,
            derived_port,
            use_agent_store,
        })
    }

    /// The port of rank 0's store for `env://`: [`LaunchInfo::master_port`], else the error
    /// naming the variables that would have given it ([`missing_port`]).
    pub fn store_port(&self) -> Result<u16> {
        self.master_port
            .ok_or_else(|| missing_port(self.launcher == Launcher::Slurm))
    }
}

/// `rank < world_size`, `world_size > 0`, errors naming the variables.
fn check_rank(rank_var: &'static str, rank: u32, size_var: &'static str, size: u32) -> Result<()> {
    if size == 0 {
        return Err(Error::invalid(size_var, format_args!("at least 1, got 0")));
    }
    if rank >= size {
        return Err(Error::invalid(
            rank_var,
            format_args!("a rank below {size_var}={size}, got {rank}"),
        ));
    }
    Ok(())
}

/// `var` as a u32, when set.
fn number<'a>(lookup: &impl Fn(&str) -> Option<&'a str>, var: &'static str) -> Result<Option<u32>> {
    match lookup(var) {
        None => Ok(None),
        // The range makes the conversion infallible.
        Some(v) => Ok(u32::try_from(parse_u64(var, v, 0, u64::from(u32::MAX))?).ok()),
    }
}

/// A source's complete, valid rank and size; `None` when neither is set.
fn read_pair<'a>(
    lookup: &impl Fn(&str) -> Option<&'a str>,
    src: &Source,
) -> Result<Option<(u32, u32)>> {
    match (number(lookup, src.rank)?, number(lookup, src.size)?) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::invalid(
            src.size,
            format_args!(
                "set together with {} (the world size), but it is unset",
                src.rank
            ),
        )),
        (None, Some(_)) => Err(Error::invalid(
            src.rank,
            format_args!(
                "set together with {} (this rank), but it is unset",
                src.size
            ),
        )),
        (Some(r), Some(w)) => {
            check_rank(src.rank, r, src.size, w)?;
            Ok(Some((r, w)))
        }
    }
}

/// Whether any of a source's rank/size variables is set.
fn present<'a>(lookup: &impl Fn(&str) -> Option<&'a str>, src: &Source) -> bool {
    lookup(src.rank).is_some() || lookup(src.size).is_some()
}

/// `a` and `b` (both complete) must agree; else an error naming both launchers' variables.
fn agree(a: (&Source, (u32, u32)), b: (&Source, (u32, u32))) -> Result<()> {
    let ((sa, (ra, wa)), (sb, (rb, wb))) = (a, b);
    if ra != rb {
        return Err(Error::invalid(
            sa.rank,
            format_args!("{}={ra} to agree with {}={rb}", sa.rank, sb.rank),
        ));
    }
    if wa != wb {
        return Err(Error::invalid(
            sa.size,
            format_args!("{}={wa} to agree with {}={wb}", sa.size, sb.size),
        ));
    }
    Ok(())
}

/// The launcher the environment names, with its rank and size.
fn from_environment<'a>(lookup: &impl Fn(&str) -> Option<&'a str>) -> Result<(Source, u32, u32)> {
    if let Some(pair) = read_pair(lookup, &TORCHRUN)? {
        if lookup("TORCHELASTIC_RUN_ID").is_none() {
            for other in [OPEN_MPI, MPICH, SLURM] {
                // A malformed outer launcher is not this rank's concern; only complete ones
                // can contradict RANK.
                if let Ok(Some(theirs)) = read_pair(lookup, &other) {
                    agree((&TORCHRUN, pair), (&other, theirs))?;
                }
            }
        }
        return Ok((TORCHRUN, pair.0, pair.1));
    }
    let ompi = if present(lookup, &OPEN_MPI) {
        read_pair(lookup, &OPEN_MPI)?
    } else {
        None
    };
    let mpich = if present(lookup, &MPICH) {
        read_pair(lookup, &MPICH)?
    } else {
        None
    };
    if let (Some(a), Some(b)) = (ompi, mpich) {
        agree((&OPEN_MPI, a), (&MPICH, b))?;
    }
    if let Some((r, w)) = ompi {
        return Ok((OPEN_MPI, r, w));
    }
    if let Some((r, w)) = mpich {
        return Ok((MPICH, r, w));
    }
    if let Some((r, w)) = read_pair(lookup, &SLURM)? {
        return Ok((SLURM, r, w));
    }
    Err(Error::invalid(
        "RANK",
        format_args!(
            "a launcher's rank and size: RANK+WORLD_SIZE, SLURM_PROCID+SLURM_NTASKS, \
             OMPI_COMM_WORLD_RANK+_SIZE or PMI_RANK+PMI_SIZE; none is set"
        ),
    ))
}

/// A source's local rank and local size, checked against each other and the world size
/// (a node cannot hold more ranks than the job).
fn local_of<'a>(
    lookup: &impl Fn(&str) -> Option<&'a str>,
    src: &Source,
    world_size: u32,
) -> Result<(Option<u32>, Option<u32>)> {
    let rank = number(lookup, src.local_rank)?;
    let (size_var, size) = match src.local_size {
        Some(var) => (var, number(lookup, var)?),
        None => slurm_local_size(lookup)?,
    };
    if let Some(s) = size {
        check_rank(src.local_rank, rank.unwrap_or(0), size_var, s)?;
        if s > world_size {
            return Err(Error::invalid(
                size_var,
                format_args!("at most the world size {world_size}, got {s}"),
            ));
        }
    }
    if let Some(r) = rank.filter(|r| *r >= world_size) {
        return Err(Error::invalid(
            src.local_rank,
            format_args!("a local rank below the world size {world_size}, got {r}"),
        ));
    }
    Ok((rank, size))
}

/// With explicit rank and size, the local numbering of the first launcher that gives one.
fn explicit_local<'a>(
    lookup: &impl Fn(&str) -> Option<&'a str>,
    world_size: u32,
) -> Result<(Option<u32>, Option<u32>)> {
    for src in [TORCHRUN, OPEN_MPI, MPICH, SLURM] {
        if lookup(src.local_rank).is_some() {
            return local_of(lookup, &src, world_size);
        }
    }
    Ok((None, None))
}

/// Slurm's tasks on this node: `SLURM_NTASKS_PER_NODE`, else this node's entry of
/// `SLURM_TASKS_PER_NODE` (`2(x3),1`), found by `SLURM_NODEID` (or the only value when all
/// nodes have the same count).
fn slurm_local_size<'a>(
    lookup: &impl Fn(&str) -> Option<&'a str>,
) -> Result<(&'static str, Option<u32>)> {
    const PER_NODE: &str = "SLURM_NTASKS_PER_NODE";
    const TASKS: &str = "SLURM_TASKS_PER_NODE";
    if let Some(n) = number(lookup, PER_NODE)? {
        return Ok((PER_NODE, Some(n)));
    }
    let Some(spec) = lookup(TASKS) else {
        return Ok((TASKS, None));
    };
    let node = number(lookup, "SLURM_NODEID")?;
    let bad = || {
        Error::invalid(
            TASKS,
            format_args!("counts like 2(x3),1, got \"{}\"", Escaped(spec)),
        )
    };
    let mut index: u64 = 0;
    let mut uniform: Option<Option<u32>> = None;
    for item in spec.split(',') {
        let (count, repeat) = match item.split_once("(x") {
            Some((c, r)) => (c, r.strip_suffix(')').ok_or_else(bad)?),
            None => (item, "1"),
        };
        let count =
            u32::try_from(parse_u64(TASKS, count, 1, u64::from(u32::MAX)).map_err(|_| bad())?)
                .map_err(|_| bad())?;
        let repeat = parse_u64(TASKS, repeat, 1, u64::from(u32::MAX)).map_err(|_| bad())?;
        if let Some(n) = node {
            if u64::from(n) >= index && u64::from(n) - index < repeat {
                return Ok((TASKS, Some(count)));
            }
        }
        index = index.saturating_add(repeat);
        uniform = match uniform {
            None => Some(Some(count)),
            Some(Some(c)) if c == count => Some(Some(c)),
            _ => Some(None),
        };
    }
    if let Some(n) = node {
        return Err(Error::invalid(
            "SLURM_NODEID",
            format_args!("a node below the {index} of SLURM_TASKS_PER_NODE, got {n}"),
        ));
    }
    Ok((TASKS, uniform.flatten()))
}

/// `MASTER_ADDR`, else the first host of `SLURM_STEP_NODELIST` or `SLURM_NODELIST`.
fn master_addr<'a>(lookup: &impl Fn(&str) -> Option<&'a str>) -> Result<Option<HostName>> {
    if let Some(v) = lookup("MASTER_ADDR") {
        let mut host = HostName::new();
        if v.is_empty()
            || v.chars().any(|c| c.is_whitespace() || c.is_control())
            || host.push_str(v).is_err()
        {
            return Err(Error::invalid(
                "MASTER_ADDR",
                format_args!(
                    "a host name or address of 1 to {HOST_CAPACITY} bytes without spaces, got \"{}\"",
                    Escaped(v)
                ),
            ));
        }
        return Ok(Some(host));
    }
    for var in ["SLURM_STEP_NODELIST", "SLURM_NODELIST"] {
        if let Some(v) = lookup(var) {
            return Ok(Some(HostList::parse(var, v)?.first()));
        }
    }
    Ok(None)
}

/// `MASTER_PORT`, 1..=65535 (0 cannot be connected to).
fn master_port<'a>(lookup: &impl Fn(&str) -> Option<&'a str>) -> Result<Option<u16>> {
    match lookup("MASTER_PORT") {
        None => Ok(None),
        Some(v) => Ok(u16::try_from(parse_u64("MASTER_PORT", v, 1, 65535)?).ok()),
    }
}

#[cfg(test)]
mod tests;

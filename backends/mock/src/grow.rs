//! Grow, suspend, resume and memory statistics on the mock.
//!
//! A grow is a new communicator met like an init: the root's [`grow_id`](MockComm::grow_id)
//! makes its rendezvous (in this process: a lobby kept in a registry under the id, with the
//! parent's settings; across processes: a lobby this process hosts, as a process-spanning
//! init's), running ranks join it keeping their ranks and new ranks join it through
//! [`MockBackend::join_grown`](crate::MockBackend) as the ranks above. Every running rank is
//! given the id, as the trait asks; the root notes that it made it, and drops the rendezvous
//! once the grow is complete.
//!
//! A suspended mock rank refuses operations until resumed; the mock holds no device memory,
//! so its statistics are zeros but for whether it is suspended.

use crate::comm::MockComm;
use crate::lobby::{Joiner, Lobby};
use crate::shared::CommShared;
use crate::sync::lock;
use oxccl_core::traits::MemStats;
use oxccl_core::{check, Device, Error, Feature, Result, UniqueId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The rendezvous of in-process grows, by id, until the root's grow completes.
fn registry() -> &'static Mutex<HashMap<[u8; UniqueId::LEN], Arc<Lobby>>> {
    static GROWS: OnceLock<Mutex<HashMap<[u8; UniqueId::LEN], Arc<Lobby>>>> = OnceLock::new();
    GROWS.get_or_init(Mutex::default)
}

/// An in-process id no other grow of this process has.
fn fresh_id() -> UniqueId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut id = [0u8; UniqueId::LEN];
    id[..8].copy_from_slice(b"OXMGROW1");
    id[8..16].copy_from_slice(&n.to_le_bytes());
    id[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    UniqueId(id)
}

/// Joins grow `id` as `rank` of `size`: this process's registry for an in-process id, the
/// host of a process-spanning one.
fn join(
    id: &UniqueId,
    rank: u32,
    size: u32,
    device: Device,
    limit: Duration,
    make: impl FnOnce() -> Arc<Lobby>,
) -> Result<Arc<CommShared>> {
    match crate::transport::proc_id::ProcId::of(id) {
        Some(pid) => match crate::procs::host::local_host(&pid) {
            Some(host) => host.join(id, rank, size, Joiner::here(false, device), limit),
            None => crate::mirror::remote::join(&make(), &pid, rank, size, false, limit),
        },
        None => {
            let lobby = lock(registry()).get(&id.0).cloned().ok_or_else(|| {
                Error::invalid(
                    "id",
                    format_args!("the id of a grow the running root made in this process"),
                )
            })?;
            lobby.join(id, rank, size, Joiner::here(false, device), limit)
        }
    }
}

impl MockComm {
    fn lobby_like_mine(&self) -> Arc<Lobby> {
        let sh = self.sh();
        Arc::new(Lobby::new(
            sh.features,
            sh.plan.children(),
            sh.nb_polls,
            self.init_timeout,
        ))
    }

    /// [`oxccl_core::Reshape::grow_id`] of the mock (the call lock held by the caller).
    pub(crate) fn grow_id_rank(&self) -> Result<UniqueId> {
        self.sh().features.require(Feature::Grow)?;
        lock(&self.rank_state().life)
            .cycle
            .ensure_ready("make a grow id")?;
        let lobby = self.lobby_like_mine();
        let id = if crate::mirror::spans::spans(self.sh()) {
            crate::procs::host::start(&lobby, self.init_timeout)?
        } else {
            let id = fresh_id();
            lock(registry()).insert(id.0, lobby);
            id
        };
        *lock(&self.sh().grow_id) = Some(id);
        Ok(id)
    }

    /// [`oxccl_core::Reshape::grow`] of the mock (the call lock held by the caller).
    pub(crate) fn grow_rank(&self, size: u32, id: &UniqueId) -> Result<MockComm> {
        self.sh().features.require(Feature::Grow)?;
        check::grow(&self.ctx(), size)?;
        lock(&self.rank_state().life).cycle.ensure_ready("grow")?;
        let made_here = *lock(&self.sh().grow_id) == Some(*id);
        let joined = join(id, self.rk(), size, self.device, self.init_timeout, || {
            self.lobby_like_mine()
        });
        if made_here {
            // Every rank joined (the join waits for all): the rendezvous is spent.
            lock(registry()).remove(&id.0);
            *lock(&self.sh().grow_id) = None;
        }
        Ok(MockComm::from_shared(
            joined?,
            self.rk(),
            self.device,
            self.init_timeout,
        ))
    }

    /// [`oxccl_core::Suspend::suspend`] of the mock.
    pub(crate) fn suspend_rank(&self) -> Result<()> {
        self.sh().features.require(Feature::SuspendResume)?;
        lock(&self.rank_state().life).cycle.suspend()
    }

    /// [`oxccl_core::Suspend::resume`] of the mock.
    pub(crate) fn resume_rank(&self) -> Result<()> {
        self.sh().features.require(Feature::SuspendResume)?;
        lock(&self.rank_state().life).cycle.resume()
    }

    /// [`oxccl_core::Suspend::mem_stats`] of the mock: no device memory; whether it is suspended.
    pub(crate) fn mem_stats_rank(&self) -> Result<MemStats> {
        self.sh().features.require(Feature::MemStats)?;
        let state = lock(&self.rank_state().life).cycle.state();
        if state.is_dead() {
            lock(&self.rank_state().life)
                .cycle
                .ensure_ready("read memory statistics")?;
        }
        Ok(MemStats {
            suspended: state == oxccl_core::CommState::Suspended,
            ..MemStats::default()
        })
    }
}

/// [`oxccl_core::ReshapeBackend::join_grown`] of the mock.
pub(crate) fn join_grown(
    features: &oxccl_core::FeatureSet,
    id: &UniqueId,
    rank: u32,
    size: u32,
    device: Device,
    limit: Duration,
    make: impl FnOnce() -> Arc<Lobby>,
) -> Result<MockComm> {
    features.require(Feature::Grow)?;
    check::join_grown(id, rank, size)?;
    let shared = join(id, rank, size, device, limit, make)?;
    Ok(MockComm::from_shared(shared, rank, device, limit))
}

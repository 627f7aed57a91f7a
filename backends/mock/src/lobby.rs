//! Where the ranks of a communicator meet at init: the rendezvous on a unique id, rank by
//! rank, from different threads (and, through this process's host, from other processes), and
//! the settings every communicator made there gets.

use crate::fault::FaultPlan;
use crate::shared::CommShared;
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::{text, Device, Error, FeatureSet, Result, UniqueId};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How a rank joins a rendezvous.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Joiner {
    pub nonblocking: bool,
    /// The process of a rank joining through this process's host.
    pub from: Option<u32>,
    /// The device label of a rank of this process (see [`CommShared::same_device`]).
    pub device: Option<u32>,
}

impl Joiner {
    /// A rank of this process on `device`.
    pub(crate) fn here(nonblocking: bool, device: Device) -> Joiner {
        Joiner {
            nonblocking,
            from: None,
            device: Some(device.0),
        }
    }

    /// A rank whose device this process does not know: of another process (`from`), or a
    /// split's child.
    pub(crate) fn elsewhere(from: Option<u32>) -> Joiner {
        Joiner {
            nonblocking: false,
            from,
            device: None,
        }
    }
}

/// A communicator some but not all ranks joined.
struct Join {
    shared: Arc<CommShared>,
    /// Which ranks joined.
    seen: Vec<bool>,
    /// Blocking joiners still waiting: the last to give up removes the entry.
    waiting: u32,
}

/// Communicators being joined, by id.
type Joining = HashMap<[u8; UniqueId::LEN], Join>;

/// The rendezvous of a backend's communicators, and the settings each is made with.
pub(crate) struct Lobby {
    pub features: FeatureSet,
    pub plan: FaultPlan,
    pub nb_polls: u32,
    pub init_timeout: Duration,
    /// Communicators some but not all ranks have joined, by id.
    joining: Mutex<Joining>,
    cv: Condvar,
    /// Process-spanning ids whose rendezvous ended here (complete, or every waiter gave up):
    /// their host stops accepting (and takes its id out).
    ended: Mutex<HashSet<[u8; UniqueId::LEN]>>,
}

impl Lobby {
    /// A lobby making communicators with `features`, the fault `plan`, `nb_polls` polls of
    /// `InProgress` for nonblocking inits, and `init_timeout` for a blocking init's wait.
    pub(crate) fn new(
        features: FeatureSet,
        plan: FaultPlan,
        nb_polls: u32,
        init_timeout: Duration,
    ) -> Lobby {
        Lobby {
            features,
            plan,
            nb_polls,
            init_timeout,
            joining: Mutex::new(HashMap::new()),
            cv: Condvar::new(),
            ended: Mutex::new(HashSet::new()),
        }
    }

    /// A joining rank's lifecycle: initializing for the polls a nonblocking init (or the fault
    /// plan) owes, ready otherwise.
    fn start_life(&self, shared: &CommShared, rank: u32, nonblocking: bool) {
        let planned = shared.plan.init_polls(rank);
        let mut life = lock(&shared.rank(rank).life);
        if nonblocking || planned.is_some() {
            life.cycle = oxccl_core::state::lifecycle::Lifecycle::initializing();
            life.init_polls = planned.unwrap_or(self.nb_polls);
        }
        life.nonblocking = nonblocking;
    }

    /// How long an init waits for the other ranks.
    // Used by the transport across processes (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn init_limit(&self) -> Duration {
        self.init_timeout
    }

    /// Whether the rendezvous of `id` ended here (once: the mark is taken out).
    // Used by the transport across processes (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn take_ended(&self, id: &UniqueId) -> bool {
        lock(&self.ended).remove(&id.0)
    }

    /// Marks the rendezvous of `id` ended, for its host (process-spanning ids only).
    fn end_rendezvous(&self, id: &UniqueId) {
        if crate::transport::proc_id::ProcId::of(id).is_some() {
            lock(&self.ended).insert(id.0);
        }
    }

    /// A mirror of `rank` of a communicator of `size` ranks hosted by another process, with
    /// this lobby's settings and the rank's life started: its cross-rank steps run there (see
    /// [`crate::procs`]).
    // Used by the transport across processes (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn mirror(&self, rank: u32, size: u32, nonblocking: bool) -> Arc<CommShared> {
        let mirror = CommShared::new(size, self.features, self.plan.clone(), self.nb_polls, false);
        self.start_life(&mirror, rank, nonblocking);
        mirror
    }

    /// Joins `id` in this process (the rendezvous of threads, and of the host's proxies:
    /// `from` is the process of a proxy's rank). A blocking join waits up to `limit` for the
    /// other ranks; past it the rank is aborted and the error names the ranks still missing.
    pub(crate) fn join(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        how: Joiner,
        limit: Duration,
    ) -> Result<Arc<CommShared>> {
        let Joiner {
            nonblocking,
            from,
            device,
        } = how;
        let shared = {
            let mut joining = lock(&self.joining);
            let j = joining.entry(id.0).or_insert_with(|| {
                let s =
                    CommShared::new(size, self.features, self.plan.clone(), self.nb_polls, false);
                s.joined.store(0, Ordering::Release);
                if let Some(p) = crate::transport::proc_id::ProcId::of(id) {
                    // Every member derives its shrinks' ids from this token.
                    let _ = s.token.set(p.token);
                }
                Join {
                    shared: s,
                    seen: vec![false; size as usize],
                    waiting: 0,
                }
            });
            if j.shared.size != size {
                return Err(Error::Mismatch {
                    what: "size",
                    detail: text!(
                        "rank {rank} joins with size {size}, the communicator has {}",
                        j.shared.size
                    ),
                });
            }
            match j.seen.get_mut(rank as usize) {
                Some(s) if !*s => *s = true,
                _ => {
                    return Err(Error::invalid(
                        "rank",
                        format_args!("a rank not yet joined to this id, {rank} already is"),
                    ))
                }
            }
            if let Some(pid) = from {
                // Before the rank counts as joined: once init completes, every rank of this
                // process sees that the communicator spans processes.
                j.shared.hosted.store(true, Ordering::Release);
                if let Some(p) = lock(&j.shared.pids).get_mut(rank as usize) {
                    *p = pid;
                }
            }
            if let (Some(d), Some(slot)) = (device, lock(&j.shared.devices).get_mut(rank as usize))
            {
                // Before the rank counts as joined, so every rank sees it once init completes.
                *slot = Some(d);
            }
            j.waiting += u32::from(!nonblocking);
            let shared = j.shared.clone();
            let n = shared.joined.fetch_add(1, Ordering::AcqRel) + 1;
            if n == size {
                joining.remove(&id.0);
                self.end_rendezvous(id);
            }
            shared
        };
        self.cv.notify_all();
        self.start_life(&shared, rank, nonblocking);
        if nonblocking {
            return Ok(shared);
        }
        let start = Instant::now();
        let mut joining = lock(&self.joining);
        while shared.joined.load(Ordering::Acquire) < size {
            if start.elapsed() >= limit {
                let missing = self.give_up(&mut joining, id, &shared);
                drop(joining);
                let e = Error::Timeout {
                    what: text!(
                        "rank {rank} waiting for rank(s) {} of {size} to join",
                        crate::messages::rank_list(&missing)
                    ),
                    after_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
                };
                shared.abort(rank, "init timed out");
                return Err(e);
            }
            joining = wait_for(&self.cv, joining, TICK);
        }
        Ok(shared)
    }

    /// A blocking joiner of `id` gives up: the ranks still missing; the entry goes with the
    /// last waiter (a late rank then starts a rendezvous of its own, and times out alone).
    fn give_up(&self, joining: &mut Joining, id: &UniqueId, shared: &Arc<CommShared>) -> Vec<u32> {
        let Some(j) = joining
            .get_mut(&id.0)
            .filter(|j| Arc::ptr_eq(&j.shared, shared))
        else {
            return Vec::new();
        };
        j.waiting = j.waiting.saturating_sub(1);
        let missing = (0..j.seen.len() as u32)
            .filter(|r| !j.seen[*r as usize])
            .collect();
        if j.waiting == 0 {
            joining.remove(&id.0);
            self.end_rendezvous(id);
        }
        missing
    }
}

//! The mock as a [`Backend`]: communicators made by rendezvous on a unique id, rank by rank,
//! from different threads, as with NCCL's `ncclCommInitRank`.

use crate::comm::MockComm;
use crate::fault::FaultPlan;
use crate::limits::{DEFAULT_INIT_TIMEOUT, DEFAULT_VERSION};
use crate::shared::CommShared;
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::{
    text, Backend, CheckCtx, CommConfig, CommState, Device, Error, Feature, FeatureSet, Progress,
    Result, UniqueId, Version,
};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

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

struct Inner {
    features: FeatureSet,
    plan: FaultPlan,
    nb_polls: u32,
    init_timeout: Duration,
    /// Communicators some but not all ranks have joined, by id.
    joining: Mutex<Joining>,
    cv: Condvar,
    counter: AtomicU64,
    /// Whether `unique_id` makes ids that ranks of other processes can join.
    processes: AtomicBool,
    /// Process-spanning ids whose rendezvous ended here (complete, or every waiter gave up):
    /// their host stops accepting (and takes its id out).
    ended: Mutex<HashSet<[u8; UniqueId::LEN]>>,
}

/// A mock library: [`Backend::unique_id`] then [`Backend::init_rank`] on every rank's thread.
///
/// Groups ([`Backend::group_start`], [`Backend::group_end`]) are per thread and span every mock
/// communicator, whichever backend or world made it: any `MockBackend` opens and closes them.
#[derive(Clone)]
pub struct MockBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockBackend")
            .field("version", &self.inner.features.version())
            .finish()
    }
}

impl Default for MockBackend {
    fn default() -> Self {
        MockBackend::new()
    }
}

impl MockBackend {
    /// A joining rank's lifecycle: initializing for the polls a nonblocking init (or the fault
    /// plan) owes, ready otherwise.
    fn start_life(&self, shared: &CommShared, rank: u32, nonblocking: bool) {
        let planned = shared.plan.init_polls(rank);
        let mut life = lock(&shared.rank(rank).life);
        if nonblocking || planned.is_some() {
            life.cycle = oxccl_core::state::lifecycle::Lifecycle::initializing();
            life.init_polls = planned.unwrap_or(self.inner.nb_polls);
        }
        life.nonblocking = nonblocking;
    }

    /// A backend imitating NCCL [`DEFAULT_VERSION`], without faults.
    pub fn new() -> MockBackend {
        MockBackend::with_options(
            FeatureSet::for_version(DEFAULT_VERSION),
            FaultPlan::new(),
            1,
            DEFAULT_INIT_TIMEOUT,
        )
    }

    /// A backend with `features`, the fault `plan` for every communicator it makes,
    /// `nonblocking_polls` polls of `InProgress` for nonblocking inits, and how long an init
    /// waits for the other ranks before it fails with [`Error::Timeout`] (a blocking init in
    /// `init_rank`, a nonblocking one in the first `issue`, which aborts it; any `Duration`,
    /// `Duration::MAX` included, is fine). A plan with a code that is not an error is refused
    /// by each `init_rank` ([`FaultPlan::validate`]); its ranks are not checked, since one plan
    /// serves communicators of every size.
    pub fn with_options(
        features: FeatureSet,
        plan: FaultPlan,
        nonblocking_polls: u32,
        init_timeout: Duration,
    ) -> MockBackend {
        MockBackend {
            inner: Arc::new(Inner {
                features,
                plan,
                nb_polls: nonblocking_polls,
                init_timeout,
                joining: Mutex::new(HashMap::new()),
                cv: Condvar::new(),
                counter: AtomicU64::new(0),
                processes: AtomicBool::new(false),
                ended: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// A backend imitating NCCL [`DEFAULT_VERSION`] whose ids span processes (see
    /// [`MockBackend::across_processes`]).
    pub fn for_processes() -> MockBackend {
        MockBackend::new().across_processes()
    }

    /// This backend's settings in a new backend whose [`Backend::unique_id`] makes ids that
    /// ranks in other processes of this machine can join: this process hosts the communicator
    /// (see [`crate::procs`]). `init_rank` accepts both kinds of id on any backend.
    ///
    /// Its communicators split like in-process ones; the children span processes too, each
    /// hosted by the process of its rank 0.
    pub fn across_processes(self) -> MockBackend {
        let i = &self.inner;
        let b = MockBackend::with_options(i.features, i.plan.clone(), i.nb_polls, i.init_timeout);
        b.inner.processes.store(true, Ordering::Release);
        b
    }

    /// Whether this backend's ids span processes.
    pub fn spans_processes(&self) -> bool {
        self.inner.processes.load(Ordering::Acquire)
    }

    /// How long an init waits for the other ranks.
    // Used by the transport across processes (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn init_limit(&self) -> Duration {
        self.inner.init_timeout
    }

    /// Whether the rendezvous of `id` ended here (once: the mark is taken out).
    // Used by the transport across processes (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn take_ended(&self, id: &UniqueId) -> bool {
        lock(&self.inner.ended).remove(&id.0)
    }

    /// Marks the rendezvous of `id` ended, for its host (process-spanning ids only).
    fn end_rendezvous(&self, id: &UniqueId) {
        if crate::procs::ProcId::of(id).is_some() {
            lock(&self.inner.ended).insert(id.0);
        }
    }
}

/// splitmix64: spreads a counter and a clock over the id's bytes.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Backend for MockBackend {
    type Comm = MockComm;

    fn version(&self) -> Version {
        self.inner.features.version()
    }

    fn features(&self) -> &FeatureSet {
        &self.inner.features
    }

    fn unique_id(&self) -> Result<UniqueId> {
        if self.spans_processes() {
            return crate::procs::host::start(self, self.inner.init_timeout);
        }
        let n = self.inner.counter.fetch_add(1, Ordering::Relaxed);
        let clock = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seed = clock
            ^ (Arc::as_ptr(&self.inner) as u64).rotate_left(32)
            ^ u64::from(std::process::id());
        let mut id = [0u8; UniqueId::LEN];
        for (i, chunk) in id.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(
                &mix(seed ^ mix(n.wrapping_mul(31).wrapping_add(i as u64))).to_le_bytes(),
            );
        }
        Ok(UniqueId(id))
    }

    fn init_rank(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
    ) -> Result<MockComm> {
        self.init_rank_within(id, rank, size, device, cfg, self.inner.init_timeout)
    }

    fn init_rank_within(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
        limit: Duration,
    ) -> Result<MockComm> {
        CheckCtx {
            rank,
            size,
            features: &self.inner.features,
        }
        .validate()?;
        crate::limits::check_size("size", size)?;
        self.inner.plan.validate(None)?;
        cfg.check_for(self.version())?;
        let nonblocking = cfg.is_nonblocking();
        if nonblocking {
            self.inner.features.require(Feature::NonBlocking)?;
        }
        let shared = match crate::procs::ProcId::of(id) {
            Some(pid) => match crate::procs::host::local_host(&pid) {
                // The host's own ranks join its rendezvous like threads do.
                Some(host) => {
                    host.join_shared(id, rank, size, Joiner::here(nonblocking, device), limit)?
                }
                None => self.join_remote(&pid, rank, size, nonblocking, limit)?,
            },
            None => self.join_shared(id, rank, size, Joiner::here(nonblocking, device), limit)?,
        };
        if !nonblocking {
            // Every rank of this process has joined: as NCCL does at init, each refuses a
            // device another rank is on ("Duplicate GPU detected"), so all of them fail.
            if let Some(other) = shared.same_device(rank) {
                shared.abort(rank, "duplicate device");
                return Err(Error::Backend {
                    code: oxccl_core::ResultCode::INVALID_USAGE,
                    text: text!(
                        "invalid usage: duplicate device: rank {rank} and rank {other} are both on \
                         device {} (one rank per device)",
                        device.0
                    ),
                    last: text!(""),
                });
            }
        }
        Ok(MockComm::from_shared(shared, rank, device, limit))
    }

    fn group_start(&self) -> Result<()> {
        crate::group_call::start()
    }

    fn group_end(&self) -> Result<Progress> {
        // A nonblocking communicator's group is still "being launched" for its polls.
        let mut progress = Progress::Done;
        for (c, r) in crate::group_call::end()? {
            let polls = c.nb_polls;
            let mut life = lock(&c.rank(r).life);
            if life.nonblocking && polls > 0 && life.cycle.state() == CommState::Ready {
                life.op_polls = polls;
                progress = Progress::InProgress;
            }
        }
        Ok(progress)
    }
}

impl MockBackend {
    /// Joins `id` through another process's host: a mirror of this rank whose cross-rank steps
    /// run there (see [`crate::procs`]). Returns once every rank joined (or `limit` passed).
    pub(crate) fn join_remote(
        &self,
        pid: &crate::procs::ProcId,
        rank: u32,
        size: u32,
        nonblocking: bool,
        limit: Duration,
    ) -> Result<Arc<CommShared>> {
        let link = crate::procs::link::Link::connect(pid, rank, size, limit)?;
        let mirror = CommShared::new(
            size,
            self.inner.features,
            self.inner.plan.clone(),
            self.inner.nb_polls,
            false,
        );
        self.start_life(&mirror, rank, nonblocking);
        let _ = mirror.link.set(Arc::new(link));
        Ok(mirror)
    }

    /// Joins `id` in this process (the rendezvous of threads, and of the host's proxies:
    /// `from` is the process of a proxy's rank). A blocking join waits up to `limit` for the
    /// other ranks; past it the rank is aborted and the error names the ranks still missing.
    pub(crate) fn join_shared(
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
            let mut joining = lock(&self.inner.joining);
            let j = joining.entry(id.0).or_insert_with(|| {
                let s = CommShared::new(
                    size,
                    self.inner.features,
                    self.inner.plan.clone(),
                    self.inner.nb_polls,
                    false,
                );
                s.joined.store(0, Ordering::Release);
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
        self.inner.cv.notify_all();
        self.start_life(&shared, rank, nonblocking);
        if nonblocking {
            return Ok(shared);
        }
        let start = Instant::now();
        let mut joining = lock(&self.inner.joining);
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
            joining = wait_for(&self.inner.cv, joining, TICK);
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

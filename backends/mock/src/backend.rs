//! The mock as a [`Backend`]: communicators made by rendezvous on a unique id, rank by rank,
//! from different threads, as with NCCL's `ncclCommInitRank`.

use crate::comm::MockComm;
use crate::fault::FaultPlan;
use crate::limits::{DEFAULT_INIT_TIMEOUT, DEFAULT_VERSION};
use crate::lobby::{Joiner, Lobby};
use crate::sync::lock;
use oxccl_core::{
    text, Backend, CheckCtx, CommConfig, CommState, Device, Error, Feature, FeatureSet, Progress,
    Result, UniqueId, Version,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What the clones of one backend share.
struct Inner {
    /// Where this backend's communicators meet, with their settings.
    lobby: Arc<Lobby>,
    /// Ids made so far (mixed into the next one).
    counter: AtomicU64,
    /// Whether `unique_id` makes ids that ranks of other processes can join.
    processes: AtomicBool,
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
            .field("version", &self.inner.lobby.features.version())
            .finish()
    }
}

impl Default for MockBackend {
    fn default() -> Self {
        MockBackend::new()
    }
}

impl MockBackend {
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
                lobby: Arc::new(Lobby::new(features, plan, nonblocking_polls, init_timeout)),
                counter: AtomicU64::new(0),
                processes: AtomicBool::new(false),
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
        let l = &self.inner.lobby;
        let b = MockBackend::with_options(l.features, l.plan.clone(), l.nb_polls, l.init_timeout);
        b.inner.processes.store(true, Ordering::Release);
        b
    }

    /// Whether this backend's ids span processes.
    pub fn spans_processes(&self) -> bool {
        self.inner.processes.load(Ordering::Acquire)
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
        self.inner.lobby.features.version()
    }

    fn features(&self) -> &FeatureSet {
        &self.inner.lobby.features
    }

    fn device_count(&self) -> Result<u32> {
        Ok(u32::MAX)
    }

    fn unique_id(&self) -> Result<UniqueId> {
        if self.spans_processes() {
            return crate::procs::host::start(&self.inner.lobby, self.inner.lobby.init_timeout);
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
        self.init_rank_within(id, rank, size, device, cfg, self.inner.lobby.init_timeout)
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
            features: &self.inner.lobby.features,
        }
        .validate()?;
        crate::limits::check_size("size", size)?;
        self.inner.lobby.plan.validate(None)?;
        cfg.check_for(self.version())?;
        let nonblocking = cfg.is_nonblocking();
        if nonblocking {
            self.inner.lobby.features.require(Feature::NonBlocking)?;
        }
        let shared = match crate::transport::proc_id::ProcId::of(id) {
            Some(pid) => match crate::procs::host::local_host(&pid) {
                // The host's own ranks join its rendezvous like threads do.
                Some(host) => {
                    host.join(id, rank, size, Joiner::here(nonblocking, device), limit)?
                }
                None => crate::mirror::remote::join(
                    &self.inner.lobby,
                    &pid,
                    rank,
                    size,
                    nonblocking,
                    limit,
                )?,
            },
            None => {
                let how = Joiner::here(nonblocking, device);
                self.inner.lobby.join(id, rank, size, how, limit)?
            }
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
        Ok(
            MockComm::from_shared(shared, rank, device, limit).with_signals(
                oxccl_core::one_sided::SignalLimits::from_config(cfg, Default::default()),
            ),
        )
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

impl oxccl_core::ReshapeBackend for MockBackend {
    fn join_grown(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
    ) -> Result<MockComm> {
        cfg.check_for(self.version())?;
        let l = &self.inner.lobby;
        let joined =
            crate::grow::join_grown(&l.features, id, rank, size, device, l.init_timeout, || {
                Arc::new(Lobby::new(
                    l.features,
                    l.plan.clone(),
                    l.nb_polls,
                    l.init_timeout,
                ))
            })?;
        Ok(
            joined.with_signals(oxccl_core::one_sided::SignalLimits::from_config(
                cfg,
                Default::default(),
            )),
        )
    }
}

//! A world: N communicators of one mock communicator, rank i at index i.

use crate::comm::MockComm;
use crate::fault::FaultPlan;
use crate::limits::{check_size, DEFAULT_INIT_TIMEOUT, DEFAULT_VERSION};
use crate::shared::CommShared;
use oxccl_core::{CommConfig, Device, Error, Feature, FeatureSet, Result, Version};
use std::time::Duration;

/// Makes worlds of in-process ranks: communicators with NCCL's semantics on host memory, for
/// tests without a GPU (calls that disagree across ranks, which NCCL would hang on, are
/// errors here). Through `oxccl`, it is `oxccl::mock::World`.
///
/// ```
/// use oxccl_core::Communicator;
/// use oxccl_mock::World;
///
/// fn main() -> oxccl_core::Result<()> {
///     let comms = World::new(2)?;
///     assert_eq!((comms[0].rank(), comms[1].size()), (0, 2));
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct World;

impl World {
    /// `n` ranks (`1 <= n <= MAX_RANKS`) imitating NCCL [`DEFAULT_VERSION`], blocking, without faults.
    #[allow(clippy::new_ret_no_self)] // a world is its communicators, one per rank
    pub fn new(n: u32) -> Result<Vec<MockComm>> {
        World::builder(n).build()
    }

    /// A world of `n` ranks with options.
    pub fn builder(n: u32) -> WorldBuilder {
        WorldBuilder {
            n,
            features: FeatureSet::for_version(DEFAULT_VERSION),
            nonblocking: None,
            plan: FaultPlan::new(),
            init_timeout: DEFAULT_INIT_TIMEOUT,
            config: CommConfig::new(),
        }
    }
}

/// Options of a world: the library it imitates, nonblocking init, faults.
#[derive(Debug, Clone)]
pub struct WorldBuilder {
    n: u32,
    features: FeatureSet,
    nonblocking: Option<u32>,
    plan: FaultPlan,
    init_timeout: Duration,
    config: CommConfig,
}

impl WorldBuilder {
    /// Imitates NCCL `version` (its features by version gates).
    pub fn version(mut self, version: Version) -> WorldBuilder {
        self.features = FeatureSet::for_version(version);
        self
    }

    /// Imitates a library with exactly these features (e.g. one with a feature hidden).
    pub fn features(mut self, features: FeatureSet) -> WorldBuilder {
        self.features = features;
        self
    }

    /// Nonblocking communicators: each starts `Initializing` and its `poll` answers
    /// `InProgress` `polls` times before `Done`; nonblocking splits do the same. A group end
    /// that submitted work of a nonblocking rank returns `InProgress` and that rank's `poll`
    /// answers `InProgress` `polls` more times (other calls on it are refused meanwhile, as
    /// NCCL refuses them); `finalize` returns `InProgress`, then `poll` answers it `polls` times
    /// and until the rank's queued work has run, then `Done` (state `Finalized`).
    pub fn nonblocking(mut self, polls: u32) -> WorldBuilder {
        self.nonblocking = Some(polls);
        self
    }

    /// How long an operation waits for a nonblocking init (or split) of a rank before it
    /// aborts that rank with [`Error::Timeout`] (default [`DEFAULT_INIT_TIMEOUT`]).
    pub fn init_timeout(mut self, limit: Duration) -> WorldBuilder {
        self.init_timeout = limit;
        self
    }

    /// The communicators' config, as an init would take it: checked against the imitated
    /// release at `build`; of its fields the mock models `numRmaSig` and `numRmaCtx` (the
    /// signal indices and contexts one-sided calls may name).
    pub fn config(mut self, cfg: CommConfig) -> WorldBuilder {
        self.config = cfg;
        self
    }

    /// Faults to inject.
    pub fn faults(mut self, plan: FaultPlan) -> WorldBuilder {
        self.plan = plan;
        self
    }

    /// The communicators, rank i at index i (device label i). No thread is started: each
    /// stream the caller makes has its worker. Errors: [`Error::InvalidArgument`] on `"n"` (0
    /// or above [`MAX_RANKS`](crate::MAX_RANKS)) or `"plan"` (see [`FaultPlan::validate`]), and
    /// [`Error::Unsupported`] for nonblocking on a release without it.
    pub fn build(self) -> Result<Vec<MockComm>> {
        if self.n == 0 {
            return Err(Error::invalid(
                "n",
                format_args!("at least one rank, got 0"),
            ));
        }
        check_size("n", self.n)?;
        self.plan.validate(Some(self.n))?;
        if self.nonblocking.is_some() {
            self.features.require(Feature::NonBlocking)?;
        }
        self.config.check_for(self.features.version())?;
        let signals =
            oxccl_core::one_sided::SignalLimits::from_config(&self.config, Default::default());
        let shared = CommShared::new(
            self.n,
            self.features,
            self.plan,
            self.nonblocking.unwrap_or(0),
            self.nonblocking.is_some(),
        );
        Ok((0..self.n)
            .map(|r| {
                MockComm::from_shared(shared.clone(), r, Device(r), self.init_timeout)
                    .with_signals(signals)
            })
            .collect())
    }
}

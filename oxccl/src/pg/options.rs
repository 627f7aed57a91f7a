//! What a process group is configured with.

use crate::env_vars::EnvVars;
use crate::recorder::Recorder;
use oxccl_core::{CommConfig, Device};
use oxccl_rules::env::ErrorHandling;
use oxccl_rules::tune::file::{tune_from_env, TUNE_FILE_VAR};
use std::time::Duration;

/// The default timeout of an NCCL process group (c10d's: 10 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Options of a process group, c10d's `ProcessGroupNCCL::Options` and `init_process_group`
/// arguments.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// How long an operation may run before its work reports a timeout. It also bounds the
    /// making of the group's communicator (init or split): members mark their arrival in the
    /// store first, and a member that never comes is named in the others'
    /// [`crate::Error::Timeout`]; the backend's init gets what is left (on NCCL a blocking
    /// init runs on a thread of its own, abandoned past the limit: see
    /// [`oxccl_core::Backend::init_rank_within`]).
    pub timeout: Duration,
    /// A device bound at init: communicators are created at once (eagerly) on it, and
    /// subgroups split at `new_group`. `None`: created on first use, on the device the
    /// bootstrap chose.
    pub bound_device: Option<Device>,
    /// The device used when none is bound (the launcher's LOCAL_RANK).
    pub device: Device,
    /// The communicators' configuration (nonblocking, CTAs, net name, …).
    pub config: CommConfig,
    /// Record start events so works report their duration.
    pub timing: bool,
    /// A description, shown in errors and traces (the default group is "default_pg").
    pub desc: String,
    /// What the watchdog does when an operation fails or times out (c10d's
    /// `TORCH_NCCL_ASYNC_ERROR_HANDLING`; default SkipCleanUp, as PyTorch: the process ends).
    pub error_handling: ErrorHandling,
    /// Write the flight recorder's dump when an operation times out. The rank also sets a
    /// signal in the store, and every rank whose default group dumps on timeout dumps too when
    /// it sees it (every [`PgOptions::coord_check`]) and reports that in the store; the rank
    /// that timed out keeps its process (and the store it may host) alive until every rank
    /// reported, or [`PgOptions::wait_timeout_dump`] passed, before its error-handling mode
    /// ends it: one timeout leaves every rank's dump.
    pub dump_on_timeout: bool,
    /// Queue every work to the process's watchdog (needed for the error-handling mode,
    /// completion hooks and recorder states; `Work::wait` works without it).
    pub watchdog: bool,
    /// Start the heartbeat monitor with this limit (c10d's monitoring; `None`: off).
    pub heartbeat: Option<Duration>,
    /// Check the inputs of every collective for NaNs first (f16, bf16, f32, f64): an input
    /// with one is refused, naming the operation, the rank and the buffer. Costs a pass over
    /// the input and a synchronization of the group's stream (c10d's `TORCH_NCCL_NAN_CHECK`).
    pub nan_check: bool,
    /// Where flight-recorder dumps go (a default group's option; `None`: `OXCCL_TRACE_DIR`,
    /// or no dumps when that is unset too).
    pub trace_dir: Option<std::path::PathBuf>,
    /// The flight recorder operations are recorded in (`None`: the process's, sized by
    /// `OXCCL_TRACE_BUFFER_SIZE`). Subgroups use their parent's.
    pub recorder: Option<Recorder>,
    /// Which buffer mode each collective uses per size (`oxccl tune` measures one;
    /// `OXCCL_TUNE_FILE` loads it): applies to buffers of the library's allocator
    /// ([`crate::buffer::Memory::CommBuf`]); plain buffers are always used as they are.
    /// Every rank must have the same table: they are compared when the communicator is made.
    /// `None`: every buffer as it is.
    pub tune: Option<std::sync::Arc<oxccl_rules::tune::TuneTable>>,
    /// Issue on a high-priority stream (c10d's `is_high_priority_stream`,
    /// `TORCH_NCCL_HIGH_PRIORITY`): the communicator's stream gets the device's greatest
    /// priority, so collectives overtake queued compute kernels.
    pub high_priority: bool,
    /// Publish this rank's progress through the store and, when a collective times out, name
    /// the ranks that never joined it (c10d's `TORCH_NCCL_DESYNC_DEBUG`; see
    /// [`super::ProcessGroup::desync_report`]). The timed-out work's own error (from
    /// [`super::Work::wait`], [`super::Work::error`]) ends with the verdict, and the abort's
    /// reason starts with it; also under blocking wait. Needs the watchdog (it publishes).
    pub desync_debug: bool,
    /// How long a rank that failed may take, from the failure, for its own flight-recorder
    /// dump and (with [`PgOptions::dump_on_timeout`]) for every other rank's report that it
    /// dumped, before it applies its error-handling mode (c10d's
    /// `TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC`): a dump stuck on a hung filesystem, or a rank
    /// that never dumps, must not keep a broken process alive for ever.
    pub wait_timeout_dump: Duration,
    /// How often this rank looks in the store for another rank's dump request, to dump its own
    /// flight recorder too (c10d's `TORCH_NCCL_COORD_CHECK_MILSEC`). Used by a default group
    /// with [`PgOptions::dump_on_timeout`] and a dump directory.
    pub coord_check: Duration,
    /// Bound on waiting for a nonblocking communicator's init or split (c10d's
    /// `TORCH_NCCL_NONBLOCKING_TIMEOUT`): past it the communicator is aborted and the operation
    /// that waited fails with a timeout at once, the library's abort running on a thread of its
    /// own ([`crate::pg::ProcessGroup::comm_state`] is `Aborting` until it returns, then
    /// `Aborted`; [`crate::wait_for_aborts`]). `None`: unbounded (the backend's own limit
    /// remains).
    pub nonblocking_timeout: Option<Duration>,
    /// Who runs the all-reduces of a group whose ranks share a node (`OXCCL_PEER_KERNELS`):
    /// oxccl's own kernels where they beat NCCL (`Auto`), NCCL alone, or one kernel wherever
    /// it fits ([`oxccl_core::peer_kernels`]). Every member must have the same. Set up with the
    /// communicator, before its first operation.
    pub peer_kernels: oxccl_core::peer_kernels::PeerPolicy,
    /// Go on without a lost rank (`OXCCL_ELASTIC`; see [`crate::pg::elastic`]): when a member
    /// dies or stops answering, the survivors stop what is in flight, agree through the store
    /// on who is alive, shrink every group that held the lost rank and go on; the work in
    /// flight fails with [`crate::Error::MembersLost`]. A default group's option (its
    /// subgroups follow it); every rank must set the same. Under it the error-handling mode
    /// only records ([`oxccl_rules::elastic::error_handling`]): the process is never
    /// ended, and a timed-out wait does not abort the communicator (the decision revokes it).
    pub elastic: bool,
    /// How long survivors wait for each other before deciding who goes on
    /// (`OXCCL_ELASTIC_WINDOW_MS`): a live rank that has not joined the decision by then is
    /// left out, and refused if it comes later.
    pub elastic_window: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            timeout: DEFAULT_TIMEOUT,
            bound_device: None,
            device: Device(0),
            config: CommConfig::new(),
            timing: false,
            desc: String::from("undefined"),
            error_handling: ErrorHandling::SkipCleanUp,
            dump_on_timeout: false,
            watchdog: true,
            heartbeat: Some(Duration::from_secs(600)),
            nan_check: false,
            trace_dir: None,
            recorder: None,
            tune: None,
            high_priority: false,
            desync_debug: false,
            wait_timeout_dump: Duration::from_secs(60),
            coord_check: Duration::from_secs(1),
            nonblocking_timeout: Some(Duration::from_secs(30 * 60)),
            peer_kernels: oxccl_core::peer_kernels::PeerPolicy::Auto,
            elastic: false,
            elastic_window: Duration::from_millis(1000),
        }
    }
}

impl PgOptions {
    /// The device communicators are made on.
    pub fn device(&self) -> Device {
        self.bound_device.unwrap_or(self.device)
    }
}

impl PgOptions {
    /// Options from the `OXCCL_*` configuration (see `oxccl_rules::env::VARIABLES`), with the
    /// caller's explicit timeout if any (seed case 10's precedence:
    /// [`oxccl_rules::env::effective_timeout`]).
    pub fn from_config(
        env: &oxccl_rules::env::EnvConfig,
        explicit_timeout: Option<Duration>,
    ) -> PgOptions {
        PgOptions {
            timeout: env.timeout_for(explicit_timeout, None),
            timing: env.enable_timing,
            config: CommConfig::new().blocking(!env.nonblocking),
            error_handling: env.error_handling(),
            dump_on_timeout: env.dump_on_timeout,
            nan_check: env.nan_check,
            heartbeat: env.enable_monitoring.then_some(env.heartbeat_timeout),
            high_priority: env.high_priority,
            // Also under blocking wait: the user's `wait` then names the lagging ranks itself.
            desync_debug: env.desync_debug,
            wait_timeout_dump: env.wait_timeout_dump,
            coord_check: env.coord_check,
            nonblocking_timeout: env.nonblocking_timeout,
            peer_kernels: env.peer_kernels,
            elastic: env.elastic,
            elastic_window: env.elastic_window,
            ..PgOptions::default()
        }
    }

    /// [`PgOptions::from_vars`] over this process's environment.
    pub fn from_env(explicit_timeout: Option<Duration>) -> oxccl_core::Result<PgOptions> {
        PgOptions::from_vars(&EnvVars::from_process(), explicit_timeout)
    }

    /// [`PgOptions::from_config`] over `vars`' settings ([`EnvVars::settings`]): `OXCCL_*`
    /// variables, and PyTorch's names for them where those are unset (`TORCH_NCCL_*`; see
    /// [`oxccl_rules::env::TORCH_VARIABLES`]), plus the tune table of `OXCCL_TUNE_FILE`. A
    /// variable set to a value it does not accept ("abc" for a boolean) is an error naming it.
    pub fn from_vars(
        vars: &EnvVars,
        explicit_timeout: Option<Duration>,
    ) -> oxccl_core::Result<PgOptions> {
        let env = vars.settings().config?;
        let mut opts = PgOptions::from_config(&env, explicit_timeout);
        opts.tune = tune_from_env(vars.get(TUNE_FILE_VAR))?;
        Ok(opts)
    }
}

/// A default group's options as made: "default_pg" unless described, and an elastic group's
/// error handling (a lost rank is survived, not fatal).
pub(crate) fn default_group_options(opts: &mut PgOptions) {
    if opts.desc == "undefined" {
        opts.desc = String::from("default_pg");
    }
    if opts.elastic {
        opts.error_handling = oxccl_rules::elastic::error_handling(opts.error_handling);
    }
}

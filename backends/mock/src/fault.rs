//! The fault plan: failures a test injects into a mock world, per rank and per operation.
//!
//! Operations are numbered per rank of a communicator, **0-based**, in issue order: every call
//! of `issue` that the argument checks and the state check accept counts (collectives, barrier,
//! send and recv alike; ops queued inside a group count when issued, not at group end).
//!
//! What each rank sees:
//! * [`FaultPlan::fail_op`]: that `issue` returns `Err(Backend { code, .. })` at once and the
//!   communicator becomes `Failed` with that error (its `poll` returns it). Peers that wait for
//!   this rank in a collective (or a recv) get `Err(Remote { .. })` through `poll`.
//! * [`FaultPlan::hang_op`]: the operation is accepted, then blocks its stream before joining the
//!   collective, until the rank is aborted; peers waiting on it get `Remote` once it is aborted.
//! * [`FaultPlan::lose_rank`]: the operation is accepted; when the stream reaches it the rank
//!   vanishes: its own `poll` reports `Backend { code: SystemError, .. }`, and every peer blocked
//!   (now or later) in an operation that needs it gets `Remote` at once.
//! * [`FaultPlan::delay_op`]: the operation runs after sleeping on its stream.
//! * [`FaultPlan::init_in_progress`]: the rank's communicator starts `Initializing` and its
//!   `poll` returns `InProgress` that many times before `Done` (even in a blocking world);
//!   [`FaultPlan::init_never_completes`]: for ever.
//! * [`FaultPlan::slow_abort`]: aborting the rank's communicator takes that long, as NCCL's
//!   release of a communicator does: an abort on the caller's thread returns after it (the
//!   state is `Aborted` at once); an abort in the background
//!   ([`oxccl_core::CommAbort::abort_in_background`]) is `Aborting` for that long, on a thread
//!   of its own, then `Aborted`. Peers are woken at once either way.
//!
//! A plan applies to the communicators a world (or a backend) creates directly; children made by
//! `split` use the plan given by [`FaultPlan::in_children`] (none by default), with child ranks.

use oxccl_core::{Error, Result, ResultCode};
use std::time::Duration;

/// What happens to one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `issue` fails with this code and the communicator fails.
    Fail(ResultCode),
    /// The operation blocks its stream until the rank is aborted.
    Hang,
    /// The rank disappears when its stream reaches the operation.
    Lose,
    /// The operation waits this long on its stream before running.
    Delay(Duration),
}

/// One injected fault: `kind` on operation `op` (0-based) of `rank`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The rank it hits.
    pub rank: u32,
    /// The 0-based index of the operation on that rank.
    pub op: u64,
    /// What happens.
    pub kind: FaultKind,
}

/// Faults to inject into a world; build it with the chained methods. Empty by default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultPlan {
    faults: Vec<Fault>,
    init_polls: Vec<(u32, u32)>,
    abort_delays: Vec<(u32, Duration)>,
    children: Option<Box<FaultPlan>>,
}

/// The init polls that never run out: an init planned so never completes.
pub const INIT_NEVER: u32 = u32::MAX;

impl FaultPlan {
    /// A plan with no faults.
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }

    fn with(mut self, rank: u32, op: u64, kind: FaultKind) -> FaultPlan {
        self.faults.push(Fault { rank, op, kind });
        self
    }

    /// Operation `op` (0-based) on `rank` fails at issue with `code`.
    pub fn fail_op(self, rank: u32, op: u64, code: ResultCode) -> FaultPlan {
        self.with(rank, op, FaultKind::Fail(code))
    }

    /// Operation `op` on `rank` blocks its stream until the rank is aborted.
    pub fn hang_op(self, rank: u32, op: u64) -> FaultPlan {
        self.with(rank, op, FaultKind::Hang)
    }

    /// `rank` disappears when its stream reaches operation `op`.
    pub fn lose_rank(self, rank: u32, op: u64) -> FaultPlan {
        self.with(rank, op, FaultKind::Lose)
    }

    /// Operation `op` on `rank` sleeps `by` on its stream before running.
    pub fn delay_op(self, rank: u32, op: u64, by: Duration) -> FaultPlan {
        self.with(rank, op, FaultKind::Delay(by))
    }

    /// `rank`'s init stays `InProgress` for `polls` calls of `poll` ([`INIT_NEVER`]: for ever).
    pub fn init_in_progress(mut self, rank: u32, polls: u32) -> FaultPlan {
        self.init_polls.push((rank, polls));
        self
    }

    /// `rank`'s init stays `InProgress` for ever (a peer that never comes): only an abort, or
    /// a limit that aborts it, ends it.
    pub fn init_never_completes(self, rank: u32) -> FaultPlan {
        self.init_in_progress(rank, INIT_NEVER)
    }

    /// Aborting `rank`'s communicator takes `by` (see the module's text).
    pub fn slow_abort(mut self, rank: u32, by: Duration) -> FaultPlan {
        self.abort_delays.push((rank, by));
        self
    }

    /// How long aborting `rank`'s communicator takes, when planned.
    pub fn abort_delay(&self, rank: u32) -> Option<Duration> {
        self.abort_delays
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, d)| *d)
    }

    /// The plan for communicators split from the ones this plan applies to.
    pub fn in_children(mut self, plan: FaultPlan) -> FaultPlan {
        self.children = Some(Box::new(plan));
        self
    }

    /// Every fault of the plan.
    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }

    /// The first fault planned for operation `op` of `rank`.
    pub fn fault_for(&self, rank: u32, op: u64) -> Option<FaultKind> {
        self.faults
            .iter()
            .find(|f| f.rank == rank && f.op == op)
            .map(|f| f.kind)
    }

    /// How many polls `rank`'s init stays in progress, when planned.
    pub fn init_polls(&self, rank: u32) -> Option<u32> {
        self.init_polls
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, p)| *p)
    }

    /// The plan for split children (empty when none was given).
    pub fn children(&self) -> FaultPlan {
        self.children.as_deref().cloned().unwrap_or_default()
    }

    /// `Ok` when every planned failure is an error code of NCCL's (not success, not
    /// in-progress, not an unknown number) and, when `size` is given, every rank it names is
    /// below `size`. The children's plan is checked for its codes (children vary in size).
    /// Errors are [`Error::InvalidArgument`] on `"plan"`.
    pub fn validate(&self, size: Option<u32>) -> Result<()> {
        for f in &self.faults {
            if let FaultKind::Fail(code) = f.kind {
                if code.name().is_none() || code.is_success() || code.is_in_progress() {
                    return Err(Error::invalid(
                        "plan",
                        format_args!(
                            "an error code to fail op {} of rank {} with (1..=6 or 8), got {code}",
                            f.op, f.rank
                        ),
                    ));
                }
            }
        }
        if let Some(size) = size {
            let ranks = self.faults.iter().map(|f| f.rank);
            if let Some(r) = ranks
                .chain(self.init_polls.iter().map(|(r, _)| *r))
                .chain(self.abort_delays.iter().map(|(r, _)| *r))
                .find(|r| *r >= size)
            {
                return Err(Error::invalid(
                    "plan",
                    format_args!("faults on ranks below the world's size {size}, got rank {r}"),
                ));
            }
        }
        match &self.children {
            Some(c) => c.validate(None),
            None => Ok(()),
        }
    }
}

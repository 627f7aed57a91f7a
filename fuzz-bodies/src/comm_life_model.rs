//! The reference model of `comm_life`: what every rank of a mock world should be after each
//! event, restated from the documented rules (the lifecycle's, the fault plan's, the mock's
//! matching of collectives), not from the mock's code.
//!
//! The driver settles the world after each event (waits until every operation that can finish
//! has finished), so what the model computes is a fixed point, with no race left in it:
//! * a rank's stream runs its operations in order; a rank that is no longer alive (neither
//!   ready nor finalizing) drops what is left on it;
//! * the k-th collective of every rank meets the k-th of the others; it succeeds when every
//!   rank has arrived and no rank of the communicator is dead at that moment, and fails for
//!   everyone waiting on it once any rank is dead; a rank whose collective fails with a peer's
//!   death fails itself (`Remote`), which kills it in turn;
//! * fault plan: `Fail` at issue (the rank fails at once), `Hang` blocks the stream until the
//!   rank is dead, `Lose` kills the rank when its stream reaches the op, `Delay` only delays;
//! * the first cause sticks: a failure keeps its reason through abort and destroy; abort is
//!   idempotent; a dead rank never lives again.

use oxccl_core::{CommState, Error, ResultCode};
use oxccl_mock::FaultKind;
use std::collections::{HashMap, VecDeque};

/// Where a rank is in its life (the lifecycle's states, with the polls an init has left).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// A nonblocking init: `poll` answers `InProgress` this many more times.
    Init(u32),
    /// Usable.
    Ready,
    /// A finalize is flushing.
    Finalizing,
    /// An operation failed (the sticky error is set).
    Failed,
    /// Aborted.
    Aborted,
    /// Finalized cleanly.
    Finalized,
    /// Dropped.
    Destroyed,
}

impl Life {
    /// The state the communicator reports.
    pub fn state(self) -> CommState {
        match self {
            Life::Init(_) => CommState::Initializing,
            Life::Ready => CommState::Ready,
            Life::Finalizing => CommState::Finalizing,
            Life::Failed => CommState::Failed,
            Life::Aborted => CommState::Aborted,
            Life::Finalized => CommState::Finalized,
            Life::Destroyed => CommState::Destroyed,
        }
    }

    /// Still runs its queued work.
    pub fn alive(self) -> bool {
        matches!(self, Life::Ready | Life::Finalizing)
    }

    /// Gone for its peers (every collective fails from then on).
    pub fn dead(self) -> bool {
        matches!(
            self,
            Life::Failed | Life::Aborted | Life::Finalized | Life::Destroyed
        )
    }
}

/// What `reason()` must say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Nothing happened yet (empty).
    None,
    /// Exactly this text (an abort's reason, "finalized", "destroyed").
    Exact(String),
    /// A text containing this (a failure's message).
    Has(&'static str),
}

impl Cause {
    /// Whether `reason` is what this cause says.
    pub fn admits(&self, reason: &str) -> bool {
        match self {
            Cause::None => reason.is_empty(),
            Cause::Exact(s) => reason == s,
            Cause::Has(s) => reason.contains(s),
        }
    }
}

/// The sticky asynchronous error `poll` reports once a rank failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncErr {
    /// The library's code (a planned failure, a lost rank).
    Backend(ResultCode),
    /// A peer died during a collective.
    Remote,
}

/// One collective on a rank's stream.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    /// Its sequence number among the rank's collectives.
    pub coll: u64,
    /// What the fault plan does to it.
    pub fault: Option<FaultKind>,
    /// Whether it has joined its collective (and now waits for the outcome).
    pub posted: bool,
    /// The driver's id of its buffers (to check the result of one that succeeded).
    pub buf: usize,
}

/// One rank.
#[derive(Debug, Clone)]
pub struct Rank {
    /// The lifecycle state.
    pub life: Life,
    /// What `reason()` says.
    pub cause: Cause,
    /// The sticky error, once failed.
    pub error: Option<AsyncErr>,
    /// `InProgress` answers a nonblocking finalize still owes.
    pub op_polls: u32,
    /// Operations issued (the fault plan's numbering).
    pub ops: u64,
    /// Collectives issued (their sequence numbers).
    pub colls: u64,
    /// Collectives on the stream, not finished.
    pub jobs: VecDeque<Job>,
}

/// The outcome of one collective, once known.
#[derive(Debug, Default)]
struct Slot {
    arrived: u32,
    ok: Option<bool>,
}

/// The whole world.
#[derive(Debug)]
pub struct Model {
    /// The ranks, rank i at index i.
    pub ranks: Vec<Rank>,
    /// Polls of a nonblocking init, split, finalize (`None`: a blocking world).
    pub nonblocking: Option<u32>,
    slots: HashMap<u64, Slot>,
    /// Buffers of collectives that succeeded (the driver checks their contents).
    pub succeeded: Vec<usize>,
}

impl Model {
    /// `n` ranks; `init[r]` is the polls rank r's init stays in progress (`None`: ready).
    pub fn new(init: &[Option<u32>], nonblocking: Option<u32>) -> Model {
        let ranks = init
            .iter()
            .map(|p| Rank {
                life: p.map_or(Life::Ready, Life::Init),
                cause: Cause::None,
                error: None,
                op_polls: 0,
                ops: 0,
                colls: 0,
                jobs: VecDeque::new(),
            })
            .collect();
        Model {
            ranks,
            nonblocking,
            slots: HashMap::new(),
            succeeded: Vec::new(),
        }
    }

    fn n(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// Whether any rank of the communicator is dead.
    pub fn any_dead(&self) -> bool {
        self.ranks.iter().any(|r| r.life.dead())
    }

    /// The rank fails with `err` (`why`: its message): the first failure of a live rank wins.
    pub fn fail(&mut self, r: usize, err: AsyncErr, why: &'static str) {
        let rk = &mut self.ranks[r];
        let live = matches!(rk.life, Life::Init(_) | Life::Ready | Life::Finalizing);
        if live && rk.error.is_none() {
            rk.life = Life::Failed;
            rk.cause = Cause::Has(why);
            rk.error = Some(err);
        }
    }

    /// Abort: idempotent; a failure keeps its cause; a destroyed rank stays destroyed.
    pub fn abort(&mut self, r: usize, reason: Cause) {
        let rk = &mut self.ranks[r];
        match rk.life {
            Life::Aborted | Life::Destroyed => {}
            Life::Failed => rk.life = Life::Aborted,
            _ => {
                rk.life = Life::Aborted;
                rk.cause = reason;
            }
        }
    }

    /// The communicator is dropped: its reason stays (or becomes "destroyed").
    pub fn destroy(&mut self, r: usize) {
        let rk = &mut self.ranks[r];
        if rk.cause == Cause::None {
            rk.cause = Cause::Exact("destroyed".into());
        }
        rk.life = Life::Destroyed;
    }

    /// A finalize completes (its work drained): clean unless the rank failed meanwhile.
    pub fn finalized(&mut self, r: usize) {
        let rk = &mut self.ranks[r];
        if rk.life == Life::Finalizing {
            rk.life = Life::Finalized;
            rk.cause = Cause::Exact("finalized".into());
        }
    }

    /// Queues rank `r`'s next collective (issue accepted it), with its planned fault.
    pub fn queue(&mut self, r: usize, fault: Option<FaultKind>, buf: usize) {
        let rk = &mut self.ranks[r];
        let coll = rk.colls;
        rk.colls += 1;
        rk.jobs.push_back(Job {
            coll,
            fault,
            posted: false,
            buf,
        });
    }

    /// Runs every stream as far as it can go: the fixed point the settled world is at.
    pub fn settle(&mut self) {
        while (0..self.ranks.len()).any(|r| self.step(r)) {}
    }

    /// Whether rank `r`'s stream has work it cannot finish now (blocked on a peer or a hang).
    pub fn blocked(&self, r: usize) -> bool {
        !self.ranks[r].jobs.is_empty()
    }

    /// One step of rank `r`'s stream; false when it cannot move.
    fn step(&mut self, r: usize) -> bool {
        let n = self.n();
        let Some(job) = self.ranks[r].jobs.front().copied() else {
            return false;
        };
        let life = self.ranks[r].life;
        if !job.posted {
            if !life.alive() {
                // A dead rank's queued work is dropped.
                self.ranks[r].jobs.pop_front();
                return true;
            }
            match job.fault {
                Some(FaultKind::Hang) => return false, // until the rank is dead
                Some(FaultKind::Lose) => {
                    self.ranks[r].jobs.pop_front();
                    self.fail(r, AsyncErr::Backend(ResultCode::SYSTEM_ERROR), "lost at op");
                    return true;
                }
                _ => {}
            }
            let dead = self.any_dead();
            let slot = self.slots.entry(job.coll).or_default();
            slot.arrived += 1;
            if slot.arrived == n && slot.ok.is_none() {
                slot.ok = Some(!dead);
            }
            if let Some(j) = self.ranks[r].jobs.front_mut() {
                j.posted = true;
            }
            return true;
        }
        let outcome = self.slots.get(&job.coll).and_then(|s| s.ok);
        let me_dead = life.dead();
        let other_dead = self
            .ranks
            .iter()
            .enumerate()
            .any(|(i, x)| i != r && x.life.dead());
        let ok = match outcome {
            Some(ok) => ok,
            None if me_dead || other_dead => {
                // Leaving (or seeing a peer gone) decides the collective for everyone: failed.
                if let Some(s) = self.slots.get_mut(&job.coll) {
                    s.ok = Some(false);
                }
                false
            }
            None => return false,
        };
        self.ranks[r].jobs.pop_front();
        if ok {
            self.succeeded.push(job.buf);
        } else {
            self.fail(r, AsyncErr::Remote, "remote failure");
        }
        true
    }
}

/// The refusal of a call on a rank that is not ready: `Aborted` with the first cause, else
/// `InvalidState` in the rank's state with the first cause (the state's name when none).
pub(crate) fn assert_refused(e: &Error, rk: &Rank, what: &str) {
    match e {
        Error::Aborted { reason } if rk.life == Life::Aborted => assert!(
            rk.cause.admits(reason),
            "{what}: aborted with `{reason}`, the first cause is {:?}",
            rk.cause
        ),
        Error::InvalidState { state, reason, .. } if rk.life != Life::Aborted => {
            assert_eq!(
                *state,
                rk.life.state(),
                "{what}: refused in the wrong state"
            );
            let named = rk.cause == Cause::None && reason.as_str() == state.name();
            assert!(
                named || rk.cause.admits(reason),
                "{what}: refused with `{reason}`, the first cause is {:?}",
                rk.cause
            );
        }
        e => panic!(
            "{what}: {e:?} on a rank {:?} (cause {:?})",
            rk.life, rk.cause
        ),
    }
}

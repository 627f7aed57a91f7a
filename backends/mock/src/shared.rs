//! What the ranks of one communicator share: its size and features, each rank's life, and the
//! hub where their operations meet.

use crate::fault::FaultPlan;
use crate::op_desc::OpDesc;
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::state::lifecycle::Lifecycle;
use oxccl_core::text::{text_str, Text};
use oxccl_core::RegHandle;
use oxccl_core::{text, CommState, Error, FeatureSet, Result, ResultCode};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// One rank's life: the lifecycle, the sticky asynchronous error, init polls left.
pub(crate) struct Life {
    pub cycle: Lifecycle,
    /// The first error found after issue (NCCL's async error), reported by `poll`.
    pub error: Option<Error>,
    /// `poll` calls that still answer `InProgress` while initializing.
    pub init_polls: u32,
    /// Whether the communicator was made nonblocking (its group ends and finalize report
    /// `InProgress` before `Done`).
    pub nonblocking: bool,
    /// `poll` calls that still answer `InProgress` for a nonblocking group end or finalize.
    pub op_polls: u32,
    /// Set by the call failing the rank (`fail`, `lose`) from before it marks the rank dead
    /// until it has recorded its error: a waiter that the mark wakes (its own collective
    /// abandoned) must not record a cause of its own first (the first cause would be lost).
    pub failing: bool,
}

/// How long the host rank's communicator, when dropped, waits for the ranks of other processes
/// to leave first (their results travel through it).
const HOST_LINGER: Duration = Duration::from_secs(10);

/// Per-rank state of a communicator.
pub(crate) struct RankState {
    pub life: Mutex<Life>,
    /// Operations issued (fault plan numbering).
    pub ops: AtomicU64,
    /// Next collective sequence number.
    pub coll_seq: AtomicU64,
    /// Next split sequence number.
    pub split_seq: AtomicU64,
    /// Next send sequence number per destination, next recv sequence number per source (only
    /// the peers used: a vector per rank would cost size² for the world).
    pub p2p_seq: Mutex<(HashMap<u32, u64>, HashMap<u32, u64>)>,
    /// Jobs handed to streams and not finished (finalize and drop wait for them).
    pub pending: Mutex<usize>,
    pub pending_cv: Condvar,
    /// Registered buffers by address, and the next handle value.
    pub regs: Mutex<(HashMap<usize, RegHandle>, usize)>,
    /// Symmetric windows by address, and how many were ever made (see `window.rs`).
    pub windows: Mutex<(HashMap<usize, RegHandle>, u64)>,
    /// How many windows `windows` holds, kept under its lock and read without it by every
    /// issue (most communicators have none: see `MockComm::one_kind`).
    pub live_windows: AtomicUsize,
}

/// A message sent eagerly and not yet received.
pub(crate) struct EagerSend {
    pub desc: OpDesc,
    pub data: Vec<u8>,
}

/// One collective of the communicator (matched by sequence number) as the ranks reach it.
pub(crate) struct Arrivals {
    pub arrivals: Vec<Option<OpDesc>>,
    pub count: u32,
    /// `Some` once computed (Ok or a mismatch) or failed (a participant died).
    pub outcome: Option<Result<()>>,
    /// Ranks that took the outcome; the slot is dropped when all have.
    pub taken: u32,
}

/// A split child and this rank's rank in it.
pub(crate) type Child = (Arc<CommShared>, u32);

/// One split of the communicator as the ranks reach it.
pub(crate) struct SplitSlot {
    pub calls: Vec<Option<(Option<u32>, u32)>>,
    pub count: u32,
    /// Ranks that will still take their result (the slot goes once all arrived and took).
    pub takers: u32,
    /// Ranks that left before the result (a pending nonblocking child aborted or dropped):
    /// their child rank is aborted as soon as it exists.
    pub abandoned: Vec<Option<Text>>,
    /// Each rank's child and its rank there (`None` for NOCOLOR), once all called.
    pub result: Option<Vec<Option<Child>>>,
}

/// One shrink of the communicator as its survivors reach it (see `shrink`).
pub(crate) struct ShrinkSlot {
    /// The ranks it leaves out (sorted), as the first survivor gave them.
    pub exclude: Vec<u32>,
    pub child: Arc<CommShared>,
    /// Which survivors called, by their rank in the child.
    pub seen: Vec<bool>,
    pub count: u32,
    /// Survivors that took the child (the slot goes once all have).
    pub taken: u32,
}

/// Where the ranks' operations meet; one lock and one condition variable per communicator.
pub(crate) struct Hub {
    /// Why each rank can no longer take part (aborted, failed, lost, finalized, destroyed).
    pub dead: Vec<Option<Text>>,
    pub colls: HashMap<u64, Arrivals>,
    /// Messages by (src, dst, p2p sequence number).
    pub mail: HashMap<(u32, u32, u64), EagerSend>,
    pub splits: HashMap<u64, SplitSlot>,
    /// Shrinks, by the number the survivors share with splits.
    pub shrinks: HashMap<u64, ShrinkSlot>,
    /// One-sided signals raised and not yet consumed, by (to, from, signal, context).
    pub signals: HashMap<(u32, u32, u32, u32), u64>,
    /// Puts into windows of ranks in other processes, kept (on the host) until the rank's
    /// wait takes them (see `signals`).
    pub deliveries: HashMap<u32, Vec<crate::delivery::Delivery>>,
}

/// The state shared by every rank of one communicator.
pub(crate) struct CommShared {
    pub size: u32,
    pub features: FeatureSet,
    pub plan: FaultPlan,
    /// Polls a nonblocking init or split stays in progress.
    pub nb_polls: u32,
    /// Ranks that joined (all of them for a world; counted up by `init_rank`).
    pub joined: AtomicU32,
    pub hub: Mutex<Hub>,
    pub cv: Condvar,
    pub ranks: Vec<RankState>,
    /// Set on a rank process's mirror of a communicator spanning processes: the connection to
    /// the host, where the cross-rank steps run (see `procs`).
    pub link: OnceLock<Arc<crate::transport::link::Link>>,
    /// Set on the host's communicator once a rank of another process joins it (before that
    /// rank counts as joined, so every rank sees it once init completes).
    pub hosted: AtomicBool,
    /// The process of each rank (this process's id until a rank of another process joins):
    /// a split across processes hosts each child in the process of the child's rank 0.
    pub pids: Mutex<Vec<u32>>,
    /// The token of the process-spanning id of this communicator when it is the child of a
    /// split across processes (drawn by the first member that takes it).
    // Read by the transport (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub token: OnceLock<[u8; 16]>,
    /// The device label each rank of this process joined with (`None`: not joined here, or
    /// through another process's host), for NCCL's refusal of two ranks on one device.
    pub devices: Mutex<Vec<Option<u32>>>,
    /// The id of the grow a rank of this process made as its root (see `grow`).
    pub grow_id: Mutex<Option<oxccl_core::UniqueId>>,
}

impl CommShared {
    /// A communicator of `size` ranks; `nonblocking` ranks start initializing.
    pub(crate) fn new(
        size: u32,
        features: FeatureSet,
        plan: FaultPlan,
        nb_polls: u32,
        nonblocking: bool,
    ) -> Arc<CommShared> {
        let n = size as usize;
        let ranks = (0..size)
            .map(|r| {
                let planned = plan.init_polls(r);
                let (cycle, init_polls) = match (nonblocking, planned) {
                    (_, Some(p)) => (Lifecycle::initializing(), p),
                    (true, None) => (Lifecycle::initializing(), nb_polls),
                    (false, None) => (Lifecycle::ready(), 0),
                };
                RankState {
                    life: Mutex::new(Life {
                        cycle,
                        error: None,
                        init_polls,
                        nonblocking,
                        op_polls: 0,
                        failing: false,
                    }),
                    ops: AtomicU64::new(0),
                    coll_seq: AtomicU64::new(0),
                    split_seq: AtomicU64::new(0),
                    p2p_seq: Mutex::new((HashMap::new(), HashMap::new())),
                    pending: Mutex::new(0),
                    pending_cv: Condvar::new(),
                    regs: Mutex::new((HashMap::new(), 1)),
                    windows: Mutex::new((HashMap::new(), 0)),
                    live_windows: AtomicUsize::new(0),
                }
            })
            .collect();
        Arc::new(CommShared {
            size,
            features,
            plan,
            nb_polls,
            joined: AtomicU32::new(size),
            hub: Mutex::new(Hub {
                dead: vec![None; n],
                colls: HashMap::new(),
                mail: HashMap::new(),
                splits: HashMap::new(),
                shrinks: HashMap::new(),
                signals: HashMap::new(),
                deliveries: HashMap::new(),
            }),
            cv: Condvar::new(),
            ranks,
            link: OnceLock::new(),
            hosted: AtomicBool::new(false),
            pids: Mutex::new(vec![std::process::id(); n]),
            token: OnceLock::new(),
            devices: Mutex::new(vec![None; n]),
            grow_id: Mutex::new(None),
        })
    }

    /// Another rank of this process that joined on `rank`'s device, if any.
    pub(crate) fn same_device(&self, rank: u32) -> Option<u32> {
        let devices = lock(&self.devices);
        let mine = (*devices.get(rank as usize)?)?;
        (0..devices.len() as u32).find(|&r| r != rank && devices[r as usize] == Some(mine))
    }

    /// The state of `rank` (rank is always in range: comms are built with it).
    pub(crate) fn rank(&self, rank: u32) -> &RankState {
        // Ranks are created 0..size and a MockComm only ever holds one of them.
        &self.ranks[rank as usize % self.ranks.len().max(1)]
    }

    /// Whether `rank` still runs its queued work (ready, or flushing for a finalize).
    pub(crate) fn alive(&self, rank: u32) -> bool {
        matches!(
            lock(&self.rank(rank).life).cycle.state(),
            CommState::Ready | CommState::Finalizing
        )
    }

    /// The error `rank`'s own operations end with once it is dead.
    pub(crate) fn own_error(&self, rank: u32) -> Error {
        let life = lock(&self.rank(rank).life);
        if let Some(e) = &life.error {
            return e.clone();
        }
        match life.cycle.ensure_ready("run an operation") {
            Err(e) => e,
            Ok(()) => Error::Remote {
                detail: text!("rank {rank}: operation abandoned"),
            },
        }
    }

    /// Marks `rank` as gone for its peers and wakes everyone waiting on the hub.
    pub(crate) fn mark_dead(&self, rank: u32, why: Text) {
        let mut hub = lock(&self.hub);
        mark_dead_locked(&mut hub, rank, why);
        drop(hub);
        self.cv.notify_all();
        self.wake_pending(rank);
        if let Some(link) = self.link.get() {
            // The rank's peers live in other processes: the host marks it there.
            link.tell_dead(&format!("{}", hub_why(self, rank)));
        }
    }

    fn wake_pending(&self, rank: u32) {
        let rs = self.rank(rank);
        let _g = lock(&rs.pending);
        rs.pending_cv.notify_all();
    }

    /// Records `err` as `rank`'s asynchronous error and fails it (first error wins; a dead rank
    /// stays as it is). Returns the text peers see when it was the first.
    pub(crate) fn set_error(&self, rank: u32, err: Error) -> Option<Text> {
        let mut life = lock(&self.rank(rank).life);
        if life.failing || life.cycle.state().is_dead() || life.error.is_some() {
            return None;
        }
        Some(record(&mut life, err))
    }

    /// Claims the failure of `rank` for the caller (false: it is dead, failed, or another call
    /// is failing it); the caller then marks it dead and records its error with
    /// [`CommShared::finish_failing`].
    fn start_failing(&self, rank: u32) -> bool {
        let mut life = lock(&self.rank(rank).life);
        let first = !life.failing && !life.cycle.state().is_dead() && life.error.is_none();
        life.failing |= first;
        first
    }

    /// Records the error of a failure claimed by [`CommShared::start_failing`].
    fn finish_failing(&self, rank: u32, err: Error) {
        let mut life = lock(&self.rank(rank).life);
        life.failing = false;
        if !life.cycle.state().is_dead() && life.error.is_none() {
            record(&mut life, err);
        }
    }

    /// Fails `rank` with `err` (see [`CommShared::set_error`]) and tells its peers.
    ///
    /// The peers are told first: once the error is recorded the rank's caller can see it and
    /// free the buffers of its ops still queued, and no peer may run a collective with them
    /// after that (`coll_post` computes only while every rank is alive, under the hub lock
    /// that `mark_dead` takes, so a computation in progress finishes first).
    ///
    /// Only the first call records its error: one that finds the rank dead, failed or being
    /// failed by another call does nothing (see [`Life::failing`]).
    pub(crate) fn fail(&self, rank: u32, err: Error) {
        if self.start_failing(rank) {
            self.mark_dead(rank, text!("failed: {err}"));
            self.finish_failing(rank, err);
        }
    }

    /// Aborts `rank`: idempotent; wakes whatever waits on it. A slow abort planned for the
    /// rank ([`FaultPlan::slow_abort`]) is spent here, on the caller's thread, after the rank
    /// is dead, as NCCL's release would be.
    pub(crate) fn abort(&self, rank: u32, reason: &str) {
        let (why, fresh) = {
            let mut life = lock(&self.rank(rank).life);
            let before = life.cycle.state();
            life.cycle.abort(reason);
            let fresh = life.cycle.state() != before;
            (text!("aborted: {}", life.cycle.reason()), fresh)
        };
        lock(&self.rank(rank).regs).0.clear();
        self.mark_dead(rank, why);
        if let Some(d) = self.plan.abort_delay(rank).filter(|_| fresh) {
            std::thread::sleep(d);
        }
    }

    /// Starts an abort of `rank` whose release is spent elsewhere: `Aborting`, dead to its
    /// peers at once; whether the caller is to finish it ([`CommShared::abort_done`]).
    pub(crate) fn abort_begin(&self, rank: u32, reason: &str) -> bool {
        let (why, begun) = {
            let mut life = lock(&self.rank(rank).life);
            let begun = life.cycle.abort_begin(reason);
            (text!("aborted: {}", life.cycle.reason()), begun)
        };
        if begun {
            lock(&self.rank(rank).regs).0.clear();
            self.mark_dead(rank, why);
        }
        begun
    }

    /// The release an [`CommShared::abort_begin`] started is over: `Aborted`.
    pub(crate) fn abort_done(&self, rank: u32) {
        lock(&self.rank(rank).life).cycle.abort_done();
    }

    /// The rank vanishes (fault plan): its own error is a system error, peers see it gone.
    pub(crate) fn lose(&self, rank: u32, index: u64) {
        let err = Error::Backend {
            code: ResultCode::SYSTEM_ERROR,
            text: text_str(crate::messages::code_text(ResultCode::SYSTEM_ERROR)),
            last: text!("rank {rank} lost at op {index} (fault plan)"),
        };
        // Dead before the error is visible, as in `fail`, and only the first cause recorded.
        if self.start_failing(rank) {
            self.mark_dead(rank, text!("was lost at op {index} (fault plan)"));
            self.finish_failing(rank, err);
        }
    }

    /// Blocks the calling stream until `rank` is dead (a planned hang, released by abort).
    pub(crate) fn block_until_dead(&self, rank: u32) {
        let mut hub = lock(&self.hub);
        while hub.dead.get(rank as usize).is_some_and(|d| d.is_none()) {
            hub = wait_for(&self.cv, hub, TICK);
        }
    }

    /// Sleeps up to `d` on the calling stream (a planned delay), ending early once `rank` is
    /// dead, so that abort ends any delay (`Duration::MAX` included: it lasts until then).
    pub(crate) fn sleep_unless_dead(&self, rank: u32, d: Duration) {
        // `None`: beyond what the clock can express, i.e. until the rank dies.
        let deadline = Instant::now().checked_add(d);
        let mut hub = lock(&self.hub);
        while hub.dead.get(rank as usize).is_some_and(|x| x.is_none()) {
            let left = deadline.map_or(TICK, |t| t.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return;
            }
            hub = wait_for(&self.cv, hub, left.min(TICK));
        }
    }

    /// Whether `rank` has no job on a stream (never blocks).
    pub(crate) fn drained(&self, rank: u32) -> bool {
        *lock(&self.rank(rank).pending) == 0
    }

    /// One more job of `rank` is on a stream.
    pub(crate) fn job_started(&self, rank: u32) {
        *lock(&self.rank(rank).pending) += 1;
    }

    /// A job of `rank` finished (or was skipped).
    pub(crate) fn job_done(&self, rank: u32) {
        let rs = self.rank(rank);
        let mut p = lock(&rs.pending);
        *p = p.saturating_sub(1);
        rs.pending_cv.notify_all();
    }

    /// Waits until `rank` has no job on a stream, it is dead, or `limit` passed; true when drained.
    pub(crate) fn wait_drained(&self, rank: u32, limit: Option<Duration>) -> bool {
        let start = Instant::now();
        let rs = self.rank(rank);
        let mut p = lock(&rs.pending);
        loop {
            if *p == 0 {
                return true;
            }
            if limit.is_some_and(|l| start.elapsed() >= l) {
                return false;
            }
            if lock(&self.hub)
                .dead
                .get(rank as usize)
                .is_some_and(|d| d.is_some())
            {
                return false;
            }
            p = wait_for(&rs.pending_cv, p, TICK);
        }
    }

    /// Waits (bounded by [`HOST_LINGER`]) until every other rank of a communicator with ranks in
    /// other processes has left, so that their last results reach them through this process.
    /// An aborted rank owes nothing and never waits, as an aborted NCCL communicator's
    /// release never waits for its peers: the survivors of a loss release their old
    /// communicator that way, and a peer that stopped answering must not hold them.
    pub(crate) fn linger(&self, rank: u32) {
        if !self.hosted.load(Ordering::Acquire)
            || lock(&self.rank(rank).life).cycle.state().is_aborted()
        {
            return;
        }
        let start = Instant::now();
        let mut hub = lock(&self.hub);
        while start.elapsed() < HOST_LINGER
            && hub
                .dead
                .iter()
                .enumerate()
                .any(|(r, d)| r as u32 != rank && d.is_none())
        {
            hub = wait_for(&self.cv, hub, Duration::from_millis(20));
        }
    }
}

/// Fails the lifecycle with `err` and keeps it as the sticky error; the text peers see.
fn record(life: &mut Life, err: Error) -> Text {
    let why = text!("{err}");
    life.cycle.fail(&why);
    life.error = Some(err);
    text!("failed: {why}")
}

/// Why `rank` is dead, as recorded (empty when it is not).
fn hub_why(sh: &CommShared, rank: u32) -> Text {
    lock(&sh.hub)
        .dead
        .get(rank as usize)
        .cloned()
        .flatten()
        .unwrap_or_default()
}

/// [`CommShared::mark_dead`] with the hub already locked (the caller notifies).
pub(crate) fn mark_dead_locked(hub: &mut Hub, rank: u32, why: Text) {
    if let Some(d) = hub.dead.get_mut(rank as usize) {
        if d.is_none() {
            *d = Some(why);
        }
    }
}

/// The first rank (other than `me`, when given) in `ranks` that is dead, with why.
pub(crate) fn first_dead(hub: &Hub, me: Option<u32>) -> Option<(u32, Text)> {
    hub.dead
        .iter()
        .enumerate()
        .find(|(r, d)| Some(*r as u32) != me && d.is_some())
        .and_then(|(r, d)| d.clone().map(|t| (r as u32, t)))
}

//! Making a group's state: what a default group, a subgroup and a survivors' successor of
//! either share (its watch, its recorder entry, its empty slot).

use super::backend::PgBackend;
use super::comm_slot::Slot;
use super::family::GroupFamily;
use super::inner::{IssueFacts, IssueState, PgInner};
use super::options::PgOptions;
use crate::recorder::Recorder;
use crate::store::Store;
use crate::watchdog::group_watch::{GroupWatch, WatchConfig};
use crate::watchdog::HeartbeatMonitor;
use oxccl_rules::membership::{self, CommPlan};
use oxccl_rules::recorder::PgConfig;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

/// Who a group is and where it lives.
pub(crate) struct GroupSpec<B: PgBackend> {
    pub backend: B,
    pub store: Arc<dyn Store>,
    pub family: Arc<GroupFamily>,
    pub uid: u64,
    pub global_rank: u32,
    pub world_size: u32,
    /// Global ranks of the members, in group-rank order.
    pub ranks: Vec<u32>,
    pub opts: PgOptions,
    pub parent: Option<Arc<PgInner<B>>>,
    pub plan: CommPlan,
    /// The survivors' epoch it is made at (0 for a group made before any loss).
    pub epoch: u64,
}

impl<B: PgBackend> PgInner<B> {
    /// The state of the group `spec` describes: registered with the recorder, watched, its
    /// communicator not made yet (a non-member's never is).
    pub(crate) fn build(spec: GroupSpec<B>) -> Arc<PgInner<B>> {
        let GroupSpec {
            backend,
            store,
            family,
            uid,
            global_rank,
            world_size,
            ranks,
            opts,
            parent,
            plan,
            epoch,
        } = spec;
        let rank = membership::group_rank(&ranks, global_rank);
        let timeout_ms = opts.timeout.as_millis().min(u128::from(u64::MAX)) as u64;
        let recorder = opts.recorder.clone().unwrap_or_else(Recorder::global);
        recorder.add_pg(PgConfig {
            id: uid,
            name: uid.to_string(),
            desc: opts.desc.clone(),
            ranks: ranks.clone(),
        });
        let watch = GroupWatch::new(WatchConfig {
            uid,
            desc: opts.desc.clone(),
            global_rank,
            mode: opts.error_handling,
            dump_on_timeout: opts.dump_on_timeout,
            recorder,
            store: store.clone(),
            wait_timeout_dump: opts.wait_timeout_dump,
            desync: rank
                .filter(|_| opts.desync_debug && opts.watchdog)
                .map(|r| (r, ranks.clone())),
        });
        let facts = IssueFacts {
            device: opts.device(),
            elastic: family.elastic.is_some(),
            nan_check: opts.nan_check,
            timing: opts.timing,
            watchdog: opts.watchdog,
            recording: watch.recorder.is_enabled(),
            tuned: opts.tune.is_some(),
        };
        if let (true, Some(limit)) = (opts.watchdog, opts.heartbeat) {
            HeartbeatMonitor::start(limit);
        }
        Arc::new_cyclic(|me| PgInner {
            me: me.clone(),
            backend,
            store,
            family,
            uid,
            desc: opts.desc.clone(),
            global_rank,
            world_size,
            ranks,
            rank,
            opts,
            hot: IssueState {
                facts,
                clock_zero: crate::recorder::clock_zero(),
                seq: AtomicU64::new(0),
                p2p_seq: AtomicU64::new(0),
                op_id: AtomicU64::new(0),
                timeout_ms: AtomicU64::new(timeout_ms),
                coalescing: AtomicBool::new(false),
                init_awaited: AtomicBool::new(false),
            },
            parent,
            plan,
            slot: Mutex::new(if rank.is_some() {
                Slot::Empty
            } else {
                Slot::NotMember
            }),
            splits: AtomicU64::new(0),
            inits: AtomicU64::new(0),
            watch,
            abort: std::sync::OnceLock::new(),
            destroyed: AtomicBool::new(false),
            copy_stream: std::sync::OnceLock::new(),
            capture: Default::default(),
            epoch: AtomicU64::new(epoch),
            next: std::sync::OnceLock::new(),
        })
    }
}

//! The process group: its handle ([`ProcessGroup`]), how a group is made and destroyed, and
//! how its communicator is made on first use (by init through the store or by a split of the
//! parent's).

use super::arrival::Arrival;
use super::backend::PgBackend;
use super::build::GroupSpec;
use super::capture_state::refuse_init_in_capture;
use super::comm_slot::{await_ready, init_through_store, Entry, InitParams, Slot};
use super::elastic;
use super::family::{Elastic, GroupFamily};
use super::inner::{lock, PgInner, ProcessGroup};
use super::keys;
use super::options::{default_group_options, PgOptions};
use super::tune::agree::agree;
use crate::deadline::deadline_after;
use crate::recorder::target::DumpTarget;
use crate::recorder::{dump_dir_from_env, DumpMeta, Recorder};
use crate::store::Store;
use crate::watchdog::group_watch::CompletionHook;
use crate::watchdog::Watchdog;
use oxccl_core::text::Escaped;
use oxccl_core::traits::CommOf;
use oxccl_core::PeerKernels;
use oxccl_core::{text, CommState, Communicator, Error, Result};
use oxccl_rules::membership::{self, CommPlan};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

impl<B: PgBackend> std::fmt::Debug for ProcessGroup<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("uid", &self.inner().uid)
            .field("desc", &self.inner().desc)
            .field("rank", &self.inner().rank)
            .field("ranks", &self.inner().ranks)
            .finish()
    }
}

impl<B: PgBackend> ProcessGroup<B> {
    /// The group as it is now: the root, or the successor the last loss made of it. Under
    /// [`PgOptions::elastic`] a group that has not yet caught up with a decision of the
    /// survivors (see [`super::elastic`]) does so here: a successor without the lost ranks
    /// is made (its communicator is shrunk at its first operation).
    pub(crate) fn inner(&self) -> &Arc<PgInner<B>> {
        super::elastic::current(&self.root)
    }

    /// The default group of `size` ranks, this process being `rank`, rendezvousing through
    /// `store` (c10d's `init_process_group` with a store), under a namespace of its own on it
    /// (the next incarnation of a world of `size` there: see the `keys` module, so an earlier
    /// group's keys on the same store are never read). With a bound device
    /// ([`PgOptions::bound_device`]) the communicator is made now; otherwise at the first
    /// operation.
    ///
    /// While an elastic world of `size` runs on `store`, a `new` is refused (an
    /// [`Error::InvalidArgument`] naming `store` that says to [`ProcessGroup::join`]) and
    /// counts nothing: a restarted rank of that world rejoins it.
    pub fn new(
        backend: B,
        store: Arc<dyn Store>,
        rank: u32,
        size: u32,
        mut opts: PgOptions,
    ) -> Result<ProcessGroup<B>> {
        if size == 0 || rank >= size {
            return Err(Error::invalid(
                "rank",
                format_args!("a rank below the world size {size}, got {rank}"),
            ));
        }
        // No GPU at all is refused here, not at the first operation of a lazy group.
        backend.require_devices()?;
        default_group_options(&mut opts);
        // A restarted rank of a running elastic world joins it; counting itself into a new
        // incarnation would move the world's counter under its members.
        elastic::roster::refuse_new_while_running(&store, size, rank)?;
        // Everything this group and its subgroups write goes under this incarnation's own
        // namespace, so no key of an earlier group on the same store is read (see `keys`).
        let (store, incarnation, ns) = keys::enter(store, size)?;
        log::info!(
            "oxccl process group: rank {rank} of {size}, incarnation {incarnation} of a world of {size} on this store; its keys under `{ns}/`"
        );
        let family = Arc::new(GroupFamily {
            next_uid: AtomicU64::new(1),
            elastic: opts.elastic.then(|| Elastic::new(opts.elastic_window)),
        });
        let pg = ProcessGroup {
            root: PgInner::build(GroupSpec {
                backend,
                store,
                family,
                uid: 0,
                global_rank: rank,
                world_size: size,
                ranks: (0..size).collect(),
                opts,
                parent: None,
                plan: CommPlan::InitOnFirstUse,
                epoch: 0,
            }),
        };
        if pg.root.opts.elastic {
            if rank == 0 {
                elastic::roster::publish(&*pg.root.store, 0, &pg.root.ranks)?;
            }
            elastic::monitor::start(&pg.root);
            elastic::roster::start_beat(&pg.root);
        }
        pg.start_default(rank, size)?;
        Ok(pg)
    }

    /// What a default group does once made, whether it started the world ([`ProcessGroup::new`])
    /// or joined it ([`ProcessGroup::join`]): its flight recorder dumps where the options or
    /// the environment say (on a timeout, and when another rank's failure signals it), and a
    /// group with a bound device makes its communicator now.
    pub(crate) fn start_default(&self, rank: u32, world_size: u32) -> Result<()> {
        let inner = self.inner();
        let dir = inner.opts.trace_dir.clone().or_else(dump_dir_from_env);
        if let (Some(dir), true) = (dir, inner.opts.watchdog) {
            let mut target = DumpTarget::new(
                dir,
                DumpMeta::new(rank, world_size),
                inner.watch.recorder.clone(),
            );
            target.wait_limit = inner.opts.wait_timeout_dump;
            if inner.opts.dump_on_timeout {
                // Dump when another rank's failure signals it (the coordination check).
                target.signal = Some((inner.store.clone(), inner.opts.coord_check));
            }
            Watchdog::global().add_dump_target(target);
        }
        if inner.opts.bound_device.is_some() {
            inner.with_entry("init", |_| Ok(()))?;
        }
        Ok(())
    }

    /// This rank in the group (`None` when this process is not a member).
    pub fn rank(&self) -> Option<u32> {
        self.inner().rank
    }

    /// Number of ranks in the group.
    pub fn size(&self) -> u32 {
        self.inner().ranks.len() as u32
    }

    /// This process's rank in the world.
    pub fn global_rank(&self) -> u32 {
        self.inner().global_rank
    }

    /// The global ranks of the members, by group rank.
    pub fn ranks(&self) -> &[u32] {
        &self.inner().ranks
    }

    /// The group's uid: 0 for the default group, then 1, 2, … in creation order (equal across
    /// ranks).
    pub fn uid(&self) -> u64 {
        self.inner().uid
    }

    /// The group's description ("default_pg" for the default group).
    pub fn desc(&self) -> &str {
        &self.inner().desc
    }

    /// The backend the group's communicators come from.
    pub fn backend(&self) -> &B {
        &self.inner().backend
    }

    /// The store the group rendezvous through: a view of the store given to
    /// [`ProcessGroup::new`] under this incarnation's namespace (`oxccl/world/<size>/<k>/`),
    /// where every key of the group and its subgroups lives, and keys set here too.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner().store
    }

    /// The group's options as created.
    pub fn options(&self) -> &PgOptions {
        &self.inner().opts
    }

    /// The timeout of the group's operations.
    pub fn timeout(&self) -> Duration {
        self.inner().timeout()
    }

    /// Adds a completion hook (c10d's `register_on_completion_hook`): run by the watchdog for
    /// every operation of the group that completes, with its duration. Needs timing and the
    /// watchdog on ([`PgOptions::timing`], [`PgOptions::watchdog`]).
    pub fn on_completion(&self, hook: CompletionHook) -> Result<()> {
        if !self.inner().opts.timing || !self.inner().opts.watchdog {
            return Err(Error::invalid(
                "hook",
                format_args!("a group with timing and the watchdog on (PgOptions::timing, PgOptions::watchdog)"),
            ));
        }
        self.inner().watch.add_hook(hook);
        Ok(())
    }

    /// The desync report of the last collective of this group that timed out on this rank,
    /// with desync debugging on ([`PgOptions::desync_debug`]): which ranks never joined it,
    /// which joined but did not finish (written by the watchdog, also logged).
    pub fn desync_report(&self) -> Option<String> {
        let d = self.inner().watch.desync.as_ref()?;
        lock(&d.report).clone()
    }

    /// What failing completion hooks reported so far.
    pub fn hook_errors(&self) -> Vec<String> {
        self.inner().watch.hook_errors()
    }

    /// The flight recorder the group's operations are recorded in.
    pub fn recorder(&self) -> &Recorder {
        &self.inner().watch.recorder
    }

    /// Changes the timeout of the group's later operations.
    pub fn set_timeout(&self, timeout: Duration) {
        let ms = timeout.as_millis().min(u128::from(u64::MAX)) as u64;
        self.inner().hot.timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// Communicators split from this group's communicator so far (c10d's
    /// `comm_split_count`).
    pub fn split_count(&self) -> u64 {
        self.inner().splits.load(Ordering::Relaxed)
    }

    /// The sequence number of the last collective issued (0 before the first).
    pub fn seq(&self) -> u64 {
        self.inner().hot.seq.load(Ordering::Relaxed)
    }

    /// The policy oxccl's all-reduce kernels run under on this group's communicator: `None`
    /// while it is not made yet, on a backend without them, on a group spanning hosts, or
    /// with `OXCCL_PEER_KERNELS=nccl` (NCCL then runs every all-reduce).
    pub fn peer_kernels(&self) -> Option<oxccl_core::peer_kernels::PeerPolicy> {
        match &*crate::pg::inner::lock(&self.inner().slot) {
            super::comm_slot::Slot::Ready(e) => oxccl_core::PeerKernels::peer_policy(&e.comm),
            _ => None,
        }
    }

    /// The communicator's state: `None` before it is made, or when this rank is not a member.
    pub fn comm_state(&self) -> Option<CommState> {
        if self.inner().destroyed.load(Ordering::Acquire) {
            return Some(CommState::Destroyed);
        }
        self.inner().abort.get().map(oxccl_core::CommAbort::state)
    }

    /// Aborts the group's communicator from any thread (wakes ranks blocked in its operations);
    /// later operations fail fast with `reason`. The group stays registered.
    ///
    /// Never takes the lock an operation in progress holds, so it frees a thread blocked in one.
    /// A blocking init in progress cannot be aborted (there is no communicator yet): use
    /// nonblocking communicators where an init may hang.
    pub fn abort(&self, reason: &str) {
        if let Some(a) = self.inner().abort.get() {
            oxccl_core::CommAbort::abort(a, reason);
        }
    }

    /// Destroys the group: its communicator is aborted (never waits for peers, so ranks may
    /// destroy groups in any order), and every later call on the group is an error.
    pub fn destroy(&self) {
        let reason = format!(
            "process group {} ({}) was destroyed",
            self.inner().uid,
            Escaped(&self.inner().desc)
        );
        self.inner().destroyed.store(true, Ordering::Release);
        // Abort first, without the slot lock: a thread blocked in an operation holds it.
        self.abort(&reason);
        lock(&self.inner().slot).close(&reason);
    }

    /// Runs `f` with the stream the group's operations are issued on (the communicator is
    /// made first if needed): to order the caller's own work after them, or to look at it
    /// (its priority under [`PgOptions::high_priority`]).
    pub fn with_stream<R>(&self, f: impl FnOnce(&crate::buffer::StreamOf<B>) -> R) -> Result<R> {
        let e = self.inner().entry("stream")?;
        Ok(f(&e.stream))
    }

    /// A buffer of `len` zeros on this group's device (on the group's copy stream: no
    /// communicator is made for it, so allocating never waits for other ranks).
    pub fn alloc_zeros<T: crate::Element>(&self, len: usize) -> Result<B::Buf<T>> {
        let st = self.inner().copy_stream()?;
        self.inner().backend.alloc_zeros(st, len)
    }

    /// A buffer on this group's device holding a copy of `data`.
    pub fn upload<T: crate::Element>(&self, data: &[T]) -> Result<B::Buf<T>> {
        let st = self.inner().copy_stream()?;
        self.inner().backend.upload(st, data)
    }

    /// The contents of `buf`, after every operation that uses it (blocks).
    pub fn download<T: crate::Element>(&self, buf: &B::Buf<T>) -> Result<Vec<T>> {
        let st = self.inner().copy_stream()?;
        self.inner().backend.download(st, buf)
    }
}

impl<B: PgBackend> PgInner<B> {
    /// Runs `f` with the group's communicator, making it first if this is its first use. The
    /// slot stays locked meanwhile: one call at a time reaches the communicator.
    pub fn with_entry<R>(
        &self,
        attempted: &'static str,
        f: impl FnOnce(&Entry<B>) -> Result<R>,
    ) -> Result<R> {
        // Every path to the communicator passes here: the alive rule's one note, and a rank
        // the survivors of a loss left out stays out.
        if let Some(out) = elastic::enter(self) {
            return Err(out);
        }
        let mut slot = lock(&self.slot);
        if let Slot::Ready(e) = &*slot {
            if !self.hot.init_awaited.load(Ordering::Acquire) {
                self.await_init(e)?;
            }
            return f(e);
        }
        if !matches!(
            *slot,
            Slot::Empty | Slot::Shrink { .. } | Slot::Grow { .. } | Slot::JoinGrown
        ) {
            return Err(self.unusable(&slot, attempted));
        }
        refuse_init_in_capture(self.uid, &self.desc)?;
        let comm = match std::mem::replace(&mut *slot, Slot::Empty) {
            Slot::Shrink { from, exclude } => elastic::shrunk(self, &from, &exclude)?,
            Slot::Grow { from } => elastic::grown(self, &from)?,
            Slot::JoinGrown => elastic::joined_grown(self)?,
            _ => self.make_comm()?,
        };
        // Before any operation: ranks with different tune tables would register windows at
        // different operations and hang.
        agree(self.opts.tune.as_deref(), &self.members())?;
        let priority = if self.opts.high_priority {
            oxccl_core::traits::StreamPriority::High
        } else {
            oxccl_core::traits::StreamPriority::Normal
        };
        let entry: Entry<B> = Entry::new(
            comm,
            priority,
            self.watch.clone(),
            elastic::on_failure(self),
        )?;
        let _ = self.abort.set(entry.abort.clone());
        if self.destroyed.load(Ordering::Acquire) {
            // Destroyed while this communicator was being made.
            oxccl_core::CommAbort::abort(&entry.abort, "process group destroyed during its init");
        }
        *slot = Slot::Ready(Arc::new(entry));
        match &*slot {
            // The eager init at creation does not wait for a nonblocking init to finish.
            Slot::Ready(e) if attempted == "init" => f(e),
            Slot::Ready(e) => {
                self.await_init(e)?;
                f(e)
            }
            _ => Err(self.unusable(&slot, attempted)),
        }
    }

    /// Before the first use of the communicator: a nonblocking init or split still in
    /// progress is waited for, bounded by [`PgOptions::nonblocking_timeout`]. Past the bound
    /// the communicator is aborted (in the background: `Aborting`, then `Aborted`) and the
    /// wait is a timeout naming the variable, at once; the slot keeps the aborted
    /// communicator, so later calls fail fast with its reason.
    fn await_init(&self, e: &Entry<B>) -> Result<()> {
        if self.opts.config.is_nonblocking() {
            let what = format!(
                "the nonblocking init of group {} ({})",
                self.uid,
                Escaped(&self.desc)
            );
            await_ready(&e.abort, self.opts.nonblocking_timeout, &what)?;
        }
        // Every member reaches its first use of the communicator before any collective on it,
        // so the set-up's gathers line up across the group.
        let table = self
            .opts
            .tune
            .as_deref()
            .map(oxccl_rules::tune::TuneTable::peer_table)
            .unwrap_or_default();
        e.comm
            .enable_peer_kernels(&e.stream, self.opts.peer_kernels, &table)?;
        self.hot.init_awaited.store(true, Ordering::Release);
        Ok(())
    }

    /// The group's communicator and stream (made first if needed), for work that must not hold
    /// the slot lock while it blocks: copies to and from the stream, the NaN check. A thread
    /// blocked there does not keep abort, destroy or other copies out.
    pub fn entry(&self, attempted: &'static str) -> Result<Arc<Entry<B>>> {
        self.with_entry(attempted, |_| Ok(()))?;
        match &*lock(&self.slot) {
            Slot::Ready(e) => Ok(e.clone()),
            other => Err(self.unusable(other, attempted)),
        }
    }

    /// Makes this member's communicator by the group's plan.
    fn make_comm(&self) -> Result<CommOf<B>> {
        let rank = self.member_rank()?;
        match (&self.parent, self.plan) {
            (Some(parent), CommPlan::SplitOnFirstUse | CommPlan::SplitNow) => {
                let color = membership::split_color(&self.ranks);
                parent
                    .split(Some(color), rank, &self.opts.config)?
                    .ok_or_else(|| Error::Remote {
                        detail: text!(
                            "split of group {} gave this member no communicator",
                            self.uid
                        ),
                    })
            }
            _ => {
                let n = self.inits.fetch_add(1, Ordering::Relaxed);
                let params = InitParams {
                    store: &*self.store,
                    uid: self.uid,
                    desc: &self.desc,
                    attempt: n,
                    rank,
                    ranks: &self.ranks,
                    global_rank: self.global_rank,
                    device: self.opts.device(),
                    config: &self.opts.config,
                    timeout: self.timeout(),
                };
                init_through_store(&self.backend, &params)
            }
        }
    }

    /// Before split `k` of this group's communicator: every member arrives in the store (see
    /// [`Arrival`]), bounded by the group's timeout, so that a member that never calls the
    /// split is named by the others instead of waited for inside the backend.
    fn arrive_for_split(&self, k: u64) -> Result<()> {
        let arrival = Arrival {
            store: &*self.store,
            prefix: keys::split(self.uid, k),
            index: self.member_rank()?,
            ranks: &self.ranks,
            deadline: deadline_after(self.timeout()),
            what: format!("split #{k} of group {} ({})", self.uid, Escaped(&self.desc)),
        };
        arrival.arrive()?;
        arrival.wait_all(None)
    }

    /// Splits this group's communicator (made first if needed): `None` color for a rank that
    /// joins no child. Counted in [`ProcessGroup::split_count`].
    pub fn split(
        &self,
        color: Option<u32>,
        key: u32,
        cfg: &oxccl_core::CommConfig,
    ) -> Result<Option<CommOf<B>>> {
        let child = self.with_entry("split", |e| {
            // Every member arrives in the store first (bounded by the group's timeout), so a
            // member that never calls the split is named instead of waited for.
            self.arrive_for_split(self.splits.load(Ordering::Relaxed))?;
            e.comm.split(color, key, cfg)
        })?;
        self.splits.fetch_add(1, Ordering::Relaxed);
        Ok(child)
    }
}

/// Aborts every communicator of `groups` and stops the watchdog, within `limit` (c10d's
/// shutdown): never waits for peers.
pub fn shutdown<B: PgBackend>(groups: &[&ProcessGroup<B>], limit: Duration) {
    for g in groups {
        g.abort("shut down");
    }
    Watchdog::global().stop(limit);
}

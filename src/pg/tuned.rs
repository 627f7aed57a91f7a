//! Buffer modes per operation: the group's tune table ([`PgOptions::tune`]) says, for each
//! collective and size, whether buffers of the library's allocator ([`Memory::CommBuf`]) are
//! used as they are, registered with the communicator, or put in a symmetric window; this
//! module applies it, caching each registration per (allocation, communicator).
//!
//! Why it cannot hang or free early:
//! - Window registration is collective. It is issued here, inside the operation, under the
//!   group's slot lock, so it happens at the same operation on every rank, as long as the
//!   ranks decide alike: the decision ([`TuneTable::choose`]) is pure, over the op and the
//!   table, and the ranks' tables are compared through the store when the communicator is
//!   made ([`agree`]): different tables are refused on every rank before any operation.
//!   (Ranks must also pass the same kinds of buffers, as they pass the same sizes.) Sends
//!   and receives are registered at most, never windowed: they involve two ranks.
//! - A registration keeps its allocation alive ([`CommMem::keep`]), and the cache lives in
//!   the group's communicator entry after the communicator: the communicator is destroyed
//!   (releasing what it registered) before the cache lets the memory go.
//! - A local registration whose buffer the user dropped is released at a later operation once
//!   its work has run (not collective, so any time is safe). Windows stay until the program
//!   releases them ([`ProcessGroup::release_windows`], collective: see `release`) or the
//!   group's communicator goes: drops need not line up across ranks, so no operation may
//!   release a window on its own. Window buffers are meant to be allocated once and reused,
//!   as NCCL advises.
//!
//! One operation, one kind of buffer: the buffers of an operation are all in windows or none is.
//! With NCCL 2.28.9 an all_to_all whose send buffer is in a window (made by an earlier all_reduce
//! on it) and whose receive buffer is not gives wrong results or hangs
//! (docs/BENCHMARKS.md#buffer-modes-and-the-tune-table); NCCL sees a window whatever the table says
//! for this operation. So an operation with some of its buffers in windows puts the others in
//! windows too (collective, decided from window state, which every rank made alike), and
//! groups with windows check this at every operation, table or not. One whose other buffer
//! cannot be (not the library's memory) is left as it is: the backend refuses it when it is
//! issued, naming that buffer, before anything of it reaches the library (the core's rule,
//! `oxccl_core::check::windows`, which the NCCL backend and the mock both apply, inside a
//! coalescing block too), so the rule has one copy.
//!
//! Graphs ([`ProcessGroup::capture`]): inside a capture nothing is registered or released,
//! only checked. A registration is a host call (a window's is collective, with its own
//! exchange between ranks), which a capture forbids; and it cannot wait until the capture
//! ends, because the library picks the kernel (symmetric or not) when the operation is
//! captured. Nor can the capture find out the buffers first: its closure runs once (it is
//! the program's code, with its own effects), so it cannot be dry-run. So the program
//! prepares the buffers before the capture, which only it can do at the right moment on
//! every rank: [`ProcessGroup::register_buffer`], or the same operations run once outside
//! the capture (the table registers them then, as nccl-tests' and PyTorch's warm-up runs
//! do). An operation captured on a buffer not yet in the mode the table asks for is refused
//! with [`CaptureError::Unsupported`] saying so. The graph then keeps the allocations it
//! uses that are registered ([`RegCache::pins`]), so their registrations outlive every
//! launch, and a launch still checks the buffers it binds by address and size.
//!
//! [`PgOptions::tune`]: super::PgOptions::tune
//! [`Memory::CommBuf`]: crate::buffer::Memory::CommBuf

use super::group::PgInner;
use super::issue::{Issuer, OpDesc};
use super::{CommOf, ProcessGroup};
use crate::buffer::{CommMem, Memory};
use crate::escaped_path;
use oxccl_core::graph_buffers::GraphBuffers;
use oxccl_core::tune::release::{write_disagreement, AGREED};
use oxccl_core::tune::{RegMode, TuneTable};
use oxccl_core::{text, CaptureError, Communicator, Error, Feature, OpKind, RegHandle, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

mod release;

/// The environment variable naming a tune table file (`oxccl perf --tune` writes one).
pub const TUNE_FILE_VAR: &str = "OXCCL_TUNE_FILE";

/// Reads a tune table file; errors name the file, and the line and field at fault.
pub fn load_tune_file(path: &std::path::Path) -> Result<TuneTable> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::invalid(
            "tune file",
            format_args!("a readable tune table at {}: {e}", escaped_path(path)),
        )
    })?;
    TuneTable::parse(&text).map_err(|e| match e {
        Error::InvalidArgument { expected, .. } => Error::invalid(
            "tune file",
            format_args!("{}: {}", escaped_path(path), expected),
        ),
        other => other,
    })
}

/// The table `OXCCL_TUNE_FILE` names (`value`: the variable's value; unset or empty: none).
/// Errors name the variable, the file, and the line and field at fault.
pub(crate) fn tune_from_env(value: Option<&str>) -> Result<Option<Arc<TuneTable>>> {
    let Some(path) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    load_tune_file(std::path::Path::new(path))
        .map(|t| Some(Arc::new(t)))
        .map_err(|e| match e {
            Error::InvalidArgument { expected, .. } => {
                Error::invalid(TUNE_FILE_VAR, format_args!("{expected}"))
            }
            other => other,
        })
}

/// What a group's communicator did with buffers (see [`ProcessGroup::tuned_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TunedStats {
    /// Operations issued in each mode, by [`RegMode::level`] (plain, registered, window).
    pub ops: [u64; 3],
    /// Allocations registered with the communicator now.
    pub registered: usize,
    /// Allocations in a symmetric window now.
    pub windows: usize,
}

/// The registrations of one communicator, by allocation id.
#[derive(Default)]
pub(crate) struct RegCache {
    state: Mutex<CacheState>,
    /// Whether any allocation is in a window now (read without the lock at every operation:
    /// such groups check every operation's buffers, see the module's documentation).
    any_window: AtomicBool,
}

#[derive(Default)]
pub(super) struct CacheState {
    bufs: HashMap<u64, Cached>,
    ops: [u64; 3],
    /// Windows made so far: numbers each window in the order it was made, which is the same
    /// on every rank (a window is made collectively), so ranks release them in one order.
    windows_made: u64,
    /// Calls of [`ProcessGroup::release_windows`] so far (numbers their store keys).
    releases: u64,
    /// Allocations in a window now.
    pub(super) live_windows: usize,
}

struct Cached {
    /// Keeps the allocation alive while registered.
    mem: CommMem,
    local: Option<RegHandle>,
    /// The window and its number (see [`CacheState::windows_made`]).
    window: Option<(RegHandle, u64)>,
}

impl Cached {
    /// Whether only the cache holds the allocation: the program dropped every buffer of it
    /// and no graph ([`super::PgGraph`]) pins it.
    fn orphan(&self) -> bool {
        Arc::strong_count(&self.mem.keep) == 1
    }
}

impl RegCache {
    /// The state, locked; whether it has windows is noted when the lock is let go.
    pub(super) fn lock(&self) -> CacheGuard<'_> {
        CacheGuard {
            state: self.state.lock().unwrap_or_else(PoisonError::into_inner),
            any_window: &self.any_window,
        }
    }

    /// Whether any allocation is in a window (as of the last lock let go).
    pub(super) fn has_windows(&self) -> bool {
        self.any_window.load(Ordering::Relaxed)
    }

    fn stats(&self) -> TunedStats {
        let st = self.lock();
        TunedStats {
            ops: st.ops,
            registered: st.bufs.values().filter(|c| c.local.is_some()).count(),
            windows: st.bufs.values().filter(|c| c.window.is_some()).count(),
        }
    }

    /// The registered allocations a captured graph uses (those overlapping `regions`): the
    /// graph keeps them ([`CommMem::keep`]), so neither the sweep nor
    /// [`ProcessGroup::release_windows`] releases them while it can be launched.
    pub(super) fn pins(&self, regions: &GraphBuffers) -> Vec<CommMem> {
        let st = self.lock();
        st.bufs
            .values()
            .filter(|c| c.local.is_some() || c.window.is_some())
            .filter(|c| regions.overlaps(c.mem.addr, c.mem.bytes))
            .map(|c| c.mem.clone())
            .collect()
    }
}

/// The locked state of a [`RegCache`]: letting it go notes whether windows are left, so no
/// change can forget to.
pub(super) struct CacheGuard<'a> {
    state: std::sync::MutexGuard<'a, CacheState>,
    any_window: &'a AtomicBool,
}

impl std::ops::Deref for CacheGuard<'_> {
    type Target = CacheState;
    fn deref(&self) -> &CacheState {
        &self.state
    }
}

impl std::ops::DerefMut for CacheGuard<'_> {
    fn deref_mut(&mut self) -> &mut CacheState {
        &mut self.state
    }
}

impl Drop for CacheGuard<'_> {
    fn drop(&mut self) {
        self.any_window
            .store(self.state.live_windows > 0, Ordering::Relaxed);
    }
}

impl CacheState {
    /// Releases the local registrations of allocations only the cache still holds, once
    /// their work has run (windows stay: see the module's documentation).
    fn sweep<C: Communicator>(&mut self, comm: &C) {
        self.bufs.retain(|_, c| {
            if !c.orphan() || c.window.is_some() || !c.mem.keep.idle() {
                return true;
            }
            if let Some(h) = c.local.take() {
                if let Err(e) = comm.deregister(h) {
                    log::debug!("releasing the registration of a dropped buffer: {e}");
                }
            }
            false
        });
    }

    /// Makes the registration `mode` needs for `m`, if it is not there yet (a window is
    /// collective: every rank reaches this at the same point). `timeout` bounds the wait for
    /// the work on a locally registered buffer that goes into a window.
    pub(super) fn ensure<C: Communicator>(
        &mut self,
        comm: &C,
        m: &CommMem,
        mode: RegMode,
        timeout: Duration,
    ) -> Result<()> {
        match mode {
            RegMode::Plain => {}
            RegMode::Registered => {
                comm.features().require(Feature::BufferRegistration)?;
                let c = self.bufs.entry(m.id).or_insert_with(|| cached(m));
                // A window serves as a registration: nothing more to do for it.
                if c.local.is_none() && c.window.is_none() {
                    c.local = Some(comm.register(m.addr, m.bytes)?);
                }
            }
            RegMode::Window => {
                comm.features().require(Feature::WindowRegistration)?;
                let c = self.bufs.entry(m.id).or_insert_with(|| cached(m));
                if c.window.is_none() {
                    // One kind of registration per buffer: a local one goes first (not
                    // collective), once no work uses it, so NCCL never sees both. Waited
                    // for, on every rank alike: a rank whose buffer happened to be busy
                    // must not end up with both kinds while its peers have one.
                    if let Some(h) = c.local.take() {
                        if let Err(e) = wait_idle(&c.mem, timeout) {
                            c.local = Some(h);
                            return Err(e);
                        }
                        comm.deregister(h)?;
                    }
                    let h = comm.register_window(m.addr, m.bytes)?;
                    self.windows_made += 1;
                    self.live_windows += 1;
                    c.window = Some((h, self.windows_made));
                }
            }
        }
        Ok(())
    }

    /// Whether allocation `id` is in a window.
    fn in_window(&self, id: u64) -> bool {
        self.bufs.get(&id).is_some_and(|c| c.window.is_some())
    }

    /// Whether `mems` mix buffers in windows with others (an absent or plain one counts as
    /// outside).
    fn mixed(&self, mems: &[Option<CommMem>]) -> bool {
        let windowed = |m: &Option<CommMem>| m.as_ref().is_some_and(|m| self.in_window(m.id));
        mems.iter().any(windowed) && !mems.iter().all(windowed)
    }

    /// The mode of an operation on `mems` whose table chose `chosen`: window mode when some
    /// of its buffers are in windows and all can be (see the module's documentation). When
    /// one cannot be, `chosen` stands and the backend refuses the mix at issue.
    fn one_kind(&self, mems: &[Option<CommMem>], chosen: RegMode) -> RegMode {
        if self.mixed(mems) && mems.iter().all(Option::is_some) {
            RegMode::Window
        } else {
            chosen
        }
    }

    /// Inside a capture nothing is registered (a host call; collective for windows): `Ok`
    /// when `m` already has what `mode` needs, else the refusal saying how to prepare it.
    fn check_ready(&self, m: &CommMem, mode: RegMode, op: &OpDesc, bytes: u64) -> Result<()> {
        let c = self.bufs.get(&m.id);
        let ready = match mode {
            RegMode::Plain => true,
            RegMode::Registered => c.is_some_and(|c| c.local.is_some() || c.window.is_some()),
            RegMode::Window => c.is_some_and(|c| c.window.is_some()),
        };
        if ready {
            return Ok(());
        }
        // Kept short (errors hold 192 bytes inline): the fix comes before anything cut.
        let state = match mode {
            RegMode::Window => "in a window",
            _ => "registered",
        };
        Err(CaptureError::Unsupported.error(format_args!(
            "{} of {bytes} B needs buffer {:#x} {state} (tune table); a capture cannot \
             register: call ProcessGroup::register_buffer before it, or run the ops once first",
            op.kind.name(),
            m.addr,
        )))
    }
}

/// The buffers of `op` a mode applies to: both of a collective; of a send or receive, only
/// the one it moves (the other is absent, not plain).
fn moved<'m>(op: &OpDesc, mems: &'m [Option<CommMem>]) -> &'m [Option<CommMem>] {
    match (op.kind, mems) {
        (OpKind::Send, [send, _]) => std::slice::from_ref(send),
        (OpKind::Recv, [_, recv]) => std::slice::from_ref(recv),
        _ => mems,
    }
}

/// Chooses the mode of an operation on `mems` (one per buffer it uses, `None` for a plain
/// buffer) and makes the registrations it needs on `comm` before it is issued; inside a
/// capture (`capturing`) only checks that they were made before (see the module's
/// documentation).
pub(super) fn prepare_on<C: Communicator>(
    comm: &C,
    regs: &RegCache,
    table: Option<&TuneTable>,
    op: &OpDesc,
    mems: &[Option<CommMem>],
    capturing: bool,
    timeout: Duration,
) -> Result<RegMode> {
    let mut st = regs.lock();
    // The sweep walks every cached buffer: at every operation while they are few, every
    // 64th once they are many, so a group with hundreds of buffers pays O(1) per op. Never
    // inside a capture: releasing is a host call too.
    let issued: u64 = st.ops.iter().sum();
    if !capturing && (st.bufs.len() <= 16 || issued % 64 == 0) {
        st.sweep(comm);
    }
    let mems = moved(op, mems);
    let bytes = op.numel.0.max(op.numel.1) as u64 * op.dtype.size() as u64;
    let registrable = !mems.is_empty() && mems.iter().all(Option::is_some);
    let chosen = table.map_or(RegMode::Plain, |t| {
        t.choose(op.kind, op.dtype, bytes, registrable)
    });
    let mode = st.one_kind(mems, chosen);
    for m in mems.iter().flatten() {
        if capturing {
            st.check_ready(m, mode, op, bytes)?;
        } else {
            st.ensure(comm, m, mode, timeout)?;
        }
    }
    st.ops[usize::from(mode.level())] += 1;
    Ok(mode)
}

/// Waits until no work issued on `m` is pending, up to `timeout` (a [`Error::Timeout`]
/// naming the buffer past it): what must hold before a registration of it is released.
pub(super) fn wait_idle(m: &CommMem, timeout: Duration) -> Result<()> {
    let began = Instant::now();
    let mut polls = 0u32;
    while !m.keep.idle() {
        if began.elapsed() >= timeout {
            return Err(Error::Timeout {
                what: text!("the work on buffer {:#x} ({} B)", m.addr, m.bytes),
                after_ms: timeout.as_millis().min(u128::from(u64::MAX)) as u64,
            });
        }
        polls = polls.saturating_add(1);
        if polls < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(())
}

impl<B: Memory> Issuer<'_, B> {
    /// Chooses the mode of an operation on `mems` (one per buffer it uses, `None` for a plain
    /// or absent buffer) and makes the registrations it needs, before the operation is
    /// issued (inside a capture: checks they were made; see the module's documentation).
    pub fn prepare(
        &self,
        table: Option<&TuneTable>,
        op: &OpDesc,
        mems: &[Option<CommMem>],
    ) -> Result<RegMode> {
        let e = self.entry;
        let timeout = Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed));
        prepare_on(
            &e.comm,
            &e.regs,
            table,
            op,
            mems,
            self.cap.is_some(),
            timeout,
        )
    }

    /// [`Issuer::prepare`] when the operation must go through it ([`Issuer::tunes`]); the
    /// buffers' identities (`mems`) are taken only then.
    pub fn tune<const N: usize>(
        &self,
        table: Option<&TuneTable>,
        op: &OpDesc,
        mems: impl FnOnce() -> [Option<CommMem>; N],
    ) -> Result<()> {
        if self.tunes(table) {
            self.prepare(table, op, &mems())?;
        }
        Ok(())
    }

    /// Whether an operation must go through [`Issuer::prepare`]: under a table, or on a
    /// communicator with windows (whose buffers must be all in windows or none).
    pub fn tunes(&self, table: Option<&TuneTable>) -> bool {
        table.is_some() || self.entry.regs.has_windows()
    }
}

fn cached(m: &CommMem) -> Cached {
    Cached {
        mem: m.clone(),
        local: None,
        window: None,
    }
}

/// Compares the ranks' tune tables through the store when a communicator is made, before any
/// operation on it (see [`agree_on`]), so on a mismatch every rank refuses alike (a window
/// registered on some ranks only would hang the others). Nothing is exchanged when this rank
/// has no table; a rank with one waits (up to the group's timeout) for the others'
/// fingerprints, so a rank without `OXCCL_TUNE_FILE` shows as the one that never wrote its key.
pub(crate) fn agree<B: Memory>(inner: &PgInner<B>) -> Result<()> {
    let Some(table) = inner.opts.tune.as_deref() else {
        return Ok(());
    };
    let mine = format!("{:016x}", table.fingerprint());
    let hint = format!("its tune table (does every rank set {TUNE_FILE_VAR}?)");
    match agree_on(inner, "tune", &mine, "tune table", &hint)? {
        None => Ok(()),
        Some(verdict) => Err(Error::invalid(
            "tune",
            format_args!(
                "the same tune table on every rank of group {} ({TUNE_FILE_VAR}): {verdict}",
                inner.uid
            ),
        )),
    }
}

/// The least time [`agree_on`] gives a read past its deadline.
const LAST_READ: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether every member of the group holds the same `mine` for `topic`, through the store:
/// group rank 0 reads every rank's value and writes a verdict every rank reads, so all
/// ranks decide alike. `None`: they agree; `Some(why)`: the first difference, naming the
/// ranks and their values (`what` names the value). A rank that never writes its value is
/// named after the group's timeout (`hint`: what it did not publish, and the likely cause).
pub(super) fn agree_on<B: Memory>(
    inner: &PgInner<B>,
    topic: &str,
    mine: &str,
    what: &str,
    hint: &str,
) -> Result<Option<String>> {
    let Some(rank) = inner.rank else {
        return Ok(None);
    };
    let store = &inner.store;
    let timeout = inner.timeout();
    let key = |r: &str| super::keys::agreement(topic, inner.uid, r);
    let waited = |e: Error, r: usize| match e {
        Error::Timeout { after_ms, .. } => Error::Timeout {
            what: text!("group rank {r} never published {hint}"),
            after_ms,
        },
        other => other,
    };
    store.set(&key(&rank.to_string()), mine.as_bytes())?;
    let verdict = if rank == 0 {
        // One deadline for all the reads (a read per rank each given the whole timeout kept
        // rank 0 up to (size - 1) timeouts, and the others' wait for the verdict ended first);
        // a read past it still gets a moment, for a value that is there already.
        let began = std::time::Instant::now();
        let left = || timeout.saturating_sub(began.elapsed()).max(LAST_READ);
        let mut verdict = String::from(AGREED);
        for (r, &global) in inner.ranks.iter().enumerate().skip(1) {
            let got = store
                .get(&key(&r.to_string()), left())
                .map_err(|e| waited(e, r))?;
            if got != mine.as_bytes() {
                verdict.clear();
                // Writing into a String cannot fail.
                let _ = write_disagreement(
                    &mut verdict,
                    what,
                    global,
                    &String::from_utf8_lossy(&got),
                    inner.ranks.first().copied().unwrap_or(0),
                    mine,
                );
                break;
            }
        }
        store.set(&key("verdict"), verdict.as_bytes())?;
        verdict
    } else {
        let got = store
            .get(&key("verdict"), timeout)
            .map_err(|e| waited(e, 0))?;
        String::from_utf8_lossy(&got).into_owned()
    };
    Ok((verdict != AGREED).then_some(verdict))
}

impl<B: Memory> ProcessGroup<B> {
    /// What the group's communicator did with buffers: operations per mode, allocations
    /// registered and in windows now (makes the communicator if it is not made yet).
    pub fn tuned_stats(&self) -> Result<TunedStats> {
        Ok(self.inner.entry("read the buffer modes")?.regs.stats())
    }

    /// Runs `f` with the group's communicator (made first if needed), e.g. to inspect the
    /// mock's registrations and windows. `f` runs without the group's lock, so it may call
    /// the group; it must not issue on the communicator behind the group's back.
    pub fn with_comm<R>(&self, f: impl FnOnce(&CommOf<B>) -> R) -> Result<R> {
        let e = self.inner.entry("inspect the communicator")?;
        Ok(f(&e.comm))
    }

    /// The group's tune table, if any.
    pub fn tune_table(&self) -> Option<&TuneTable> {
        self.inner.opts.tune.as_deref()
    }
}

impl<B: Memory> ProcessGroup<B> {
    /// The table for an operation of `kind`, when that kind is tuned: the collectives whose
    /// buffers have the same size on every rank (a window must), and sends and receives
    /// (registered at most: see [`TuneTable::choose`]). Rooted operations with an absent
    /// buffer and uneven variants are always plain.
    pub(crate) fn tune_for(&self, kind: oxccl_core::OpKind) -> Option<&TuneTable> {
        use oxccl_core::OpKind as K;
        match kind {
            K::AllReduce
            | K::Broadcast
            | K::Reduce
            | K::AllGather
            | K::ReduceScatter
            | K::AllToAll
            | K::Send
            | K::Recv => self.inner.opts.tune.as_deref(),
            _ => None,
        }
    }
}

impl<B: Memory> ProcessGroup<B> {
    /// A buffer of `len` zeros in the library's allocator ([`Memory::CommBuf`]: NCCL's
    /// `ncclMemAlloc`, 2.19+), which the tune table may register or put in a window. Made on
    /// the group's copy stream, so allocating never makes the communicator.
    pub fn alloc_comm<T: crate::Element>(&self, len: usize) -> Result<B::CommBuf<T>> {
        let st = self.inner.copy_stream()?;
        self.inner.backend.alloc_comm(st, len)
    }

    /// A [`Memory::CommBuf`] holding a copy of `data`.
    pub fn upload_comm<T: crate::Element>(&self, data: &[T]) -> Result<B::CommBuf<T>> {
        let st = self.inner.copy_stream()?;
        self.inner.backend.upload_comm(st, data)
    }

    /// The contents of `buf` (either kind), after every operation that uses it (blocks).
    pub fn download_any<T: crate::Element>(
        &self,
        buf: &impl crate::buffer::Operand<B, Elem = T>,
    ) -> Result<Vec<T>> {
        let st = self.inner.copy_stream()?;
        buf.download(&self.inner.backend, st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_loads_a_table_or_names_itself() {
        assert!(tune_from_env(None).unwrap().is_none());
        assert!(tune_from_env(Some("")).unwrap().is_none());
        let dir = std::env::temp_dir().join(format!("oxccl-tune-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.tune");
        std::fs::write(&good, "oxccl-tune 1\nall_reduce * 0 max window\n").unwrap();
        let t = tune_from_env(good.to_str()).unwrap().unwrap();
        assert_eq!(t.rows().len(), 1);
        let bad = dir.join("bad.tune");
        std::fs::write(&bad, "oxccl-tune 1\nall_reduce * 0\n").unwrap();
        match tune_from_env(bad.to_str()) {
            Err(Error::InvalidArgument { arg, expected }) => {
                assert_eq!(arg, TUNE_FILE_VAR);
                assert!(expected.contains("line 2"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

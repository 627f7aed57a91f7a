//! Making a communicator: the steps every path shares (init by rank with or without a config,
//! scalable init, split, shrink). The config built for the loaded release ([`config`]); one
//! NCCL call with it and an out-handle that outlives it ([`create`], [`OutHandle`]); a handle
//! nobody else holds discarded on failure ([`discard`]); a new communicator adopted from its
//! init code ([`NcclBackend::init_with`]), a child from its parent's call
//! ([`NcclComm::adopt_child`]).

use crate::comm::{poll_raw, NcclComm, Raw};
use crate::wait::Deadline;
use crate::NcclBackend;
use oxccl_core::{text, CommConfig, ConfigField, Device, Error, Feature, Result, ResultCode};
use oxccl_loader::{ConfigBuf, Library, RawComm, RawConfig};
use std::cell::UnsafeCell;
use std::sync::Arc;

/// The out-handle a creating call writes. NCCL may write it after the call has returned (a
/// nonblocking split fills it once the parent leaves InProgress, NVIDIA/nccl#1472), so it
/// lives in the caller's frame until the caller has waited for that, and is read volatile.
pub(crate) struct OutHandle(UnsafeCell<RawComm>);

impl OutHandle {
    /// An empty slot (null).
    pub(crate) fn new() -> OutHandle {
        OutHandle(UnsafeCell::new(RawComm::NULL))
    }

    /// The pointer NCCL writes through.
    fn ptr(&self) -> *mut RawComm {
        self.0.get()
    }

    /// The handle NCCL wrote (null when none yet).
    pub(crate) fn read(&self) -> RawComm {
        // SAFETY: the slot is live (borrowed); NCCL may write it from its own thread, and the
        // volatile read makes sure the value it wrote is the one seen. Interior mutability
        // (`UnsafeCell`) makes those writes through `ptr` sound while `self` is borrowed.
        unsafe { std::ptr::read_volatile(self.0.get()) }
    }
}

/// The `ncclConfig_t` for `cfg`, built for the loaded release; `None` when nothing is set
/// (NCCL's defaults, or the parent's config for a split). Refusals (a field this release lacks)
/// come before any other call.
pub(crate) fn config(lib: &Library, cfg: &CommConfig) -> Result<Option<ConfigBuf>> {
    if cfg.set_fields().next().is_none() {
        return Ok(None);
    }
    lib.features().require(Feature::NonBlocking)?;
    ConfigBuf::new(cfg, lib.version()).map(Some)
}

/// Runs one creating NCCL call. `call` gets the pointer to `out` and `config`'s pointer (null
/// for `None`) and returns NCCL's code. `out` must stay where it is until NCCL has written it
/// (see [`OutHandle`]).
pub(crate) fn create(
    config: &mut Option<ConfigBuf>,
    out: &OutHandle,
    call: impl FnOnce(*mut RawComm, *mut RawConfig) -> Result<i32>,
) -> Result<i32> {
    // Taken right before the call: it points into `config`, which outlives it.
    let cfg_ptr = config
        .as_mut()
        .map_or(std::ptr::null_mut(), ConfigBuf::as_mut_ptr);
    call(out.ptr(), cfg_ptr)
}

/// Aborts a communicator NCCL made that nobody else holds (a failed init or child).
pub(crate) fn discard(lib: &Library, raw: RawComm) {
    if raw.is_null() {
        return;
    }
    if let Some(abort) = lib.api().comm_abort {
        // SAFETY: `raw` is a communicator NCCL returned and nobody else holds; it is never
        // used after this.
        unsafe { abort(raw) };
    }
}

/// [`discard`] on a thread named `oxccl-abort`, counted by [`oxccl_core::pending_aborts`]
/// until it returns: for a communicator still in progress past its limit, whose abort would
/// keep the caller past it too. Discarded here when no thread can be started.
pub(crate) fn discard_in_background(lib: &Arc<Library>, raw: RawComm) {
    if raw.is_null() {
        return;
    }
    /// The handle, sent to the thread that alone uses it from then on.
    struct Owned(RawComm);
    // SAFETY: an opaque NCCL handle nobody else holds; NCCL allows it to be aborted from any
    // thread.
    unsafe impl Send for Owned {}
    let counted = oxccl_core::AbortInFlight::begin();
    let (lib2, owned) = (Arc::clone(lib), Owned(raw));
    let spawned = std::thread::Builder::new()
        .name("oxccl-abort".into())
        .spawn(move || {
            let _counted = counted;
            // The whole wrapper moves here (a closure naming only `owned.0` would capture the
            // bare handle, which is not `Send`).
            let owned = owned;
            discard(&lib2, owned.0);
        });
    if let Err(e) = spawned {
        log::warn!("no thread to discard an NCCL communicator in the background ({e}); here");
        discard(lib, raw);
    }
}

impl NcclBackend {
    /// What every init path shares once its arguments are checked: the config (refused before
    /// any CUDA call), the device's context, the creating `call` (given the out-handle and the
    /// config pointer), and the new communicator: `Initializing` when a nonblocking init is in
    /// progress, `Ready` on success; on failure the handle (if any) is discarded.
    pub(crate) fn init_with(
        &self,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
        call: impl FnOnce(*mut RawComm, *mut RawConfig) -> Result<i32>,
    ) -> Result<NcclComm> {
        let lib = self.library();
        let mut buf = config(lib, cfg)?;
        let ctx = crate::cuda::context(device)?;
        let out = OutHandle::new();
        let code = create(&mut buf, &out, call)?;
        let raw = out.read();
        let nonblocking = cfg.is_nonblocking();
        let initializing = code == ResultCode::IN_PROGRESS.0 && nonblocking;
        if !initializing {
            if let Err(e) = lib.check(code, raw) {
                discard(lib, raw);
                return Err(e);
            }
        }
        if raw.is_null() {
            return Err(crate::absent::base_symbol(
                "communicator handle (init returned none)",
            ));
        }
        let r = Raw {
            raw,
            rank,
            size,
            device,
            nonblocking,
            initializing,
        };
        Ok(NcclComm::wrap(lib.clone(), ctx, r, self.settings()))
    }
}

impl NcclComm {
    /// Settles this parent after a split (`wait_always`: NCCL fills the child only once the
    /// parent leaves InProgress, NVIDIA/nccl#1472, and may return Success before it does) or a
    /// shrink, then adopts the child it made (`None`: no child, e.g. NCCL_SPLIT_NOCOLOR). A
    /// nonblocking parent that stays in progress past the time limit is aborted in the
    /// background: the timeout returns at once, the parent is `Aborting` until NCCL's abort
    /// returns (see [`oxccl_core::CommAbort::abort_in_background`]).
    pub(crate) fn adopt_child(
        &self,
        what: &'static str,
        code: i32,
        out: &OutHandle,
        wait_always: bool,
        cfg: &CommConfig,
    ) -> Result<Option<NcclComm>> {
        let in_progress = code == ResultCode::IN_PROGRESS.0;
        if !in_progress || !self.is_nonblocking() {
            self.finish(code, what)?;
        }
        if self.is_nonblocking() && (in_progress || wait_always) {
            if let Err(e) = self.wait_ready(what) {
                if let Error::Timeout { after_ms, .. } = &e {
                    // The parent is stuck in the call: nothing else can run on it.
                    self.abort_in_background(&format!(
                        "nonblocking {what} timed out after {after_ms} ms"
                    ));
                }
                return Err(e);
            }
        }
        // NCCL writes the handle during the call, or (nonblocking) by the time the parent
        // left InProgress, which the wait above saw.
        let raw = out.read();
        if raw.is_null() {
            return Ok(None);
        }
        self.child(raw, cfg).map(Some)
    }

    /// Wraps a child NCCL made from this communicator: waits for a nonblocking child to be
    /// ready (bounded by the time limit), reads its rank and size; on failure it is discarded,
    /// in the background when the limit passed (the timeout returns at once; the discard is
    /// counted by [`oxccl_core::pending_aborts`]).
    fn child(&self, raw: RawComm, cfg: &CommConfig) -> Result<NcclComm> {
        let lib = self.library();
        let nonblocking = if cfg.is_set(ConfigField::Blocking) {
            cfg.is_nonblocking()
        } else {
            self.is_nonblocking()
        };
        let ready = if nonblocking {
            Deadline::after(self.timeout()).poll("child communicator", || poll_raw(lib, raw))
        } else {
            Ok(())
        };
        let (rank, size) = match ready.and_then(|()| query_rank_size(lib, raw)) {
            Ok(n) => n,
            Err(e @ Error::Timeout { .. }) => {
                discard_in_background(lib, raw);
                return Err(e);
            }
            Err(e) => {
                discard(lib, raw);
                return Err(e);
            }
        };
        let r = Raw {
            raw,
            rank,
            size,
            device: oxccl_core::Communicator::device(self),
            nonblocking,
            initializing: false,
        };
        Ok(NcclComm::wrap(
            lib.clone(),
            self.context().clone(),
            r,
            self.settings(),
        ))
    }
}

/// The rank and size NCCL gives a communicator.
fn query_rank_size(lib: &Library, raw: RawComm) -> Result<(u32, u32)> {
    let api = lib.api();
    let (Some(count), Some(user_rank)) = (api.comm_count, api.comm_user_rank) else {
        return Err(crate::absent::base_symbol(
            "ncclCommCount / ncclCommUserRank",
        ));
    };
    let (mut n, mut r) = (0i32, 0i32);
    // SAFETY: `raw` is a live communicator; the out-pointers are valid locals.
    lib.check(unsafe { count(raw, &mut n) }, raw)?;
    // SAFETY: as above.
    lib.check(unsafe { user_rank(raw, &mut r) }, raw)?;
    Ok((u32::try_from(r).unwrap_or(0), u32::try_from(n).unwrap_or(0)))
}

/// An internal error for a creating call that reported success but made nothing.
pub(crate) fn none_made(what: &str) -> Error {
    Error::Backend {
        code: ResultCode::INTERNAL_ERROR,
        text: text!("{what} returned no communicator"),
        last: text!(""),
    }
}

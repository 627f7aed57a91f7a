//! Making a communicator: the steps every path shares (init by rank with or without a config,
//! scalable init, split, shrink). The config built for the loaded release ([`config`]); one
//! NCCL call with it and an out-handle that outlives it ([`create`], [`OutHandle`]); a handle
//! nobody else holds discarded on failure ([`discard`]); a new communicator adopted from its
//! init code ([`NcclBackend::init_with`]), a child from its parent's call
//! ([`NcclComm::adopt_child`]).

use oxccl_core::{text, CommConfig, Error, Feature, Result, ResultCode};
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
    // SAFETY: `raw` is a communicator NCCL returned and nobody else holds; it is never used
    // after this.
    unsafe { crate::ffi::comm_abort(lib.api(), raw) };
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

/// The rank and size NCCL gives a communicator.
pub(crate) fn query_rank_size(lib: &Library, raw: RawComm) -> Result<(u32, u32)> {
    // SAFETY: callers pass a communicator NCCL made and has not released.
    let (r, n) = unsafe { crate::ffi::comm_rank_size(lib, raw)? };
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

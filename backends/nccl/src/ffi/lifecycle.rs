//! A communicator's life: its unique id, the calls that create one (init, split, shrink, grow),
//! and those that stop or end one (revoke, suspend, resume, finalize, destroy, abort).
//!
//! A creating call writes its out-handle, possibly after it returned (a nonblocking call):
//! `out` and `cfg` are the pointers `crate::create::create` hands its call, whose frame keeps
//! them valid until NCCL wrote the handle.

use super::symbol::{base, gated, Code};
use oxccl_core::{Error, Feature, Result, UniqueId};
use oxccl_loader::{Api, Library, RawComm, RawConfig};

/// `ncclGetUniqueId`: a new id for an init.
pub(crate) fn get_unique_id(lib: &Library) -> Result<UniqueId> {
    let f = base(lib.api().get_unique_id, "ncclGetUniqueId")?;
    let mut id = UniqueId([0u8; UniqueId::LEN]);
    // SAFETY: `id` is a #[repr(C)] 128-byte ncclUniqueId, a local NCCL fills.
    lib.check(unsafe { f(&mut id) }, RawComm::NULL)?;
    Ok(id)
}

/// `ncclCommInitRank`: rank `rank` of `size` of the communicator `id` names.
///
/// # Safety
/// `out` is valid for NCCL to write a handle until it has.
pub(crate) unsafe fn comm_init_rank(
    api: &Api,
    out: *mut RawComm,
    size: i32,
    id: &UniqueId,
    rank: i32,
) -> Result<Code> {
    let f = base(api.comm_init_rank, "ncclCommInitRank")?;
    // SAFETY: `out` by this function's contract; the id is passed by value.
    Ok(unsafe { f(out, size, *id, rank) })
}

/// `ncclCommInitRankConfig`: [`comm_init_rank`] with a config.
///
/// # Safety
/// As [`comm_init_rank`]; `cfg` points to a config built for the loaded release, alive for the
/// call.
pub(crate) unsafe fn comm_init_rank_config(
    api: &Api,
    out: *mut RawComm,
    size: i32,
    id: &UniqueId,
    rank: i32,
    cfg: *mut RawConfig,
) -> Result<Code> {
    let f = gated(
        api.comm_init_rank_config,
        Feature::NonBlocking,
        "ncclCommInitRankConfig",
    )?;
    // SAFETY: `out` and `cfg` by this function's contract; the id is passed by value.
    Ok(unsafe { f(out, size, *id, rank, cfg) })
}

/// `ncclCommInitAll`: one communicator per device of `devices` (ordinals), in this process.
pub(crate) fn comm_init_all(lib: &Library, devices: &[i32]) -> Result<Vec<RawComm>> {
    let f = base(lib.api().comm_init_all, "ncclCommInitAll")?;
    let n = i32::try_from(devices.len())
        .map_err(|_| Error::invalid("devices", format_args!("at most {}", i32::MAX)))?;
    let mut raws: Vec<RawComm> = vec![RawComm::NULL; devices.len()];
    // SAFETY: `raws` has room for `n` handles; `devices` holds `n` ordinals; both outlive the
    // call, which is blocking.
    let code = unsafe { f(raws.as_mut_ptr(), n, devices.as_ptr()) };
    lib.check(code, RawComm::NULL)?;
    Ok(raws)
}

/// `ncclCommInitRankScalable`: an init from several unique ids.
///
/// # Safety
/// `out` and `cfg` as for [`comm_init_rank_config`] (`cfg` may be null).
pub(crate) unsafe fn comm_init_rank_scalable(
    api: &Api,
    out: *mut RawComm,
    size: i32,
    rank: i32,
    ids: &mut [UniqueId],
    cfg: *mut RawConfig,
) -> Result<Code> {
    let f = gated(
        api.comm_init_rank_scalable,
        Feature::ScalableInit,
        "ncclCommInitRankScalable",
    )?;
    let n_ids = i32::try_from(ids.len())
        .map_err(|_| Error::invalid("ids", format_args!("at most {}", i32::MAX)))?;
    // SAFETY: `out` and `cfg` by this function's contract; `ids` holds `n_ids` ids for the call.
    Ok(unsafe { f(out, size, rank, n_ids, ids.as_mut_ptr(), cfg) })
}

/// `ncclCommSplit`: a child of `comm` of the ranks with the same `color` (-1: none), ordered by
/// `key`.
///
/// # Safety
/// `comm` is a live communicator; `out` and `cfg` as for [`comm_init_rank_scalable`].
pub(crate) unsafe fn comm_split(
    api: &Api,
    comm: RawComm,
    color: i32,
    key: i32,
    out: *mut RawComm,
    cfg: *mut RawConfig,
) -> Result<Code> {
    let f = gated(api.comm_split, Feature::Split, "ncclCommSplit")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(comm, color, key, out, cfg) })
}

/// `ncclCommShrink`: a child of `comm` without the ranks of `exclude`; `abort_parent` stops
/// the parent's operations in flight (`NCCL_SHRINK_ABORT`).
///
/// # Safety
/// As [`comm_split`].
pub(crate) unsafe fn comm_shrink(
    api: &Api,
    comm: RawComm,
    exclude: &mut [i32],
    out: *mut RawComm,
    cfg: *mut RawConfig,
    abort_parent: bool,
) -> Result<Code> {
    let f = gated(api.comm_shrink, Feature::Shrink, "ncclCommShrink")?;
    let n = i32::try_from(exclude.len())
        .map_err(|_| Error::invalid("exclude", format_args!("at most {}", i32::MAX)))?;
    // SAFETY: this function's contract; `exclude` holds `n` ranks for the call.
    Ok(unsafe {
        f(
            comm,
            exclude.as_mut_ptr(),
            n,
            out,
            cfg,
            i32::from(abort_parent),
        )
    })
}

/// `ncclCommGrow`: `size` ranks from `comm` (null for a new rank, which passes its `rank`; a
/// running rank passes -1). `id` is the grow's id on its root and on new ranks, `None` on the
/// other running ranks.
///
/// # Safety
/// `comm` is null or a live communicator; `out` and `cfg` as for [`comm_init_rank_scalable`].
pub(crate) unsafe fn comm_grow(
    api: &Api,
    comm: RawComm,
    size: i32,
    id: Option<&UniqueId>,
    rank: i32,
    out: *mut RawComm,
    cfg: *mut RawConfig,
) -> Result<Code> {
    let f = gated(api.comm_grow, Feature::Grow, "ncclCommGrow")?;
    let id = id.map_or(std::ptr::null(), |id| id as *const UniqueId);
    // SAFETY: this function's contract; `id` is null or borrowed for the call.
    Ok(unsafe { f(comm, size, id, rank, out, cfg) })
}

/// `ncclCommGetUniqueId`: an id for a grow of `comm`, with NCCL's code (the id is meaningful
/// once the code settles to success).
///
/// # Safety
/// `comm` is a live communicator.
pub(crate) unsafe fn comm_get_unique_id(api: &Api, comm: RawComm) -> Result<(Code, UniqueId)> {
    let f = gated(api.comm_get_unique_id, Feature::Grow, "ncclCommGetUniqueId")?;
    let mut id = UniqueId([0; UniqueId::LEN]);
    // SAFETY: `comm` by this function's contract; `id` is a local of NCCL's size.
    let code = unsafe { f(comm, &mut id) };
    Ok((code, id))
}

/// `ncclCommRevoke` with `NCCL_REVOKE_DEFAULT`, the only flags NCCL defines.
///
/// # Safety
/// `comm` is a live communicator.
pub(crate) unsafe fn comm_revoke(api: &Api, comm: RawComm) -> Result<Code> {
    let f = gated(api.comm_revoke, Feature::Revoke, "ncclCommRevoke")?;
    // SAFETY: this function's contract; flags 0.
    Ok(unsafe { f(comm, 0) })
}

/// `ncclCommSuspend` with `flags` (0 or `NCCL_SUSPEND_MEM`).
///
/// # Safety
/// `comm` is a live communicator no operation reaches meanwhile.
pub(crate) unsafe fn comm_suspend(api: &Api, comm: RawComm, flags: i32) -> Result<Code> {
    let f = gated(api.comm_suspend, Feature::SuspendResume, "ncclCommSuspend")?;
    // SAFETY: this function's contract; flags NCCL defines.
    Ok(unsafe { f(comm, flags) })
}

/// `ncclCommResume`.
///
/// # Safety
/// `comm` is a live (suspended) communicator.
pub(crate) unsafe fn comm_resume(api: &Api, comm: RawComm) -> Result<Code> {
    let f = gated(api.comm_resume, Feature::SuspendResume, "ncclCommResume")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(comm) })
}

/// `ncclCommFinalize`: flushes the communicator's outstanding work.
///
/// # Safety
/// `comm` is a live communicator.
pub(crate) unsafe fn comm_finalize(api: &Api, comm: RawComm) -> Result<Code> {
    let f = gated(api.comm_finalize, Feature::Finalize, "ncclCommFinalize")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(comm) })
}

/// `ncclCommDestroy`; `None` when the library lacks it.
///
/// # Safety
/// `comm` is a live communicator that nothing uses during or after the call.
pub(crate) unsafe fn comm_destroy(api: &Api, comm: RawComm) -> Option<Code> {
    // SAFETY: this function's contract.
    api.comm_destroy.map(|f| unsafe { f(comm) })
}

/// `ncclCommAbort`; `None` when the library lacks it.
///
/// # Safety
/// As [`comm_destroy`].
pub(crate) unsafe fn comm_abort(api: &Api, comm: RawComm) -> Option<Code> {
    // SAFETY: this function's contract.
    api.comm_abort.map(|f| unsafe { f(comm) })
}

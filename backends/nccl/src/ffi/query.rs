//! What NCCL says of a communicator: its rank and size, its asynchronous error, its memory.

use super::symbol::{base, gated};
use oxccl_core::{Feature, Result};
use oxccl_loader::{Library, RawComm};

/// `ncclCommUserRank` and `ncclCommCount`: the communicator's (rank, size) as NCCL gives them.
///
/// # Safety
/// `comm` is a live communicator of `lib`.
pub(crate) unsafe fn comm_rank_size(lib: &Library, comm: RawComm) -> Result<(i32, i32)> {
    let api = lib.api();
    let (Some(count), Some(user_rank)) = (api.comm_count, api.comm_user_rank) else {
        return Err(crate::absent::base_symbol(
            "ncclCommCount / ncclCommUserRank",
        ));
    };
    let (mut n, mut r) = (0i32, 0i32);
    // SAFETY: `comm` is live (this function's contract); the out-pointer is a local.
    lib.check(unsafe { count(comm, &mut n) }, comm)?;
    // SAFETY: as above.
    lib.check(unsafe { user_rank(comm, &mut r) }, comm)?;
    Ok((r, n))
}

/// `ncclCommGetAsyncError`: the communicator's asynchronous code, once the call itself
/// succeeded.
///
/// # Safety
/// `comm` is a live communicator of `lib`.
pub(crate) unsafe fn comm_get_async_error(lib: &Library, comm: RawComm) -> Result<i32> {
    let f = base(lib.api().comm_get_async_error, "ncclCommGetAsyncError")?;
    let mut async_code = 0i32;
    // SAFETY: `comm` is live (this function's contract); the out-pointer is a local.
    lib.check(unsafe { f(comm, &mut async_code) }, comm)?;
    Ok(async_code)
}

/// `ncclCommMemStats` for one `stat` (an `ncclMemStat_t` NCCL defines).
///
/// # Safety
/// `comm` is a live communicator of `lib`.
pub(crate) unsafe fn comm_mem_stats(lib: &Library, comm: RawComm, stat: i32) -> Result<u64> {
    let f = gated(
        lib.api().comm_mem_stats,
        Feature::MemStats,
        "ncclCommMemStats",
    )?;
    let mut v = 0u64;
    // SAFETY: `comm` is live (this function's contract); the out-pointer is a local.
    lib.check(unsafe { f(comm, stat, &mut v) }, comm)?;
    Ok(v)
}

//! One-sided operations: `ncclPutSignal`, `ncclSignal`, `ncclWaitSignal`. Each is enqueued on
//! `stream`, with flags 0, the only value NCCL defines.

use super::symbol::{gated, Code};
use oxccl_core::{Feature, Result};
use oxccl_loader::raw::RawWaitSignalDesc;
use oxccl_loader::{Api, RawComm, RawStream, RawWindow};
use std::ffi::c_void;

/// Where and what a put writes: `count` elements of `dtype` (an `ncclDataType_t`) from `send`
/// into `peer`'s part of `window` at `offset`, then signal `signal` of context `ctx`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Put {
    /// The device address of the data.
    pub send: usize,
    /// How many elements.
    pub count: usize,
    /// Their `ncclDataType_t`.
    pub dtype: i32,
    /// The rank written to.
    pub peer: i32,
    /// The window, as NCCL made it.
    pub window: usize,
    /// Where in the peer's part of the window.
    pub offset: usize,
    /// The signal raised once the data landed.
    pub signal: i32,
    /// The signal's context.
    pub ctx: i32,
}

/// `ncclPutSignal` of `put`.
///
/// # Safety
/// `comm` is a live communicator and `stream` a live stream of its device; the data lies
/// within the peer's part of a live window of `comm`, and `send` stays valid until the stream
/// passes the put.
pub(crate) unsafe fn put_signal(
    api: &Api,
    put: &Put,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = gated(api.put_signal, Feature::OneSided, "ncclPutSignal")?;
    // SAFETY: this function's contract.
    Ok(unsafe {
        f(
            put.send as *const c_void,
            put.count,
            put.dtype,
            put.peer,
            put.window as RawWindow,
            put.offset,
            put.signal,
            put.ctx,
            0,
            comm,
            stream,
        )
    })
}

/// `ncclSignal`: raises signal `signal` of context `ctx` on `peer`.
///
/// # Safety
/// `comm` is a live communicator and `stream` a live stream of its device.
pub(crate) unsafe fn signal(
    api: &Api,
    peer: i32,
    signal: i32,
    ctx: i32,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = gated(api.signal, Feature::OneSided, "ncclSignal")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(peer, signal, ctx, 0, comm, stream) })
}

/// `ncclWaitSignal` for every descriptor of `descs`.
///
/// # Safety
/// `comm` is a live communicator and `stream` a live stream of its device.
pub(crate) unsafe fn wait_signal(
    api: &Api,
    descs: &mut [RawWaitSignalDesc],
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = gated(api.wait_signal, Feature::OneSided, "ncclWaitSignal")?;
    let n = i32::try_from(descs.len())
        .map_err(|_| oxccl_core::Error::invalid("waits", format_args!("at most {}", i32::MAX)))?;
    // SAFETY: this function's contract; `descs` holds `n` descriptors for the call.
    Ok(unsafe { f(n, descs.as_mut_ptr(), comm, stream) })
}

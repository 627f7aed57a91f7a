//! What every NCCL call of one issue shares, and the point-to-point calls made through it.

use crate::codes::data_type;
use crate::ffi;
use oxccl_core::{DataType, Result, ResultCode};
use oxccl_loader::{Api, RawComm, RawStream};

/// What every NCCL call of one issue shares: the table, the communicator and its place in it,
/// the stream, the features it may use, and the reduction handle (0 when none).
pub(super) struct Ctx<'a> {
    pub(super) api: &'a Api,
    pub(super) comm: RawComm,
    pub(super) stream: RawStream,
    pub(super) rank: u32,
    pub(super) size: usize,
    pub(super) feats: &'a oxccl_core::FeatureSet,
    pub(super) red: i32,
}

impl Ctx<'_> {
    /// `ncclSend` of `count` elements at `addr` to `peer`; `InvalidUsage` when the library
    /// lacks it.
    ///
    /// # Safety
    /// `addr` holds `count` elements of `dt` on the communicator's device.
    pub(super) unsafe fn send(&self, addr: usize, count: usize, dt: DataType, peer: u32) -> i32 {
        let (dt, peer) = (data_type(dt), peer as i32);
        // SAFETY: the caller's contract; the communicator is live and the stream its own.
        p2p(unsafe { ffi::send(self.api, addr, count, dt, peer, self.comm, self.stream) })
    }

    /// `ncclRecv` of `count` elements into `addr` from `peer`; `InvalidUsage` when the library
    /// lacks it.
    ///
    /// # Safety
    /// `addr` has room for `count` elements of `dt` on the communicator's device.
    pub(super) unsafe fn recv(&self, addr: usize, count: usize, dt: DataType, peer: u32) -> i32 {
        let (dt, peer) = (data_type(dt), peer as i32);
        // SAFETY: the caller's contract; the communicator is live and the stream its own.
        p2p(unsafe { ffi::recv(self.api, addr, count, dt, peer, self.comm, self.stream) })
    }
}

/// A point-to-point call's code: an absent function reads as `InvalidUsage`, a code like
/// NCCL's own, so that a group of such calls reports its first failure the one way.
fn p2p(r: Result<i32>) -> i32 {
    r.unwrap_or(ResultCode::INVALID_USAGE.0)
}

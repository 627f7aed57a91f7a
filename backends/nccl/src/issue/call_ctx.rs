//! What every NCCL call of one issue shares, and the point-to-point calls made through it.

use super::pointers::{m, p};
use crate::codes::data_type;
use oxccl_core::{DataType, ResultCode};
use oxccl_loader::{Api, RawComm, RawStream};
use std::ffi::c_int;

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

/// `ncclSend` or `ncclRecv`: the same arguments but for the buffer's mutability.
type P2pFn<B> = unsafe extern "C" fn(B, usize, c_int, c_int, RawComm, RawStream) -> c_int;

impl Ctx<'_> {
    /// `ncclSend` of `count` elements at `addr` to `peer`.
    ///
    /// # Safety
    /// `addr` holds `count` elements of `dt` on the communicator's device.
    pub(super) unsafe fn send(&self, addr: usize, count: usize, dt: DataType, peer: u32) -> i32 {
        // SAFETY: the caller's contract.
        unsafe { self.p2p(self.api.send, p(addr), count, dt, peer) }
    }

    /// `ncclRecv` of `count` elements into `addr` from `peer`.
    ///
    /// # Safety
    /// `addr` has room for `count` elements of `dt` on the communicator's device.
    pub(super) unsafe fn recv(&self, addr: usize, count: usize, dt: DataType, peer: u32) -> i32 {
        // SAFETY: the caller's contract.
        unsafe { self.p2p(self.api.recv, m(addr), count, dt, peer) }
    }

    /// One point-to-point call on this communicator and stream; `InvalidUsage` when the
    /// library lacks it.
    ///
    /// # Safety
    /// `buf` is valid for `count` elements of `dt` on the communicator's device.
    unsafe fn p2p<B>(&self, f: Option<P2pFn<B>>, buf: B, n: usize, dt: DataType, peer: u32) -> i32 {
        match f {
            // SAFETY: the caller's contract; the communicator is live and the stream its own.
            Some(f) => unsafe { f(buf, n, data_type(dt), peer as i32, self.comm, self.stream) },
            None => ResultCode::INVALID_USAGE.0,
        }
    }
}

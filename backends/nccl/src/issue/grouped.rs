//! The operations made of grouped calls: all-to-all, gather and scatter as send/recv where the
//! library has no native call; the uneven all-to-all always; all_gather_v as one broadcast per
//! rank and reduce_scatter_v as one reduce per rank (as PyTorch does). Each runs in its own
//! group, closed even when a call inside fails.

use super::call_ctx::Ctx;
use super::first_failure::{each_rank, then};
use super::pointers::at;
use crate::absent::base_symbol;
use crate::codes::data_type;
use crate::ffi::{self, Bufs};
use oxccl_core::{CommOp, DataType, Result, ResultCode};

/// The grouped calls for `op` (an operation [`super::native::call`] had no call for).
///
/// # Safety
/// As [`super::native::call`].
pub(super) unsafe fn call(c: &Ctx<'_>, op: &CommOp<'_>) -> Result<i32> {
    let size = c.size;
    // SAFETY: for every block below, the caller's contract; parts are within the checked
    // lengths.
    Ok(unsafe {
        match *op {
            CommOp::AllToAll { send, recv, dtype } => {
                let per = send.len / size;
                let counts = |_| per;
                c.grouped(|| c.exchange_all(send.addr, recv.addr, counts, counts, dtype))
            }
            CommOp::AllToAllV {
                send,
                recv,
                dtype,
                send_counts,
                recv_counts,
            } => {
                let (sc, rc) = (|q: usize| send_counts[q], |q: usize| recv_counts[q]);
                c.grouped(|| c.exchange_all(send.addr, recv.addr, sc, rc, dtype))
            }
            // The root receives part q from each rank q (itself included); each sends its own.
            CommOp::Gather {
                send,
                recv,
                dtype,
                root,
            } => c.grouped(|| c.rooted(Ctx::recv, Ctx::send, recv.addr, send, dtype, root)),
            // The root sends part q to each rank q (itself included); each receives its own.
            CommOp::Scatter {
                send,
                recv,
                dtype,
                root,
            } => {
                let own = oxccl_core::RawBuf::new(recv.addr, recv.len);
                c.grouped(|| c.rooted(Ctx::send, Ctx::recv, send.addr, own, dtype, root))
            }
            CommOp::AllGatherV {
                send,
                recv,
                dtype,
                counts,
            } => {
                // Refused before the group opens, as every call in it would be.
                if c.api.broadcast.is_none() {
                    return Err(base_symbol("ncclBroadcast"));
                }
                c.grouped(|| {
                    c.each_part(recv.addr, counts, dtype, |q, n, part| {
                        let src = if q as u32 == c.rank { send.addr } else { part };
                        let b = Bufs {
                            send: src,
                            recv: part,
                            count: n,
                            dtype: data_type(dtype),
                        };
                        let r = ffi::broadcast(c.api, &b, q as i32, c.comm, c.stream);
                        r.unwrap_or(ResultCode::INVALID_USAGE.0)
                    })
                })
            }
            CommOp::ReduceScatterV {
                send,
                recv,
                dtype,
                counts,
                ..
            } => {
                // As for all_gather_v.
                if c.api.reduce.is_none() {
                    return Err(base_symbol("ncclReduce"));
                }
                c.grouped(|| {
                    c.each_part(send.addr, counts, dtype, |q, n, part| {
                        let dst = if q as u32 == c.rank { recv.addr } else { 0 };
                        let b = Bufs {
                            send: part,
                            recv: dst,
                            count: n,
                            dtype: data_type(dtype),
                        };
                        let r = ffi::reduce(c.api, &b, c.red, q as i32, c.comm, c.stream);
                        r.unwrap_or(ResultCode::INVALID_USAGE.0)
                    })
                })
            }
            // Native-only operations never come here.
            _ => ResultCode::INTERNAL_ERROR.0,
        }
    })
}

/// One point-to-point call: [`Ctx::send`] or [`Ctx::recv`].
type P2p<'c> = unsafe fn(&Ctx<'c>, usize, usize, DataType, u32) -> i32;

impl<'c> Ctx<'c> {
    /// Runs `body` between group start and end; the group is closed even when `body` fails.
    fn grouped(&self, body: impl FnOnce() -> i32) -> i32 {
        if self.api.group_start.is_none() || self.api.group_end.is_none() {
            return ResultCode::INVALID_USAGE.0;
        }
        let unusable = |_| ResultCode::INVALID_USAGE.0;
        let s = crate::ffi::group_start(self.api).unwrap_or_else(unusable);
        if s != 0 {
            return s;
        }
        let b = body();
        let e = crate::ffi::group_end(self.api).unwrap_or_else(unusable);
        if b != 0 {
            b
        } else {
            e
        }
    }

    /// Sends `send_count(q)` elements to each rank q and receives `recv_count(q)` from it,
    /// parts laid out by rank in `send` and `recv`.
    ///
    /// # Safety
    /// The parts lie within buffers valid for the counts' sums.
    unsafe fn exchange_all(
        &self,
        send: usize,
        recv: usize,
        send_count: impl Fn(usize) -> usize,
        recv_count: impl Fn(usize) -> usize,
        dt: DataType,
    ) -> i32 {
        let (mut so, mut ro) = (0usize, 0usize);
        each_rank(self.size, |q| {
            let (sn, rn) = (send_count(q), recv_count(q));
            let (s, r) = (at(send, so, dt), at(recv, ro, dt));
            (so, ro) = (so + sn, ro + rn);
            // SAFETY: the caller's contract.
            then(unsafe { self.send(s, sn, dt, q as u32) }, || unsafe {
                self.recv(r, rn, dt, q as u32)
            })
        })
    }

    /// Gather (`at_root` = recv, `at_rank` = send) or scatter (send, recv) of `own.len`
    /// elements per rank: the root moves part q of `parts` with each rank q, every rank moves
    /// `own` with the root.
    ///
    /// # Safety
    /// `parts` holds size × `own.len` elements on the root; `own` is valid.
    unsafe fn rooted(
        &self,
        at_root: P2p<'c>,
        at_rank: P2p<'c>,
        parts: usize,
        own: oxccl_core::RawBuf,
        dt: DataType,
        root: u32,
    ) -> i32 {
        let n = own.len;
        let parts = if self.rank == root {
            // SAFETY: the caller's contract.
            each_rank(self.size, |q| unsafe {
                at_root(self, at(parts, q * n, dt), n, dt, q as u32)
            })
        } else {
            0
        };
        // SAFETY: the caller's contract.
        then(parts, || unsafe { at_rank(self, own.addr, n, dt, root) })
    }

    /// Calls `f(q, count, address)` for each rank's part of `base`, laid out by rank with
    /// `counts[q]` elements each, stopping at the first failing code.
    fn each_part(
        &self,
        base: usize,
        counts: &[usize],
        dt: DataType,
        mut f: impl FnMut(usize, usize, usize) -> i32,
    ) -> i32 {
        let mut off = 0usize;
        each_rank(self.size, |q| {
            let (n, part) = (counts[q], at(base, off, dt));
            off += n;
            f(q, n, part)
        })
    }
}

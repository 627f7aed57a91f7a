//! Issuing one checked operation: the native NCCL call where the library has it, grouped
//! send/recv where it does not (all-to-all, gather and scatter before 2.28; the uneven
//! variants always; all_gather_v / reduce_scatter_v as grouped broadcasts / reduces, as
//! PyTorch does).

use crate::comm::NcclComm;
use crate::cuda::cuda_error;
use crate::reducer::NcclRedOp;
use crate::stream::NcclStream;
use oxccl_core::{check, CommOp, DataType, Feature, ReduceOp, Result, ResultCode};
use oxccl_loader::{Api, RawComm, RawStream};
use std::ffi::c_void;

type P = *const c_void;
type M = *mut c_void;

fn p(addr: usize) -> P {
    addr as P
}

fn m(addr: usize) -> M {
    addr as M
}

/// Byte offset of element `i` of `dt` (lengths were checked, so this cannot overflow).
fn at(addr: usize, i: usize, dt: DataType) -> usize {
    addr + i * dt.size()
}

/// `first` when it failed, else the code of `next` (NCCL calls chained until one fails).
fn then(first: i32, next: impl FnOnce() -> i32) -> i32 {
    if first != 0 {
        first
    } else {
        next()
    }
}

/// Calls `f` for each rank in order, stopping at the first failing code.
fn each_rank(size: usize, f: impl FnMut(usize) -> i32) -> i32 {
    (0..size).map(f).find(|&r| r != 0).unwrap_or(0)
}

struct Ctx<'a> {
    api: &'a Api,
    comm: RawComm,
    stream: RawStream,
}

impl Ctx<'_> {
    unsafe fn send(&self, addr: usize, count: usize, dt: DataType, peer: u32) -> i32 {
        match self.api.send {
            // SAFETY: the caller's contract: a valid buffer of `count` elements.
            Some(f) => unsafe {
                f(
                    p(addr),
                    count,
                    dt.code(),
                    peer as i32,
                    self.comm,
                    self.stream,
                )
            },
            None => ResultCode::INVALID_USAGE.0,
        }
    }

    unsafe fn recv(&self, addr: usize, count: usize, dt: DataType, peer: u32) -> i32 {
        match self.api.recv {
            // SAFETY: as above.
            Some(f) => unsafe {
                f(
                    m(addr),
                    count,
                    dt.code(),
                    peer as i32,
                    self.comm,
                    self.stream,
                )
            },
            None => ResultCode::INVALID_USAGE.0,
        }
    }

    /// Sends `n` elements at `send` to `peer`, then receives `m` at `recv` from it.
    unsafe fn exchange(
        &self,
        (send, n): (usize, usize),
        (recv, m): (usize, usize),
        dt: DataType,
        peer: u32,
    ) -> i32 {
        // SAFETY: the caller's contract: valid buffers of `n` and `m` elements.
        then(unsafe { self.send(send, n, dt, peer) }, || unsafe {
            self.recv(recv, m, dt, peer)
        })
    }

    /// Runs `body` between group start and end; the group is closed even when `body` fails.
    unsafe fn grouped(&self, body: impl FnOnce() -> i32) -> i32 {
        let (Some(start), Some(end)) = (self.api.group_start, self.api.group_end) else {
            return ResultCode::INVALID_USAGE.0;
        };
        // SAFETY: no arguments; groups nest per thread.
        let s = unsafe { start() };
        if s != 0 {
            return s;
        }
        let b = body();
        // SAFETY: closes the group opened above.
        let e = unsafe { end() };
        if b != 0 {
            b
        } else {
            e
        }
    }
}

/// Issues `op` on `stream` after `check::op`, waiting out a nonblocking init first. See
/// [`oxccl_core::Communicator::issue`] for the contract.
pub(crate) unsafe fn issue(comm: &NcclComm, op: &CommOp<'_>, stream: &NcclStream) -> Result<()> {
    check::op(op, &comm.check_ctx())?;
    comm.ready_for(op.kind().name())?;
    let lib = &comm.inner.lib;
    let api = lib.api();
    let c = Ctx {
        api,
        comm: comm.inner.raw,
        stream: stream.raw(),
    };
    let feats = &comm.inner.settings.features;
    let size = comm.inner.size as usize;
    let rank = comm.inner.rank;
    // Premul-sum ops live until the call returns, then are destroyed (allowed by NCCL).
    let red = match op.reduce_op() {
        Some(r) => Some(NcclRedOp::create(
            &comm.inner,
            r,
            op.dtype().unwrap_or(DataType::Float32),
        )?),
        None => None,
    };
    let red_code = red.as_ref().map_or(0, |r| r.code());
    // SAFETY (all calls below): buffers were validated by `check::op` against the lengths the
    // caller promised in `issue`'s contract; `c.comm` is live (ensure_ready above).
    let code = unsafe {
        match *op {
            CommOp::AllReduce {
                send, recv, dtype, ..
            } => match api.all_reduce {
                Some(f) => f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    dtype.code(),
                    red_code,
                    c.comm,
                    c.stream,
                ),
                None => return Err(crate::absent::base_symbol("ncclAllReduce")),
            },
            CommOp::Broadcast {
                send,
                recv,
                dtype,
                root,
            } => match api.broadcast {
                Some(f) => f(
                    p(send.addr),
                    m(recv.addr),
                    recv.len,
                    dtype.code(),
                    root as i32,
                    c.comm,
                    c.stream,
                ),
                None => return Err(crate::absent::base_symbol("ncclBroadcast")),
            },
            CommOp::Reduce {
                send,
                recv,
                dtype,
                root,
                ..
            } => match api.reduce {
                Some(f) => f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    dtype.code(),
                    red_code,
                    root as i32,
                    c.comm,
                    c.stream,
                ),
                None => return Err(crate::absent::base_symbol("ncclReduce")),
            },
            CommOp::AllGather { send, recv, dtype } => match api.all_gather {
                Some(f) => f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    dtype.code(),
                    c.comm,
                    c.stream,
                ),
                None => return Err(crate::absent::base_symbol("ncclAllGather")),
            },
            CommOp::ReduceScatter {
                send, recv, dtype, ..
            } => match api.reduce_scatter {
                Some(f) => f(
                    p(send.addr),
                    m(recv.addr),
                    recv.len,
                    dtype.code(),
                    red_code,
                    c.comm,
                    c.stream,
                ),
                None => return Err(crate::absent::base_symbol("ncclReduceScatter")),
            },
            CommOp::AllToAll { send, recv, dtype } => {
                let per = send.len / size;
                match api.alltoall.filter(|_| feats.has(Feature::AllToAll)) {
                    Some(f) => f(
                        p(send.addr),
                        m(recv.addr),
                        per,
                        dtype.code(),
                        c.comm,
                        c.stream,
                    ),
                    None => c.grouped(|| {
                        each_rank(size, |q| {
                            let part = |addr| (at(addr, q * per, dtype), per);
                            c.exchange(part(send.addr), part(recv.addr), dtype, q as u32)
                        })
                    }),
                }
            }
            CommOp::AllToAllV {
                send,
                recv,
                dtype,
                send_counts,
                recv_counts,
            } => c.grouped(|| {
                let (mut so, mut ro) = (0usize, 0usize);
                each_rank(size, |q| {
                    let (sn, rn) = (send_counts[q], recv_counts[q]);
                    let s = (at(send.addr, so, dtype), sn);
                    let r = (at(recv.addr, ro, dtype), rn);
                    (so, ro) = (so + sn, ro + rn);
                    c.exchange(s, r, dtype, q as u32)
                })
            }),
            CommOp::Gather {
                send,
                recv,
                dtype,
                root,
            } => match api.gather.filter(|_| feats.has(Feature::GatherScatter)) {
                Some(f) => f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    dtype.code(),
                    root as i32,
                    c.comm,
                    c.stream,
                ),
                None => c.grouped(|| {
                    // The root receives part q from each rank q (itself included).
                    let n = send.len;
                    let parts = if rank == root {
                        each_rank(size, |q| {
                            c.recv(at(recv.addr, q * n, dtype), n, dtype, q as u32)
                        })
                    } else {
                        0
                    };
                    then(parts, || c.send(send.addr, n, dtype, root))
                }),
            },
            CommOp::Scatter {
                send,
                recv,
                dtype,
                root,
            } => match api.scatter.filter(|_| feats.has(Feature::GatherScatter)) {
                Some(f) => f(
                    p(send.addr),
                    m(recv.addr),
                    recv.len,
                    dtype.code(),
                    root as i32,
                    c.comm,
                    c.stream,
                ),
                None => c.grouped(|| {
                    // The root sends part q to each rank q (itself included).
                    let n = recv.len;
                    let parts = if rank == root {
                        each_rank(size, |q| {
                            c.send(at(send.addr, q * n, dtype), n, dtype, q as u32)
                        })
                    } else {
                        0
                    };
                    then(parts, || c.recv(recv.addr, n, dtype, root))
                }),
            },
            CommOp::AllGatherV {
                send,
                recv,
                dtype,
                counts,
            } => {
                let Some(bcast) = api.broadcast else {
                    return Err(crate::absent::base_symbol("ncclBroadcast"));
                };
                c.grouped(|| {
                    let mut off = 0usize;
                    each_rank(size, |q| {
                        let (n, part) = (counts[q], at(recv.addr, off, dtype));
                        off += n;
                        let src = if q as u32 == rank { send.addr } else { part };
                        bcast(p(src), m(part), n, dtype.code(), q as i32, c.comm, c.stream)
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
                let Some(reduce) = api.reduce else {
                    return Err(crate::absent::base_symbol("ncclReduce"));
                };
                c.grouped(|| {
                    let mut off = 0usize;
                    each_rank(size, |q| {
                        let (n, part) = (counts[q], at(send.addr, off, dtype));
                        off += n;
                        let dst = if q as u32 == rank { recv.addr } else { 0 };
                        let (code, root) = (dtype.code(), q as i32);
                        reduce(p(part), m(dst), n, code, red_code, root, c.comm, c.stream)
                    })
                })
            }
            CommOp::Send { buf, dtype, peer } => c.send(buf.addr, buf.len, dtype, peer),
            CommOp::Recv { buf, dtype, peer } => c.recv(buf.addr, buf.len, dtype, peer),
            CommOp::Barrier => {
                let scratch = barrier_scratch(comm, stream)?;
                match api.all_reduce {
                    Some(f) => f(
                        p(scratch),
                        m(scratch),
                        1,
                        DataType::Float32.code(),
                        ReduceOp::Sum.builtin_code().unwrap_or(0),
                        c.comm,
                        c.stream,
                    ),
                    None => return Err(crate::absent::base_symbol("ncclAllReduce")),
                }
            }
        }
    };
    drop(red);
    comm.finish(code, op.kind().name())
}

/// The one-element device buffer a barrier all-reduces, made on first use.
fn barrier_scratch(comm: &NcclComm, stream: &NcclStream) -> Result<usize> {
    if let Some(s) = comm.inner.scratch.get() {
        return Ok(slice_addr(s, stream));
    }
    let s = stream
        .cuda()
        .alloc_zeros::<f32>(1)
        .map_err(|e| cuda_error("allocating barrier scratch", e))?;
    let _ = comm.inner.scratch.set(s);
    comm.inner
        .scratch
        .get()
        .map(|s| slice_addr(s, stream))
        .ok_or_else(|| crate::absent::base_symbol("scratch"))
}

fn slice_addr(s: &cudarc::driver::CudaSlice<f32>, stream: &NcclStream) -> usize {
    use cudarc::driver::DevicePtr;
    let (ptr, _sync) = s.device_ptr(stream.cuda());
    ptr as usize
}

//! The `raw` layer's calls: an operation through NCCL's function pointers, as nccl-tests
//! makes it (no check, no wrapper), and the waiting out of a nonblocking communicator.

use oxccl::loader::{RawComm, RawStream};
use oxccl::{CommOp, Error, Result};

/// Waits until a nonblocking communicator has no call in progress (ncclCommGetAsyncError stops
/// saying ncclInProgress), so the issued work is on the stream; a minute at most.
pub fn settle(api: &oxccl::loader::Api, c: RawComm) -> Result<()> {
    let f = api.comm_get_async_error.ok_or_else(|| {
        Error::invalid(
            "blocking",
            format_args!("ncclCommGetAsyncError in the loaded library for -z 0"),
        )
    })?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mut state = 0;
        // SAFETY: a live communicator and a live out-pointer.
        call(Some(unsafe { f(c, &mut state) }))?;
        match state {
            0 => return Ok(()),
            7 if std::time::Instant::now() < deadline => std::thread::yield_now(),
            code => {
                return Err(Error::invalid(
                    "blocking",
                    format_args!("a nonblocking call to settle within a minute, got state {code}"),
                ))
            }
        }
    }
}

/// A raw call's result: ncclSuccess, or ncclInProgress (7) on a nonblocking communicator (-z 0),
/// which [`settle`] then waits out.
pub fn call(r: Option<i32>) -> Result<()> {
    match r {
        Some(0 | 7) => Ok(()),
        Some(code) => Err(Error::invalid(
            "nccl",
            format_args!("ncclSuccess, got code {code}"),
        )),
        None => Err(Error::invalid(
            "nccl",
            format_args!("the function in the loaded library"),
        )),
    }
}

/// `op` through NCCL's function pointers; all-to-all, gather and scatter as grouped send/recv
/// when the library lacks the native call (before 2.28).
///
/// # Safety
/// The buffers of `op` are live device memory of the communicator's device.
pub unsafe fn raw_issue(
    api: &oxccl::loader::Api,
    c: RawComm,
    s: RawStream,
    op: &CommOp,
    n: u32,
) -> Result<()> {
    use std::ffi::c_void;
    let dt = |d: oxccl::DataType| d as i32;
    // nccl.h's ncclRedOp_t values; the perf tool runs no premul-sum.
    let ro = |o: &oxccl::ReduceOp| match o {
        oxccl::ReduceOp::Sum => 0,
        oxccl::ReduceOp::Prod => 1,
        oxccl::ReduceOp::Max => 2,
        oxccl::ReduceOp::Min => 3,
        _ => 4,
    };
    // SAFETY (for every call below): forwarded contract; pointers and counts come from `op`.
    unsafe {
        match op {
            CommOp::AllReduce {
                send,
                recv,
                dtype,
                op,
            } => call(api.all_reduce.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    recv.len,
                    dt(*dtype),
                    ro(op),
                    c,
                    s,
                )
            })),
            CommOp::Broadcast {
                send,
                recv,
                dtype,
                root,
            } => call(api.broadcast.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    recv.len,
                    dt(*dtype),
                    *root as i32,
                    c,
                    s,
                )
            })),
            CommOp::Reduce {
                send,
                recv,
                dtype,
                op,
                root,
            } => call(api.reduce.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    send.len,
                    dt(*dtype),
                    ro(op),
                    *root as i32,
                    c,
                    s,
                )
            })),
            CommOp::AllGather { send, recv, dtype } => call(api.all_gather.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    send.len,
                    dt(*dtype),
                    c,
                    s,
                )
            })),
            CommOp::ReduceScatter {
                send,
                recv,
                dtype,
                op,
            } => call(api.reduce_scatter.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    recv.len,
                    dt(*dtype),
                    ro(op),
                    c,
                    s,
                )
            })),
            CommOp::Send { buf, dtype, peer } => call(api.send.map(|f| {
                f(
                    buf.addr as *const c_void,
                    buf.len,
                    dt(*dtype),
                    *peer as i32,
                    c,
                    s,
                )
            })),
            CommOp::Recv { buf, dtype, peer } => call(api.recv.map(|f| {
                f(
                    buf.addr as *mut c_void,
                    buf.len,
                    dt(*dtype),
                    *peer as i32,
                    c,
                    s,
                )
            })),
            CommOp::AllToAll { send, recv, dtype } => {
                let part = recv.len / n as usize;
                if let Some(f) = api.alltoall {
                    return call(Some(f(
                        send.addr as *const c_void,
                        recv.addr as *mut c_void,
                        part,
                        dt(*dtype),
                        c,
                        s,
                    )));
                }
                let es = dtype.size();
                call(api.group_start.map(|f| f()))?;
                for p in 0..n as usize {
                    call(api.send.map(|f| {
                        f(
                            (send.addr + p * part * es) as *const c_void,
                            part,
                            dt(*dtype),
                            p as i32,
                            c,
                            s,
                        )
                    }))?;
                    call(api.recv.map(|f| {
                        f(
                            (recv.addr + p * part * es) as *mut c_void,
                            part,
                            dt(*dtype),
                            p as i32,
                            c,
                            s,
                        )
                    }))?;
                }
                call(api.group_end.map(|f| f()))
            }
            CommOp::Gather {
                send,
                recv,
                dtype,
                root,
            } => {
                if let Some(f) = api.gather {
                    return call(Some(f(
                        send.addr as *const c_void,
                        recv.addr as *mut c_void,
                        send.len,
                        dt(*dtype),
                        *root as i32,
                        c,
                        s,
                    )));
                }
                Err(Error::invalid("gather", format_args!("ncclGather (NCCL 2.28+) for the raw layer; the comm and pg layers group send/recv")))
            }
            CommOp::Scatter {
                send,
                recv,
                dtype,
                root,
            } => {
                if let Some(f) = api.scatter {
                    return call(Some(f(
                        send.addr as *const c_void,
                        recv.addr as *mut c_void,
                        recv.len,
                        dt(*dtype),
                        *root as i32,
                        c,
                        s,
                    )));
                }
                Err(Error::invalid("scatter", format_args!("ncclScatter (NCCL 2.28+) for the raw layer; the comm and pg layers group send/recv")))
            }
            _ => Err(Error::invalid(
                "op",
                format_args!("a collective the perf tool runs"),
            )),
        }
    }
}

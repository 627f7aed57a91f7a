//! The `raw` layer's calls: an operation through NCCL's function pointers, as nccl-tests
//! makes it (no check, no wrapper), and the waiting out of a nonblocking communicator.

use oxccl::loader::{RawComm, RawStream};
use oxccl::{CommOp, Error, FeatureSet, Result};

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

/// The `ncclDataType_t` and `ncclRedOp_t` [`raw_issue`] calls NCCL with for `op` on a library
/// with `features`: the backend's own mapping ([`oxccl::nccl::codes`]), so the raw layer calls
/// NCCL as `Comm` and the process group do; the operator is 0 for an operation that does not
/// reduce. Premul-sum (the tool runs none) and operations without an element type are refused.
pub fn raw_codes(op: &CommOp, features: &FeatureSet) -> Result<(i32, i32)> {
    let c = oxccl::nccl::codes::op_codes(op, features)?;
    let dt = c
        .dtype
        .ok_or_else(|| Error::invalid("op", format_args!("a collective the perf tool runs")))?;
    Ok((dt, c.red_op.unwrap_or(0)))
}

/// `op` through NCCL's function pointers; all-to-all, gather and scatter as grouped send/recv
/// when the library lacks the native call (before 2.28). Its element type is the one the
/// library takes ([`oxccl::nccl::codes::wire`]), as for the backend's calls.
///
/// # Safety
/// The buffers of `op` are live device memory of the communicator's device.
pub unsafe fn raw_issue(
    api: &oxccl::loader::Api,
    features: &FeatureSet,
    c: RawComm,
    s: RawStream,
    op: &CommOp,
    n: u32,
) -> Result<()> {
    use std::ffi::c_void;
    let (dt, red) = raw_codes(op, features)?;
    let op = &oxccl::nccl::codes::wire(op, features);
    // SAFETY: forwarded contract, for every call below; pointers and counts come from `op`.
    unsafe {
        match op {
            CommOp::AllReduce { send, recv, .. } => call(api.all_reduce.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    recv.len,
                    dt,
                    red,
                    c,
                    s,
                )
            })),
            CommOp::Broadcast {
                send, recv, root, ..
            } => call(api.broadcast.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    recv.len,
                    dt,
                    *root as i32,
                    c,
                    s,
                )
            })),
            CommOp::Reduce {
                send, recv, root, ..
            } => call(api.reduce.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    send.len,
                    dt,
                    red,
                    *root as i32,
                    c,
                    s,
                )
            })),
            CommOp::AllGather { send, recv, .. } => call(api.all_gather.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    send.len,
                    dt,
                    c,
                    s,
                )
            })),
            CommOp::ReduceScatter { send, recv, .. } => call(api.reduce_scatter.map(|f| {
                f(
                    send.addr as *const c_void,
                    recv.addr as *mut c_void,
                    recv.len,
                    dt,
                    red,
                    c,
                    s,
                )
            })),
            CommOp::Send { buf, peer, .. } => call(
                api.send
                    .map(|f| f(buf.addr as *const c_void, buf.len, dt, *peer as i32, c, s)),
            ),
            CommOp::Recv { buf, peer, .. } => call(
                api.recv
                    .map(|f| f(buf.addr as *mut c_void, buf.len, dt, *peer as i32, c, s)),
            ),
            CommOp::AllToAll { send, recv, dtype } => {
                let part = recv.len / n as usize;
                if let Some(f) = api.alltoall {
                    return call(Some(f(
                        send.addr as *const c_void,
                        recv.addr as *mut c_void,
                        part,
                        dt,
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
                            dt,
                            p as i32,
                            c,
                            s,
                        )
                    }))?;
                    call(api.recv.map(|f| {
                        f(
                            (recv.addr + p * part * es) as *mut c_void,
                            part,
                            dt,
                            p as i32,
                            c,
                            s,
                        )
                    }))?;
                }
                call(api.group_end.map(|f| f()))
            }
            CommOp::Gather {
                send, recv, root, ..
            } => {
                if let Some(f) = api.gather {
                    return call(Some(f(
                        send.addr as *const c_void,
                        recv.addr as *mut c_void,
                        send.len,
                        dt,
                        *root as i32,
                        c,
                        s,
                    )));
                }
                Err(Error::invalid("gather", format_args!("ncclGather (NCCL 2.28+) for the raw layer; the comm and pg layers group send/recv")))
            }
            CommOp::Scatter {
                send, recv, root, ..
            } => {
                if let Some(f) = api.scatter {
                    return call(Some(f(
                        send.addr as *const c_void,
                        recv.addr as *mut c_void,
                        recv.len,
                        dt,
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

#[cfg(test)]
mod tests {
    use super::raw_codes;
    use oxccl::nccl::codes::op_codes;
    use oxccl::{CommOp, DataType, FeatureSet, RawBuf, RawBufMut, ReduceOp, Version};

    /// Every kind of operation [`super::raw_issue`] calls NCCL for, with `dtype` and `op`.
    fn issued(dtype: DataType, op: ReduceOp) -> Vec<CommOp<'static>> {
        let send = RawBuf {
            addr: 0x1000,
            len: 8,
        };
        let recv = RawBufMut {
            addr: 0x2000,
            len: 8,
        };
        vec![
            CommOp::AllReduce {
                send,
                recv,
                dtype,
                op,
            },
            CommOp::Broadcast {
                send,
                recv,
                dtype,
                root: 0,
            },
            CommOp::Reduce {
                send,
                recv,
                dtype,
                op,
                root: 0,
            },
            CommOp::AllGather { send, recv, dtype },
            CommOp::ReduceScatter {
                send,
                recv,
                dtype,
                op,
            },
            CommOp::Send {
                buf: send,
                dtype,
                peer: 1,
            },
            CommOp::Recv {
                buf: recv,
                dtype,
                peer: 1,
            },
            CommOp::AllToAll { send, recv, dtype },
            CommOp::Gather {
                send,
                recv,
                dtype,
                root: 0,
            },
            CommOp::Scatter {
                send,
                recv,
                dtype,
                root: 0,
            },
        ]
    }

    /// The raw layer calls NCCL with the backend's values for every kind, type and built-in
    /// operator, on a library without fp8 (moved fp8 as ncclUint8) and on one with it; and
    /// those are nccl.h's for the operators (the drift this replaced: its own `_ => 4`).
    #[test]
    fn raw_codes_are_the_backends() {
        let nccl_h_op = [
            (ReduceOp::Sum, 0),
            (ReduceOp::Prod, 1),
            (ReduceOp::Max, 2),
            (ReduceOp::Min, 3),
            (ReduceOp::Avg, 4),
        ];
        assert_eq!(nccl_h_op.len(), ReduceOp::BUILTIN.len());
        for v in [Version::new(2, 18, 1), Version::new(2, 28, 9)] {
            let features = FeatureSet::for_version(v);
            for dtype in DataType::ALL {
                for (op, code) in nccl_h_op {
                    for o in issued(dtype, op) {
                        let (dt, red) = raw_codes(&o, &features).unwrap();
                        let backend = op_codes(&o, &features).unwrap();
                        assert_eq!(Some(dt), backend.dtype, "{o:?} on {v}");
                        assert_eq!(red, backend.red_op.unwrap_or(0), "{o:?} on {v}");
                        if o.reduce_op().is_some() {
                            assert_eq!(red, code, "{o:?}");
                        }
                    }
                }
            }
        }
    }
}

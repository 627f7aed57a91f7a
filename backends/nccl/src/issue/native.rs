//! The operations NCCL has one call for: the five classic collectives, send and recv, the
//! barrier (a one-element all-reduce), and all-to-all, gather and scatter where the library
//! has them (2.28+, unless hidden).

use super::call_ctx::Ctx;
use super::shape::{shape, Coll};
use crate::codes::data_type;
use crate::ffi::{self, Bufs};
use oxccl_core::{CommOp, DataType, Feature, ReduceOp, Result};

/// The native call for `op`: `Some(code)`, or `None` when it has none here and the grouped
/// fallback runs instead. A base symbol the library lacks is an error.
///
/// # Safety
/// `op` passed `check::op` and its buffers hold what `Communicator::issue`'s contract says;
/// `scratch` is one f32 of the communicator's device (read only for a barrier).
pub(super) unsafe fn call(c: &Ctx<'_>, op: &CommOp<'_>, scratch: usize) -> Result<Option<i32>> {
    let api = c.api;
    let (comm, stream, red) = (c.comm, c.stream, c.red);
    if let Some(a) = shape(op, c.size) {
        // The newer collectives fall back to grouped calls where the library lacks them or
        // they are hidden.
        let native = match a.coll {
            Coll::AllToAll => api.alltoall.is_some() && c.feats.has(Feature::AllToAll),
            Coll::Gather => api.gather.is_some() && c.feats.has(Feature::GatherScatter),
            Coll::Scatter => api.scatter.is_some() && c.feats.has(Feature::GatherScatter),
            _ => true,
        };
        if !native {
            return Ok(None);
        }
        let (b, root) = (&a.bufs, a.root);
        // SAFETY: for every call below, the caller's contract (buffers, counts within the
        // checked lengths, roots checked against the size); the communicator is live and the
        // stream its own; `red` is the reduction.
        let code = unsafe {
            match a.coll {
                Coll::AllReduce => ffi::all_reduce(api, b, red, comm, stream),
                Coll::Broadcast => ffi::broadcast(api, b, root, comm, stream),
                Coll::Reduce => ffi::reduce(api, b, red, root, comm, stream),
                Coll::AllGather => ffi::all_gather(api, b, comm, stream),
                Coll::ReduceScatter => ffi::reduce_scatter(api, b, red, comm, stream),
                Coll::AllToAll => ffi::all_to_all(api, b, comm, stream),
                Coll::Gather => ffi::gather(api, b, root, comm, stream),
                Coll::Scatter => ffi::scatter(api, b, root, comm, stream),
            }
        };
        return code.map(Some);
    }
    // SAFETY: as above; the barrier's buffer is `scratch`, one f32 (the caller's contract).
    let code = unsafe {
        match *op {
            CommOp::Send { buf, dtype, peer } => c.send(buf.addr, buf.len, dtype, peer),
            CommOp::Recv { buf, dtype, peer } => c.recv(buf.addr, buf.len, dtype, peer),
            CommOp::Barrier => {
                let b = Bufs {
                    send: scratch,
                    recv: scratch,
                    count: 1,
                    dtype: data_type(DataType::Float32),
                };
                let sum = ReduceOp::Sum.builtin_code().unwrap_or(0);
                ffi::all_reduce(api, &b, sum, comm, stream)?
            }
            _ => return Ok(None),
        }
    };
    Ok(Some(code))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::{Error, FeatureSet, RawBuf, RawBufMut, ResultCode, Version};
    use oxccl_loader::{Api, RawComm, RawStream};

    /// A context over a table without any function, so that no call reaches NCCL.
    fn ctx<'a>(api: &'a Api, feats: &'a FeatureSet) -> Ctx<'a> {
        Ctx {
            api,
            comm: RawComm::NULL,
            stream: RawStream::NULL,
            rank: 0,
            size: 2,
            feats,
            red: 0,
        }
    }

    #[test]
    fn an_absent_function_is_an_error_a_fallback_or_a_code() {
        let (api, feats) = (
            Api::default(),
            FeatureSet::for_version(Version::new(2, 28, 3)),
        );
        let c = ctx(&api, &feats);
        let (s, r) = (RawBuf::new(0x100, 8), RawBufMut::new(0x200, 8));
        let dtype = DataType::Float32;
        let reduce = ReduceOp::Sum;
        let base_missing = |op: CommOp<'_>, symbol: &str| {
            // SAFETY: the table is empty, so nothing is called.
            match unsafe { call(&c, &op, 0) } {
                Err(e @ Error::Backend { code, .. }) => {
                    assert_eq!(code, ResultCode::INTERNAL_ERROR);
                    assert!(e.to_string().contains(symbol), "{e}");
                }
                other => panic!("{symbol}: {other:?}"),
            }
        };
        let all_reduce = CommOp::AllReduce {
            send: s,
            recv: r,
            dtype,
            op: reduce,
        };
        base_missing(all_reduce, "ncclAllReduce");
        base_missing(CommOp::Barrier, "ncclAllReduce");
        let bcast = CommOp::Broadcast {
            send: s,
            recv: r,
            dtype,
            root: 1,
        };
        base_missing(bcast, "ncclBroadcast");
        // The newer collectives fall back to grouped calls; send and recv read as a code.
        let fallback = CommOp::AllToAll {
            send: s,
            recv: r,
            dtype,
        };
        // SAFETY: as above.
        assert!(matches!(unsafe { call(&c, &fallback, 0) }, Ok(None)));
        let send = CommOp::Send {
            buf: s,
            dtype,
            peer: 1,
        };
        let unusable = Some(ResultCode::INVALID_USAGE.0);
        // SAFETY: as above.
        assert_eq!(unsafe { call(&c, &send, 0) }.ok(), Some(unusable));
    }
}

//! Collectives and point-to-point calls: the classic five, all-to-all, gather and scatter,
//! their per-call configured forms (`nccl…Config`), send and recv. Each is enqueued on
//! `stream` and returns NCCL's code.
//!
//! Every wrapper is an `unsafe fn` with one contract, named in each as "the collective
//! contract": `comm` is a live communicator and `stream` a live stream of its device; the
//! buffers are device memory of that device, the send buffer holding and the receive buffer
//! having room for what this call reads and writes on this rank for `count` elements of
//! `dtype` (NCCL's rules per collective and root), both valid until the stream passes the
//! call; a `root` or `peer` is a rank of `comm`; a reduction is one NCCL defines or one
//! created on `comm` and not yet destroyed.

use super::symbol::{base, gated, Code};
use oxccl_core::{Feature, Result};
use oxccl_loader::coll_config::CollConfigBuf;
use oxccl_loader::{Api, RawComm, RawStream};
use std::ffi::c_void;

/// One collective's buffers: `count` elements of `dtype` (an `ncclDataType_t`) read from
/// `send` and written to `recv`, device addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bufs {
    /// The data read.
    pub send: usize,
    /// Where the result lands.
    pub recv: usize,
    /// How many elements, as the collective counts them.
    pub count: usize,
    /// Their `ncclDataType_t`.
    pub dtype: i32,
}

impl Bufs {
    /// The send buffer as NCCL takes it.
    fn s(&self) -> *const c_void {
        self.send as *const c_void
    }

    /// The receive buffer as NCCL takes it.
    fn r(&self) -> *mut c_void {
        self.recv as *mut c_void
    }
}

/// `ncclAllReduce` of `b` with reduction `red`.
///
/// # Safety
/// The collective contract (module documentation).
pub(crate) unsafe fn all_reduce(
    api: &Api,
    b: &Bufs,
    red: i32,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = base(api.all_reduce, "ncclAllReduce")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, red, comm, stream) })
}

/// `ncclBroadcast` of `b` from `root`.
///
/// # Safety
/// The collective contract (module documentation).
pub(crate) unsafe fn broadcast(
    api: &Api,
    b: &Bufs,
    root: i32,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = base(api.broadcast, "ncclBroadcast")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, root, comm, stream) })
}

/// `ncclReduce` of `b` with reduction `red` onto `root`.
///
/// # Safety
/// The collective contract (module documentation).
pub(crate) unsafe fn reduce(
    api: &Api,
    b: &Bufs,
    red: i32,
    root: i32,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = base(api.reduce, "ncclReduce")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, red, root, comm, stream) })
}

/// `ncclAllGather` of `b` (`count` per rank).
///
/// # Safety
/// The collective contract (module documentation).
pub(crate) unsafe fn all_gather(
    api: &Api,
    b: &Bufs,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = base(api.all_gather, "ncclAllGather")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, comm, stream) })
}

/// `ncclReduceScatter` of `b` (`count` per rank) with reduction `red`.
///
/// # Safety
/// The collective contract (module documentation).
pub(crate) unsafe fn reduce_scatter(
    api: &Api,
    b: &Bufs,
    red: i32,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = base(api.reduce_scatter, "ncclReduceScatter")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, red, comm, stream) })
}

/// `ncclAlltoAll` of `b` (`count` per peer).
///
/// # Safety
/// The collective contract (module documentation).
pub(crate) unsafe fn all_to_all(
    api: &Api,
    b: &Bufs,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = gated(api.alltoall, Feature::AllToAll, "ncclAlltoAll")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, comm, stream) })
}

/// `ncclGather` of `b` (`count` per rank) onto `root`.
///
/// # Safety
/// The collective contract (module documentation).
pub(crate) unsafe fn gather(
    api: &Api,
    b: &Bufs,
    root: i32,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = gated(api.gather, Feature::GatherScatter, "ncclGather")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, root, comm, stream) })
}

/// `ncclScatter` of `b` (`count` per rank) from `root`.
///
/// # Safety
/// The collective contract (module documentation).
pub(crate) unsafe fn scatter(
    api: &Api,
    b: &Bufs,
    root: i32,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = gated(api.scatter, Feature::GatherScatter, "ncclScatter")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, root, comm, stream) })
}

/// `ncclSend` of `count` elements of `dtype` at `send` to `peer`.
///
/// # Safety
/// The collective contract (module documentation), for `send` alone.
pub(crate) unsafe fn send(
    api: &Api,
    send: usize,
    count: usize,
    dtype: i32,
    peer: i32,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = base(api.send, "ncclSend")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(send as *const c_void, count, dtype, peer, comm, stream) })
}

/// `ncclRecv` of `count` elements of `dtype` into `recv` from `peer`.
///
/// # Safety
/// The collective contract (module documentation), for `recv` alone.
pub(crate) unsafe fn recv(
    api: &Api,
    recv: usize,
    count: usize,
    dtype: i32,
    peer: i32,
    comm: RawComm,
    stream: RawStream,
) -> Result<Code> {
    let f = base(api.recv, "ncclRecv")?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(recv as *mut c_void, count, dtype, peer, comm, stream) })
}

/// `ncclAllReduceConfig`: [`all_reduce`] with `cfg` for this call.
///
/// # Safety
/// The collective contract (module documentation); `cfg` was built for the loaded release.
pub(crate) unsafe fn all_reduce_config(
    api: &Api,
    b: &Bufs,
    red: i32,
    comm: RawComm,
    stream: RawStream,
    cfg: &CollConfigBuf,
) -> Result<Code> {
    let f = gated(
        api.all_reduce_config,
        Feature::CollConfig,
        "ncclAllReduceConfig",
    )?;
    let c = cfg.as_ptr();
    // SAFETY: this function's contract; `c` is borrowed for the call.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, red, comm, stream, c) })
}

/// `ncclBroadcastConfig`: [`broadcast`] with `cfg` for this call.
///
/// # Safety
/// As [`all_reduce_config`].
pub(crate) unsafe fn broadcast_config(
    api: &Api,
    b: &Bufs,
    root: i32,
    comm: RawComm,
    stream: RawStream,
    cfg: &CollConfigBuf,
) -> Result<Code> {
    let f = gated(
        api.broadcast_config,
        Feature::CollConfig,
        "ncclBroadcastConfig",
    )?;
    let c = cfg.as_ptr();
    // SAFETY: this function's contract; `c` is borrowed for the call.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, root, comm, stream, c) })
}

/// `ncclReduceConfig`: [`reduce`] with `cfg` for this call.
///
/// # Safety
/// As [`all_reduce_config`].
pub(crate) unsafe fn reduce_config(
    api: &Api,
    b: &Bufs,
    red: i32,
    root: i32,
    comm: RawComm,
    stream: RawStream,
    cfg: &CollConfigBuf,
) -> Result<Code> {
    let f = gated(api.reduce_config, Feature::CollConfig, "ncclReduceConfig")?;
    let c = cfg.as_ptr();
    // SAFETY: this function's contract; `c` is borrowed for the call.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, red, root, comm, stream, c) })
}

/// `ncclAllGatherConfig`: [`all_gather`] with `cfg` for this call.
///
/// # Safety
/// As [`all_reduce_config`].
pub(crate) unsafe fn all_gather_config(
    api: &Api,
    b: &Bufs,
    comm: RawComm,
    stream: RawStream,
    cfg: &CollConfigBuf,
) -> Result<Code> {
    let f = gated(
        api.all_gather_config,
        Feature::CollConfig,
        "ncclAllGatherConfig",
    )?;
    let c = cfg.as_ptr();
    // SAFETY: this function's contract; `c` is borrowed for the call.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, comm, stream, c) })
}

/// `ncclReduceScatterConfig`: [`reduce_scatter`] with `cfg` for this call.
///
/// # Safety
/// As [`all_reduce_config`].
pub(crate) unsafe fn reduce_scatter_config(
    api: &Api,
    b: &Bufs,
    red: i32,
    comm: RawComm,
    stream: RawStream,
    cfg: &CollConfigBuf,
) -> Result<Code> {
    let f = gated(
        api.reduce_scatter_config,
        Feature::CollConfig,
        "ncclReduceScatterConfig",
    )?;
    let c = cfg.as_ptr();
    // SAFETY: this function's contract; `c` is borrowed for the call.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, red, comm, stream, c) })
}

/// `ncclAlltoAllConfig`: [`all_to_all`] with `cfg` for this call.
///
/// # Safety
/// As [`all_reduce_config`].
pub(crate) unsafe fn all_to_all_config(
    api: &Api,
    b: &Bufs,
    comm: RawComm,
    stream: RawStream,
    cfg: &CollConfigBuf,
) -> Result<Code> {
    let f = gated(
        api.alltoall_config,
        Feature::CollConfig,
        "ncclAlltoAllConfig",
    )?;
    let c = cfg.as_ptr();
    // SAFETY: this function's contract; `c` is borrowed for the call.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, comm, stream, c) })
}

/// `ncclGatherConfig`: [`gather`] with `cfg` for this call.
///
/// # Safety
/// As [`all_reduce_config`].
pub(crate) unsafe fn gather_config(
    api: &Api,
    b: &Bufs,
    root: i32,
    comm: RawComm,
    stream: RawStream,
    cfg: &CollConfigBuf,
) -> Result<Code> {
    let f = gated(api.gather_config, Feature::CollConfig, "ncclGatherConfig")?;
    let c = cfg.as_ptr();
    // SAFETY: this function's contract; `c` is borrowed for the call.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, root, comm, stream, c) })
}

/// `ncclScatterConfig`: [`scatter`] with `cfg` for this call.
///
/// # Safety
/// As [`all_reduce_config`].
pub(crate) unsafe fn scatter_config(
    api: &Api,
    b: &Bufs,
    root: i32,
    comm: RawComm,
    stream: RawStream,
    cfg: &CollConfigBuf,
) -> Result<Code> {
    let f = gated(api.scatter_config, Feature::CollConfig, "ncclScatterConfig")?;
    let c = cfg.as_ptr();
    // SAFETY: this function's contract; `c` is borrowed for the call.
    Ok(unsafe { f(b.s(), b.r(), b.count, b.dtype, root, comm, stream, c) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::coll_config::CollConfig;
    use oxccl_core::{Error, Missing, Version};

    #[test]
    fn an_absent_configured_call_is_the_per_call_feature_unsupported() {
        let api = Api::default();
        let b = Bufs {
            send: 0x100,
            recv: 0x200,
            count: 4,
            dtype: 7,
        };
        let cfg = CollConfigBuf::new(&CollConfig::default(), Version::new(2, 31, 2)).unwrap();
        let (comm, stream) = (RawComm::NULL, RawStream::NULL);
        // SAFETY: the table is empty, so nothing is called.
        let e = unsafe { all_reduce_config(&api, &b, 0, comm, stream, &cfg) }.unwrap_err();
        let Error::Unsupported { feature, missing } = e else {
            panic!("{e:?}");
        };
        assert_eq!(feature, Feature::CollConfig);
        let symbol = "ncclAllReduceConfig";
        assert_eq!(missing, Missing::SymbolAbsent { symbol });
        // SAFETY: as above.
        let e = unsafe { send(&api, 0x100, 4, 7, 1, comm, stream) }.unwrap_err();
        assert!(e.to_string().contains("ncclSend"), "{e}");
    }
}

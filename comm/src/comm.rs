//! The safe communicator: typed cudarc buffers in, checked NCCL calls out.

use crate::buffer::same_device;
use crate::element::{host_op, Element};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use oxccl_core::coll_config::CollConfig;
use oxccl_core::{
    Backend, CommAbort, CommConfig, CommOp, CommState, Communicator, Device, Error, Progress,
    RawBuf, RawBufMut, ReduceOp, RegHandle, Result, Scalar, UniqueId,
};
use oxccl_core::{PeerKernels, PerCallConfig};
use oxccl_nccl::{NcclAbort, NcclBackend, NcclComm, NcclStream};
use std::sync::Arc;

/// A safe NCCL communicator bound to one CUDA stream. Operations take `&mut self` because NCCL
/// forbids concurrent calls on one communicator; [`Comm::abort_handle`] gives a handle that
/// stops it from any other thread. Through `oxccl`, it is `oxccl::Comm` (feature `nccl`).
///
/// One rank per GPU, here every GPU of the machine driven from one process (a rank per
/// process works the same, with the id sent to the others):
///
/// ```no_run
/// use oxccl_comm::{Backend as _, Comm, CommConfig, Nccl, ReduceOp};
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let nccl = Nccl::load()?; // or Nccl::open("/path/to/libnccl.so.2")
///     let id = nccl.unique_id()?; // 128 bytes every rank must get
///     let n = oxccl_comm::nccl::device_count()?;
///     let ranks: Vec<_> = (0..n)
///         .map(|rank| {
///             let (nccl, id) = (nccl.clone(), id);
///             std::thread::spawn(move || -> oxccl_comm::Result<Vec<f32>> {
///                 let mut comm = Comm::init_rank(&nccl, &id, rank, n, rank, &CommConfig::new())?;
///                 let stream = comm.stream().clone();
///                 let x = stream.clone_htod(&[rank as f32; 1024]).expect("upload");
///                 let mut y = stream.alloc_zeros::<f32>(1024).expect("alloc");
///                 comm.all_reduce(&x, &mut y, ReduceOp::Sum)?; // checked before NCCL sees it
///                 comm.synchronize()?; // waits, then reports asynchronous errors
///                 let out = stream.clone_dtoh(&y).expect("download");
///                 comm.destroy()?; // finalize + destroy (a drop aborts instead)
///                 Ok(out)
///             })
///         })
///         .collect();
///     for r in ranks {
///         println!("{:?}", &r.join().expect("rank thread")?[..4]);
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct Comm {
    comm: NcclComm,
    stream: NcclStream,
    /// A CUDA-graph capture open on the stream (see `comm_graph`).
    cap: crate::capture_slot::CaptureSlot,
    /// The symmetric windows (see `one_sided`); after `comm`, so that when both are dropped
    /// the communicator, and with it the windows, ends before the memory goes.
    pub(crate) windows: crate::window_table::WindowTable,
}

/// Stops a communicator from any thread (a watchdog, a signal handler): wakes ranks blocked in
/// its collectives. Idempotent. It allows nothing but abort, state and poll (the backend's
/// [`CommAbort`] handle), and may outlive the communicator.
#[derive(Debug, Clone)]
pub struct AbortHandle {
    handle: NcclAbort,
}

impl AbortHandle {
    /// Aborts the communicator, keeping `reason` as the cause reported by later calls.
    pub fn abort(&self, reason: &str) {
        self.handle.abort(reason);
    }

    /// The communicator's state.
    pub fn state(&self) -> CommState {
        self.handle.state()
    }

    /// The communicator's asynchronous error, and the progress of a nonblocking init.
    pub fn poll(&self) -> Result<Progress> {
        self.handle.poll()
    }
}

pub(crate) fn rd<'a, T>(
    arg: &'static str,
    dev: Device,
    s: &'a impl DevicePtr<T>,
    st: &'a CudaStream,
) -> Result<(RawBuf, SyncOnDrop<'a>)> {
    same_device(arg, dev, s, st)?;
    let (ptr, sync) = s.device_ptr(st);
    Ok((RawBuf::new(ptr as usize, s.len()), sync))
}

pub(crate) fn wr<'a, T>(
    arg: &'static str,
    dev: Device,
    s: &'a mut impl DevicePtrMut<T>,
    st: &'a CudaStream,
) -> Result<(RawBufMut, SyncOnDrop<'a>)> {
    same_device(arg, dev, s, st)?;
    let len = s.len();
    let (ptr, sync) = s.device_ptr_mut(st);
    Ok((RawBufMut::new(ptr as usize, len), sync))
}

/// The policy `OXCCL_PEER_KERNELS` names: `auto` when unset, an error naming the variable for
/// a value it does not take.
pub fn peer_policy_from_env() -> Result<oxccl_core::peer_kernels::PeerPolicy> {
    match std::env::var(oxccl_rules::env::PEER_KERNELS) {
        Err(_) => Ok(oxccl_core::peer_kernels::PeerPolicy::Auto),
        Ok(v) => oxccl_rules::env::parse_peer_kernels(&v),
    }
}

/// The kernels' limits: the `kernels` lines of the tune table `OXCCL_TUNE_FILE` names over
/// the measured defaults (the defaults alone when it is unset).
pub fn peer_table_from_env() -> Result<oxccl_core::peer_kernels::PeerTable> {
    use oxccl_rules::tune::file::{tune_from_env, TUNE_FILE_VAR};
    let var = std::env::var(TUNE_FILE_VAR).ok();
    Ok(tune_from_env(var.as_deref())?
        .map(|t| t.peer_table())
        .unwrap_or_default())
}

impl Comm {
    /// Joins the communicator of `id` as `rank` of `size` on `device`, with a new stream there.
    /// A nonblocking config returns at once: [`Comm::wait_ready`] (or any operation) waits.
    pub fn init_rank(
        nccl: &NcclBackend,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: u32,
        cfg: &CommConfig,
    ) -> Result<Comm> {
        let comm = nccl.init_rank(id, rank, size, Device(device), cfg)?;
        Comm::made(comm)
    }

    /// A communicator the library just made, on a new stream, with oxccl's kernels set up
    /// ([`Comm::enable_peer_kernels`]) when it is ready: a nonblocking communicator still
    /// initializing is left for the caller to set up once ready (the set-up waits on every
    /// rank).
    pub(crate) fn made(comm: NcclComm) -> Result<Comm> {
        let mut c = Comm::with_new_stream(comm)?;
        if c.state() == CommState::Ready {
            c.enable_peer_kernels()?;
        }
        Ok(c)
    }

    /// Sets up oxccl's own kernels for a group whose ranks share a node (see
    /// [`oxccl_core::peer_kernels`]) under the policy `OXCCL_PEER_KERNELS` names (`auto` when
    /// unset) and the limits of the tune table `OXCCL_TUNE_FILE` names (its `kernels` lines;
    /// the measured defaults otherwise): from then on each all-reduce, all-gather and
    /// reduce-scatter runs on the kernel the policy picks, or on NCCL.
    /// Returns whether the kernels are on (false on a group spanning nodes, or with the
    /// policy `nccl`). Collective: every rank calls it at the same point among its
    /// collectives. [`Comm::init_rank`] and [`Comm::split`] call it for a blocking
    /// communicator; call it yourself after [`Comm::new`], or once a nonblocking one is ready.
    pub fn enable_peer_kernels(&mut self) -> Result<bool> {
        self.enable_peer_kernels_with(peer_policy_from_env()?, &peer_table_from_env()?)
    }

    /// [`Comm::enable_peer_kernels`] under an explicit policy and table (every rank must pass
    /// the same, or the group uses NCCL alone).
    pub fn enable_peer_kernels_with(
        &mut self,
        policy: oxccl_core::peer_kernels::PeerPolicy,
        table: &oxccl_core::peer_kernels::PeerTable,
    ) -> Result<bool> {
        self.comm.enable_peer_kernels(&self.stream, policy, table)
    }

    /// Wraps a backend communicator with a new stream on its device.
    pub fn with_new_stream(comm: NcclComm) -> Result<Comm> {
        let stream = comm.new_stream()?;
        Ok(Comm {
            comm,
            stream,
            cap: Default::default(),
            windows: Default::default(),
        })
    }

    /// Wraps a backend communicator with the given stream (which must be on its device).
    pub fn new(comm: NcclComm, stream: Arc<CudaStream>) -> Result<Comm> {
        let ordinal = stream.context().ordinal();
        if ordinal != comm.device().0 as usize {
            return Err(Error::invalid(
                "stream",
                format_args!(
                    "a stream on device {}, got device {ordinal}",
                    comm.device().0
                ),
            ));
        }
        Ok(Comm {
            comm,
            stream: NcclStream::new(stream),
            cap: Default::default(),
            windows: Default::default(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.comm.rank()
    }
    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.comm.size()
    }
    /// The device of this rank.
    pub fn device(&self) -> Device {
        self.comm.device()
    }
    /// The communicator's state.
    pub fn state(&self) -> CommState {
        self.comm.state()
    }
    /// The stream operations are issued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.stream.cuda()
    }
    /// The stream as the core's `Stream` (for capture).
    pub(crate) fn nccl_stream(&self) -> &NcclStream {
        &self.stream
    }
    /// The capture state.
    pub(crate) fn cap(&self) -> &crate::capture_slot::CaptureSlot {
        &self.cap
    }
    /// The stream the typed calls take their slices on (another one while capturing).
    pub(crate) fn access(&self) -> &CudaStream {
        self.cap.access(self.stream.cuda())
    }
    /// The backend communicator (for the raw trait API and features not wrapped here).
    pub fn backend(&self) -> &NcclComm {
        &self.comm
    }
    /// A handle that aborts this communicator from any thread.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            handle: self.comm.abort_handle(),
        }
    }
    /// Polls for asynchronous errors and for the end of a nonblocking init.
    pub fn poll(&self) -> Result<Progress> {
        self.comm.poll()
    }
    /// Waits until a nonblocking init has finished (bounded by the backend's timeout; an init
    /// past it is aborted and the error is [`Error::Timeout`], at once: NCCL's abort of the
    /// half-made communicator runs on a thread of its own, [`AbortHandle::state`] is
    /// [`CommState::Aborting`] until it returns, then [`CommState::Aborted`], and
    /// [`crate::wait_for_aborts`] waits for it). Operations wait by themselves.
    pub fn wait_ready(&self) -> Result<()> {
        self.comm.wait_ready("nonblocking init")
    }
    /// Blocks until every operation issued so far has completed, then reports any asynchronous
    /// error of the communicator.
    pub fn synchronize(&self) -> Result<()> {
        oxccl_core::Stream::synchronize(&self.stream)?;
        self.comm.poll().map(|_| ())
    }

    /// Waits until every operation issued so far has completed, polling the communicator's
    /// asynchronous error meanwhile: returns its error (a remote failure, an abort) as soon as
    /// it appears, or [`Error::Timeout`] after `limit` (a peer that died without NCCL noticing).
    /// The communicator is left as it is: abort it to recover.
    pub fn synchronize_timeout(&self, limit: std::time::Duration) -> Result<()> {
        use oxccl_core::{Event, Stream};
        let done = self.stream.record(false)?;
        oxccl_nccl::Deadline::after(limit).poll("operations on the communicator's stream", || {
            if done.query()? {
                return Ok(Progress::Done);
            }
            self.comm.poll()?;
            Ok(Progress::InProgress)
        })
    }

    /// Issues any operation on raw device addresses: the escape hatch for frameworks with
    /// their own tensor types.
    ///
    /// # Safety
    /// The buffers of `op` must be device memory of this communicator's device, of the stated
    /// lengths, valid and not written by others until the work on [`Comm::stream`] completes.
    pub unsafe fn issue(&mut self, op: &CommOp<'_>) -> Result<()> {
        self.cap.note(op, true);
        // SAFETY: forwarded contract.
        unsafe { self.comm.issue(op, &self.stream) }
    }

    fn run(&self, op: CommOp<'_>) -> Result<()> {
        self.run_configured(op, None)
    }

    /// Issues `op`, with a configuration of its own when `cfg` is given (NCCL 2.31.2+).
    /// Refused while a group is open on this thread: a typed call returns its buffers at once,
    /// but a grouped operation runs only when the group ends, so only a [`crate::CommGroup`], which
    /// keeps them until then, issues typed calls inside one.
    fn run_configured(&self, op: CommOp<'_>, cfg: Option<&CollConfig>) -> Result<()> {
        self.refuse_in_group()?;
        self.run_grouped(op, cfg)
    }

    /// Refuses a typed call while a group is open on this thread on this library.
    pub(crate) fn refuse_in_group(&self) -> Result<()> {
        if self.comm.group_open() {
            return Err(Error::InvalidState {
                state: self.state(),
                attempted: "issue a typed call of `Comm` inside a group",
                reason: oxccl_core::text!(
                    "a group is open on this thread; issue it through the `CommGroup` that \
                     `Comm::group` returns, which keeps the buffers until the group has run"
                ),
            });
        }
        Ok(())
    }

    /// [`Comm::run_configured`] for a [`CommGroup`], which holds the operation's buffers
    /// until the group ends.
    pub(crate) fn run_grouped(&self, op: CommOp<'_>, cfg: Option<&CollConfig>) -> Result<()> {
        self.cap.note(&op, false);
        // SAFETY: every buffer in `op` came from a cudarc slice of this device (checked by
        // `rd`/`wr`) whose length it carries. Outside a group the slices' sync guards, dropped
        // after this call, order later use of the memory after the NCCL work on this stream;
        // inside one, the `CommGroup` borrows the slices until the group has ended and then
        // marks their use again, after the work was enqueued.
        unsafe {
            match cfg {
                None => self.comm.issue(&op, &self.stream),
                Some(c) => self.comm.issue_configured(&op, &self.stream, c),
            }
        }
    }

    /// Takes `send` (read) and `recv` (written) as raw buffers of this device, an absent one as
    /// empty, and issues the operation `op` builds from them. The slices' sync guards live until
    /// the issue has returned.
    fn run_on<'c, T, S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &self,
        send: Option<&S>,
        recv: Option<&mut R>,
        op: impl FnOnce(RawBuf, RawBufMut) -> CommOp<'c>,
    ) -> Result<()> {
        self.run_on_with(send, recv, op, None)
    }

    /// [`Comm::run_on`] with the operation's own configuration `cfg` when given.
    pub(crate) fn run_on_with<'c, T, S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &self,
        send: Option<&S>,
        recv: Option<&mut R>,
        op: impl FnOnce(RawBuf, RawBufMut) -> CommOp<'c>,
        cfg: Option<&CollConfig>,
    ) -> Result<()> {
        let (d, st) = (self.device(), self.access());
        let (s, _a) = match send {
            Some(send) => {
                let (s, g) = rd("send", d, send, st)?;
                (s, Some(g))
            }
            None => (RawBuf::EMPTY, None),
        };
        let (r, _b) = match recv {
            Some(recv) => {
                let (r, g) = wr("recv", d, recv, st)?;
                (r, Some(g))
            }
            None => (RawBufMut::EMPTY, None),
        };
        self.run_configured(op(s, r), cfg)
    }

    /// Takes `buf` (written; read too by an in-place op) as a raw buffer of this device and
    /// issues the operation `op` builds from it.
    fn run_on_buf<'c, T>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: impl FnOnce(RawBufMut) -> CommOp<'c>,
    ) -> Result<()> {
        let (r, _b) = wr("buf", self.device(), buf, self.access())?;
        self.run(op(r))
    }

    /// Reduces `send` across ranks into `recv` on every rank.
    pub fn all_reduce<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run_on(Some(send), Some(recv), |send, recv| {
            CommOp::all_reduce(send, recv, T::DTYPE, op)
        })
    }

    /// Premul-sum all-reduce with the factor read from device memory when the collective runs:
    /// `recv = Σ factor[0] × send` over ranks. `factor` holds at least one element of `T` on
    /// this device.
    pub fn all_reduce_premul_device<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        factor: &impl DevicePtr<T>,
    ) -> Result<()> {
        if factor.len() == 0 {
            return Err(Error::invalid(
                "factor",
                format_args!("at least one element"),
            ));
        }
        let (f, _guard) = rd("factor", self.device(), factor, self.access())?;
        let op = ReduceOp::PreMulSum(Scalar::Device { addr: f.addr });
        self.run_on(Some(send), Some(recv), |send, recv| {
            CommOp::all_reduce(send, recv, T::DTYPE, op)
        })
    }

    /// Reduces `buf` across ranks in place.
    pub fn all_reduce_in_place<T: Element>(
        &mut self,
        buf: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run_on_buf(buf, |buf| CommOp::all_reduce_in_place(buf, T::DTYPE, op))
    }

    /// Copies `send` of `root` into `recv` of every rank (`send` is read on the root only).
    pub fn broadcast<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        root: u32,
    ) -> Result<()> {
        self.run_on(Some(send), Some(recv), |send, recv| {
            CommOp::broadcast(send, recv, T::DTYPE, root)
        })
    }

    /// Broadcasts `buf` of `root` in place.
    pub fn broadcast_in_place<T: Element>(
        &mut self,
        buf: &mut impl DevicePtrMut<T>,
        root: u32,
    ) -> Result<()> {
        self.run_on_buf(buf, |buf| CommOp::broadcast_in_place(buf, T::DTYPE, root))
    }

    /// Reduces `send` across ranks into `recv` of `root` (`recv` may be `None` off the root).
    pub fn reduce<T: Element, R: DevicePtrMut<T>>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: Option<&mut R>,
        op: ReduceOp,
        root: u32,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run_on(Some(send), recv, |send, recv| {
            CommOp::reduce(send, recv, T::DTYPE, op, root)
        })
    }

    /// Gathers every rank's `send` into `recv` (world size × `send.len()`), by rank.
    pub fn all_gather<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        self.run_on(Some(send), Some(recv), |send, recv| {
            CommOp::all_gather(send, recv, T::DTYPE)
        })
    }

    /// Reduces `send` (world size × `recv.len()`) across ranks; rank r keeps part r in `recv`.
    pub fn reduce_scatter<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run_on(Some(send), Some(recv), |send, recv| {
            CommOp::reduce_scatter(send, recv, T::DTYPE, op)
        })
    }

    /// Equal all-to-all: part p of `send` goes to rank p; part q of `recv` comes from rank q.
    pub fn all_to_all<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        self.run_on(Some(send), Some(recv), |send, recv| {
            CommOp::all_to_all(send, recv, T::DTYPE)
        })
    }

    /// Uneven all-to-all: `send_counts[p]` elements to rank p, `recv_counts[q]` from rank q.
    pub fn all_to_all_v<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        send_counts: &[usize],
        recv_counts: &[usize],
    ) -> Result<()> {
        self.run_on(Some(send), Some(recv), |send, recv| {
            CommOp::all_to_all_v(send, recv, T::DTYPE, send_counts, recv_counts)
        })
    }

    /// Gathers every rank's `send` into `recv` of `root` (`None` off the root).
    pub fn gather<T: Element, R: DevicePtrMut<T>>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: Option<&mut R>,
        root: u32,
    ) -> Result<()> {
        self.run_on(Some(send), recv, |send, recv| {
            CommOp::gather(send, recv, T::DTYPE, root)
        })
    }

    /// Scatters `send` of `root` (`None` off the root): rank r receives part r in `recv`.
    pub fn scatter<T: Element, S: DevicePtr<T>>(
        &mut self,
        send: Option<&S>,
        recv: &mut impl DevicePtrMut<T>,
        root: u32,
    ) -> Result<()> {
        self.run_on(send, Some(recv), |send, recv| {
            CommOp::scatter(send, recv, T::DTYPE, root)
        })
    }

    /// All-gather of uneven parts: rank r contributes `counts[r]` elements.
    pub fn all_gather_v<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        counts: &[usize],
    ) -> Result<()> {
        self.run_on(Some(send), Some(recv), |send, recv| {
            CommOp::all_gather_v(send, recv, T::DTYPE, counts)
        })
    }

    /// Reduce-scatter of uneven parts: rank r keeps `counts[r]` elements of the result.
    pub fn reduce_scatter_v<T: Element>(
        &mut self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        counts: &[usize],
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run_on(Some(send), Some(recv), |send, recv| {
            CommOp::reduce_scatter_v(send, recv, T::DTYPE, op, counts)
        })
    }

    /// Sends `buf` to `peer`.
    pub fn send<T: Element>(&mut self, buf: &impl DevicePtr<T>, peer: u32) -> Result<()> {
        let (d, st) = (self.device(), self.access());
        let (s, _a) = rd("buf", d, buf, st)?;
        self.run(CommOp::send(s, T::DTYPE, peer))
    }

    /// Receives into `buf` from `peer`.
    pub fn recv<T: Element>(&mut self, buf: &mut impl DevicePtrMut<T>, peer: u32) -> Result<()> {
        self.run_on_buf(buf, |buf| CommOp::recv(buf, T::DTYPE, peer))
    }

    /// Every rank waits for every other: a one-element all-reduce, then a stream synchronize.
    pub fn barrier(&mut self) -> Result<()> {
        self.run(CommOp::Barrier)?;
        self.synchronize()
    }

    /// A communicator of the ranks that gave the same `color` (`None`: this rank joins none),
    /// ordered by `key`; every rank must call it. The child gets a new stream.
    pub fn split(
        &mut self,
        color: Option<u32>,
        key: u32,
        cfg: &CommConfig,
    ) -> Result<Option<Comm>> {
        if self.comm.state() == CommState::Initializing {
            self.wait_ready()?;
        }
        match self.comm.split(color, key, cfg)? {
            Some(c) => Comm::made(c).map(Some),
            None => Ok(None),
        }
    }

    /// Registers `buf` with the communicator (NCCL 2.19+) for faster transfers.
    pub fn register<T: Element>(&mut self, buf: &impl DevicePtr<T>) -> Result<RegHandle> {
        let (d, st) = (self.device(), self.access());
        let (s, _a) = rd("buf", d, buf, st)?;
        let bytes = s.len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::invalid("buf", format_args!("a buffer whose size fits in usize"))
        })?;
        self.comm.register(s.addr, bytes)
    }

    /// Releases a registration.
    pub fn deregister(&mut self, handle: RegHandle) -> Result<()> {
        self.comm.deregister(handle)
    }

    /// Aborts the communicator (see [`AbortHandle`] to do it from another thread).
    pub fn abort(&self, reason: &str) {
        self.comm.abort(reason);
    }

    /// Ends the communicator cleanly: finalize (flushing outstanding work), then destroy. A
    /// failed or aborted communicator is released without waiting for peers.
    pub fn destroy(self) -> Result<()> {
        self.comm.destroy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::HostScalar;

    #[test]
    fn safe_calls_refuse_a_raw_device_factor() {
        let dev = ReduceOp::PreMulSum(Scalar::Device { addr: 0x1000 });
        assert!(matches!(
            host_op::<f32>(dev),
            Err(Error::InvalidArgument { arg: "op", .. })
        ));
        let host = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(2.0)));
        assert_eq!(host_op::<f32>(host).unwrap(), host);
        assert_eq!(host_op::<bool>(ReduceOp::Sum).unwrap(), ReduceOp::Max);
    }
}

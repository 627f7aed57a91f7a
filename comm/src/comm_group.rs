//! A group of typed operations on one communicator that holds their buffers until it has run.
//!
//! NCCL enqueues a grouped operation's work only when the outermost group ends. A typed call
//! outside a group marks its buffers as used on the stream when it returns (cudarc's events),
//! after the work; inside a group that mark would come before the work, and safe code could
//! then free or reuse a buffer the work has yet to touch. So a [`CommGroup`] borrows each
//! buffer until the group ends and marks its use again then, after the work was enqueued.

use crate::comm::{rd, wr, Comm};
use crate::element::{host_op, Element};
use crate::group_guard::GroupGuard;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use oxccl_core::coll_config::CollConfig;
use oxccl_core::{CommOp, Error, Progress, RawBuf, RawBufMut, ReduceOp, Result, Scalar};
use std::marker::PhantomData;

/// A buffer an operation of the group still uses, marked as used on the stream again once
/// the group has ended.
trait Held {
    fn mark_used(&mut self, stream: &CudaStream);
}

/// A buffer the group's work reads.
struct Read<'b, T, S>(&'b S, PhantomData<fn() -> T>);

impl<T, S: DevicePtr<T>> Held for Read<'_, T, S> {
    fn mark_used(&mut self, stream: &CudaStream) {
        // Taking the pointer on the stream and dropping its guard records the read there.
        drop(self.0.device_ptr(stream));
    }
}

/// A buffer the group's work writes.
struct Write<'b, T, R>(&'b mut R, PhantomData<fn() -> T>);

impl<T, R: DevicePtrMut<T>> Held for Write<'_, T, R> {
    fn mark_used(&mut self, stream: &CudaStream) {
        drop(self.0.device_ptr_mut(stream));
    }
}

type HeldList<'b> = Vec<Box<dyn Held + 'b>>;

/// An open group on one communicator ([`Comm::group`]): the operations issued through it are
/// launched together when it ends, by [`CommGroup::end`] or by its drop. It borrows the
/// communicator and each buffer handed to it (for `'b`) until then, so no buffer can be
/// freed, written or reused before the group's work ran. Groups nest
/// ([`CommGroup::group`]); an operation refused inside leaves the rest of the group to run.
///
/// ```compile_fail
/// # fn f(c: &mut oxccl_comm::Comm) -> oxccl_comm::Result<()> {
/// let st = c.stream().clone();
/// let x = st.clone_htod(&[1.0f32; 4]).unwrap();
/// let mut y = st.alloc_zeros::<f32>(4).unwrap();
/// let mut g = c.group()?;
/// g.all_reduce(&x, &mut y, oxccl_comm::ReduceOp::Sum)?;
/// drop(y); // refused: the group still uses `y` until it ends
/// g.end()?;
/// # Ok(()) }
/// ```
#[must_use = "the group is launched when it ends"]
pub struct CommGroup<'c, 'b> {
    comm: &'c mut Comm,
    /// The group call; `None` once ended.
    guard: Option<GroupGuard>,
    held: HeldList<'b>,
    /// The enclosing group's list, which takes this one's buffers when it ends (the work runs
    /// only when the outermost group ends).
    parent: Option<&'c mut HeldList<'b>>,
}

impl std::fmt::Debug for CommGroup<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommGroup")
            .field("rank", &self.comm.rank())
            .field("open", &self.guard.is_some())
            .field("nested", &self.parent.is_some())
            .field("buffers", &self.held.len())
            .finish()
    }
}

impl Comm {
    /// Opens a group on this thread (on this communicator's library): the operations issued
    /// through the returned [`CommGroup`] are launched together when it ends (p2p pairs inside
    /// never deadlock), and its end waits for this communicator's launch. The group borrows
    /// the communicator and every buffer handed to it until it ends, because NCCL enqueues a
    /// grouped operation's work only then. While it is open, this communicator's own typed
    /// calls are refused.
    pub fn group<'b>(&mut self) -> Result<CommGroup<'_, 'b>> {
        CommGroup::open(self)
    }
}

impl<'c, 'b> CommGroup<'c, 'b> {
    /// Opens the outermost group of `comm`, whose end waits for `comm`'s launch.
    pub(crate) fn open(comm: &'c mut Comm) -> Result<CommGroup<'c, 'b>> {
        let b = comm.backend();
        let guard = GroupGuard::watching(b.backend(), b, b.timeout())?;
        Ok(CommGroup {
            comm,
            guard: Some(guard),
            held: Vec::new(),
            parent: None,
        })
    }

    /// Opens a group inside this one: its operations are launched with the outer group's.
    pub fn group(&mut self) -> Result<CommGroup<'_, 'b>> {
        let guard = GroupGuard::start(self.comm.backend().backend())?;
        Ok(CommGroup {
            comm: &mut *self.comm,
            guard: Some(guard),
            held: Vec::new(),
            parent: Some(&mut self.held),
        })
    }

    /// Closes the group: the outermost one launches its operations and returns `Done` once
    /// they are enqueued (bounded by the communicator's timeout for a nonblocking one,
    /// [`Error::Timeout`] past it). Its buffers are released after that, marked as used by
    /// the group's work.
    pub fn end(mut self) -> Result<Progress> {
        match self.guard.take() {
            Some(g) => g.end(),
            None => Ok(Progress::Done),
        }
    }

    /// The communicator the group issues on.
    pub fn comm(&self) -> &Comm {
        self.comm
    }

    /// Takes `s` (read by the group's work) as a raw buffer of the communicator's device.
    fn read<T: Element, S: DevicePtr<T>>(&mut self, arg: &'static str, s: &'b S) -> Result<RawBuf> {
        let (buf, mark) = rd(arg, self.comm.device(), s, self.comm.access())?;
        drop(mark);
        self.held.push(Box::new(Read(s, PhantomData)));
        Ok(buf)
    }

    /// Takes `s` (written by the group's work) as a raw buffer of the communicator's device.
    fn write<T: Element, R: DevicePtrMut<T>>(
        &mut self,
        arg: &'static str,
        s: &'b mut R,
    ) -> Result<RawBufMut> {
        let (buf, mark) = wr(arg, self.comm.device(), &mut *s, self.comm.access())?;
        drop(mark);
        self.held.push(Box::new(Write(s, PhantomData)));
        Ok(buf)
    }

    /// Takes `send` and `recv` (an absent one as empty) and issues the operation `op` builds
    /// from them, with its own configuration when `cfg` is given.
    fn run<'o, T: Element, S: DevicePtr<T>, R: DevicePtrMut<T>>(
        &mut self,
        send: Option<&'b S>,
        recv: Option<&'b mut R>,
        op: impl FnOnce(RawBuf, RawBufMut) -> CommOp<'o>,
        cfg: Option<&CollConfig>,
    ) -> Result<()> {
        let s = match send {
            Some(s) => self.read("send", s)?,
            None => RawBuf::EMPTY,
        };
        let r = match recv {
            Some(r) => self.write("recv", r)?,
            None => RawBufMut::EMPTY,
        };
        self.comm.run_grouped(op(s, r), cfg)
    }

    /// Takes `buf` (written; read too by an in-place op) and issues the operation `op` builds.
    fn run_on_buf<'o, T: Element, R: DevicePtrMut<T>>(
        &mut self,
        buf: &'b mut R,
        op: impl FnOnce(RawBufMut) -> CommOp<'o>,
    ) -> Result<()> {
        let b = self.write("buf", buf)?;
        self.comm.run_grouped(op(b), None)
    }

    /// [`Comm::all_reduce`] in the group.
    pub fn all_reduce<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run(
            Some(send),
            Some(recv),
            |s, r| CommOp::all_reduce(s, r, T::DTYPE, op),
            None,
        )
    }

    /// [`Comm::all_reduce_configured`] in the group.
    pub fn all_reduce_configured<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        op: ReduceOp,
        cfg: &CollConfig,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        let build = |s, r| CommOp::all_reduce(s, r, T::DTYPE, op);
        self.run(Some(send), Some(recv), build, Some(cfg))
    }

    /// [`Comm::all_reduce_premul_device`] in the group.
    pub fn all_reduce_premul_device<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        factor: &'b impl DevicePtr<T>,
    ) -> Result<()> {
        if factor.len() == 0 {
            return Err(Error::invalid(
                "factor",
                format_args!("at least one element"),
            ));
        }
        let f = self.read("factor", factor)?;
        let op = ReduceOp::PreMulSum(Scalar::Device { addr: f.addr });
        self.run(
            Some(send),
            Some(recv),
            |s, r| CommOp::all_reduce(s, r, T::DTYPE, op),
            None,
        )
    }

    /// [`Comm::all_reduce_in_place`] in the group.
    pub fn all_reduce_in_place<T: Element>(
        &mut self,
        buf: &'b mut impl DevicePtrMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run_on_buf(buf, |b| CommOp::all_reduce_in_place(b, T::DTYPE, op))
    }

    /// [`Comm::broadcast`] in the group.
    pub fn broadcast<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        root: u32,
    ) -> Result<()> {
        self.run(
            Some(send),
            Some(recv),
            |s, r| CommOp::broadcast(s, r, T::DTYPE, root),
            None,
        )
    }

    /// [`Comm::broadcast_configured`] in the group.
    pub fn broadcast_configured<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        root: u32,
        cfg: &CollConfig,
    ) -> Result<()> {
        let build = |s, r| CommOp::broadcast(s, r, T::DTYPE, root);
        self.run(Some(send), Some(recv), build, Some(cfg))
    }

    /// [`Comm::broadcast_in_place`] in the group.
    pub fn broadcast_in_place<T: Element>(
        &mut self,
        buf: &'b mut impl DevicePtrMut<T>,
        root: u32,
    ) -> Result<()> {
        self.run_on_buf(buf, |b| CommOp::broadcast_in_place(b, T::DTYPE, root))
    }

    /// [`Comm::reduce`] in the group.
    pub fn reduce<T: Element, R: DevicePtrMut<T>>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: Option<&'b mut R>,
        op: ReduceOp,
        root: u32,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.run(
            Some(send),
            recv,
            |s, r| CommOp::reduce(s, r, T::DTYPE, op, root),
            None,
        )
    }

    /// [`Comm::all_gather`] in the group.
    pub fn all_gather<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        self.run(
            Some(send),
            Some(recv),
            |s, r| CommOp::all_gather(s, r, T::DTYPE),
            None,
        )
    }

    /// [`Comm::all_gather_configured`] in the group.
    pub fn all_gather_configured<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        cfg: &CollConfig,
    ) -> Result<()> {
        let build = |s, r| CommOp::all_gather(s, r, T::DTYPE);
        self.run(Some(send), Some(recv), build, Some(cfg))
    }

    /// [`Comm::reduce_scatter`] in the group.
    pub fn reduce_scatter<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        let build = |s, r| CommOp::reduce_scatter(s, r, T::DTYPE, op);
        self.run(Some(send), Some(recv), build, None)
    }

    /// [`Comm::reduce_scatter_configured`] in the group.
    pub fn reduce_scatter_configured<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        op: ReduceOp,
        cfg: &CollConfig,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        let build = |s, r| CommOp::reduce_scatter(s, r, T::DTYPE, op);
        self.run(Some(send), Some(recv), build, Some(cfg))
    }

    /// [`Comm::all_to_all`] in the group.
    pub fn all_to_all<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        self.run(
            Some(send),
            Some(recv),
            |s, r| CommOp::all_to_all(s, r, T::DTYPE),
            None,
        )
    }

    /// [`Comm::all_to_all_v`] in the group.
    pub fn all_to_all_v<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        send_counts: &[usize],
        recv_counts: &[usize],
    ) -> Result<()> {
        let build = |s, r| CommOp::all_to_all_v(s, r, T::DTYPE, send_counts, recv_counts);
        self.run(Some(send), Some(recv), build, None)
    }

    /// [`Comm::gather`] in the group.
    pub fn gather<T: Element, R: DevicePtrMut<T>>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: Option<&'b mut R>,
        root: u32,
    ) -> Result<()> {
        self.run(
            Some(send),
            recv,
            |s, r| CommOp::gather(s, r, T::DTYPE, root),
            None,
        )
    }

    /// [`Comm::scatter`] in the group.
    pub fn scatter<T: Element, S: DevicePtr<T>>(
        &mut self,
        send: Option<&'b S>,
        recv: &'b mut impl DevicePtrMut<T>,
        root: u32,
    ) -> Result<()> {
        self.run(
            send,
            Some(recv),
            |s, r| CommOp::scatter(s, r, T::DTYPE, root),
            None,
        )
    }

    /// [`Comm::all_gather_v`] in the group.
    pub fn all_gather_v<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        counts: &[usize],
    ) -> Result<()> {
        let build = |s, r| CommOp::all_gather_v(s, r, T::DTYPE, counts);
        self.run(Some(send), Some(recv), build, None)
    }

    /// [`Comm::reduce_scatter_v`] in the group.
    pub fn reduce_scatter_v<T: Element>(
        &mut self,
        send: &'b impl DevicePtr<T>,
        recv: &'b mut impl DevicePtrMut<T>,
        op: ReduceOp,
        counts: &[usize],
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        let build = |s, r| CommOp::reduce_scatter_v(s, r, T::DTYPE, op, counts);
        self.run(Some(send), Some(recv), build, None)
    }

    /// [`Comm::send`] in the group.
    pub fn send<T: Element>(&mut self, buf: &'b impl DevicePtr<T>, peer: u32) -> Result<()> {
        let b = self.read("buf", buf)?;
        self.comm.run_grouped(CommOp::send(b, T::DTYPE, peer), None)
    }

    /// [`Comm::recv`] in the group.
    pub fn recv<T: Element>(&mut self, buf: &'b mut impl DevicePtrMut<T>, peer: u32) -> Result<()> {
        self.run_on_buf(buf, |b| CommOp::recv(b, T::DTYPE, peer))
    }

    /// [`Comm::issue`] in the group: any operation on raw device addresses.
    ///
    /// # Safety
    /// As [`Comm::issue`]: the buffers of `op` must be device memory of the communicator's
    /// device, of the stated lengths, valid and not written by others until the work on
    /// [`Comm::stream`] completes, which is after the outermost group's end.
    pub unsafe fn issue(&mut self, op: &CommOp<'_>) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.comm.issue(op) }
    }
}

impl Drop for CommGroup<'_, '_> {
    fn drop(&mut self) {
        // Close the group first (a guard's drop ends it and logs a failure), so that the work
        // is enqueued before the buffers are marked as used by it.
        drop(self.guard.take());
        let held = std::mem::take(&mut self.held);
        match self.parent.as_deref_mut() {
            Some(outer) => outer.extend(held),
            None => {
                let st = self.comm.access();
                for mut h in held {
                    h.mark_used(st);
                }
            }
        }
    }
}

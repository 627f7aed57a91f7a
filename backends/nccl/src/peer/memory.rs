//! One rank's peer memory, ready for the kernels: its own memory, every peer's mapped here,
//! its host flags, and the streams its kernels ran on (so its release waits for them).

use super::host_flags::HostFlags;
use super::kernels::{Kernels, PeerArgs};
use super::vmm::{Mapping, Physical};
use crate::end_mark::StreamMarks;
use cudarc::driver::{sys, CudaContext, CudaStream};
use oxccl_core::peer_kernels::follow::{self, may_follow, FollowBackoff, Footprint};
use oxccl_core::peer_kernels::{choose, geometry, kernel_call, KernelAlgo, PeerPolicy, PeerTable};
use oxccl_core::{CommOp, Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The end a marking launch writes: its stream's marks and the mark.
pub(crate) type LaunchMark<'m> = (&'m Arc<StreamMarks>, u64);

/// A mapping of some rank's peer memory, with the reference that keeps it.
#[derive(Debug)]
pub(crate) struct Mapped {
    // Unmapped before the reference is released (fields drop in order).
    pub(crate) mapping: Mapping,
    pub(crate) _phys: Physical,
}

/// One rank's peer memory and kernels (see the module).
#[derive(Debug)]
pub(crate) struct PeerMemory {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) policy: PeerPolicy,
    pub(crate) table: PeerTable,
    pub(crate) kernels: Kernels,
    /// The launch arguments but for the call's factor and reduction.
    pub(crate) args: PeerArgs,
    pub(crate) timeout: Duration,
    /// Every rank's memory as mapped here, own included (rank order): held so it stays
    /// mapped while kernels may run.
    pub(crate) _mapped: Vec<Mapped>,
    pub(crate) flags: HostFlags,
    /// The streams kernels were launched on, kept alive until the release waited for them.
    pub(crate) streams: spin::Mutex<Vec<Arc<CudaStream>>>,
    /// Kernels launched (or captured), by [`KernelAlgo::index`].
    pub(crate) calls: [AtomicU64; KernelAlgo::EVERY.len()],
    /// This rank's launches in order, for a kernel to follow the one before block by block.
    pub(crate) order: spin::Mutex<LaunchOrder>,
}

/// The numbers of a rank's launches and what the last one touched: a launch may follow the
/// last one block by block where both ran on the same stream, both have at least
/// [`follow::MIN_BLOCKS`] blocks and [`may_follow`] says so (the kernel then checks on the
/// device that nothing ran between). Launches are numbered only while the device's misses
/// allow ([`FollowBackoff`]).
#[derive(Debug, Default)]
pub(crate) struct LaunchOrder {
    /// The last number given (0 before the first).
    seq: u32,
    /// Whether launches are numbered at all, by the misses the kernels report.
    backoff: FollowBackoff,
    /// The last launch: its stream (the handle's address, compared only), what it touched,
    /// its number.
    last: Option<(usize, Footprint, u32)>,
    /// Launches numbered so far.
    pub(crate) numbered: u64,
    /// Launches so far that wrote their call's end mark.
    pub(crate) marked: u64,
}

impl LaunchOrder {
    /// The number the next numbered launch gets (never 0).
    fn next_seq(&self) -> u32 {
        self.seq.wrapping_add(1).max(1)
    }

    /// The next launch's number (never 0) and the number of the launch it may follow (0 for
    /// none), for a launch of `footprint` on `stream`.
    fn number(&mut self, stream: usize, footprint: &Footprint) -> (u32, u32) {
        self.seq = self.next_seq();
        let follow = match &self.last {
            Some((s, before, n)) if *s == stream && may_follow(before, footprint) => *n,
            _ => 0,
        };
        (self.seq, follow)
    }
}

impl PeerMemory {
    /// Launches the kernel the policy and table pick for `op`; `None` when NCCL runs it (not
    /// a collective the kernels have, too large for the table, or `allowed` says no: asked
    /// only once a kernel was picked). An early launch of fewer than [`follow::MIN_BLOCKS`]
    /// blocks asks `marks` for the stream's end marks (if it has any) and writes the next of
    /// them as it ends; the answer holds the marks and that mark: the call's end, with no event
    /// recorded after it (see `end_mark`).
    ///
    /// # Safety
    ///
    /// `op` passed `check::op` on this communicator, and its buffers stay valid until the
    /// operation completes on `stream` (the `issue` contract); `marks` gives `stream`'s;
    /// `captured` says whether a capture is open on `stream`.
    pub(crate) unsafe fn issue<'m>(
        &self,
        op: &CommOp<'_>,
        stream: &Arc<CudaStream>,
        captured: bool,
        allowed: impl FnOnce() -> bool,
        marks: impl FnOnce() -> Result<Option<&'m Arc<StreamMarks>>>,
    ) -> Option<Result<Option<LaunchMark<'m>>>> {
        let n = self.args.nranks;
        let call = kernel_call(op, n)?;
        let algo = choose(self.policy, &self.table, &call, n)?;
        if !allowed() {
            return None;
        }
        self.note_stream(stream);
        if let Err(e) = self.ctx.bind_to_thread() {
            return Some(Err(crate::cuda::cuda_error(
                "binding the device for a kernel",
                e,
            )));
        }
        self.calls[algo.index()].fetch_add(1, Ordering::Relaxed);
        let mut args = self.args;
        args.op = call.red as u32;
        args.scale = call.scale;
        let cu = stream.cu_stream();
        let shape = geometry(algo.lines_per_rank(call.lines(), n));
        // Numbered in launch order: the lock is held over the launch.
        let mut order = self.order.lock();
        let numbered = (self.kernels.early()
            && shape.0 >= follow::MIN_BLOCKS
            && match captured {
                true => order.backoff.number_captured(),
                false => {
                    let next = order.next_seq();
                    order.backoff.number(self.flags.follow_miss(), next)
                }
            })
        .then(|| Footprint::of(algo, &call, n));
        if let Some(footprint) = &numbered {
            (args.seq, args.follow) = order.number(cu as usize, footprint);
        }
        // Only calls too small to be numbered (never followed, so every later kernel waits for
        // their whole grid) mark their end: their launch is the call's cost, and an event after
        // it would cost the next launch its early start; a larger call's event costs nothing
        // beside it.
        let marks = match self.kernels.early() && shape.0 < follow::MIN_BLOCKS {
            true => match marks() {
                Ok(m) => m,
                Err(e) => return Some(Err(e)),
            },
            false => None,
        };
        // SAFETY: the buffers hold `call.count` elements on this device (checked by
        // `check::op` before), valid until the kernel ends (the caller's contract); `args`
        // names this group's live mappings, which outlive every kernel (`Drop` waits for the
        // streams); every rank of the group picks the same kernel and shape for the same call
        // (`choose` and `geometry` are pure over what the set-up made equal); a launch follows
        // the one before only where `may_follow` allows, and the kernel checks the rest; a
        // marking call's slot is device memory of this context never freed (`end_mark`).
        let launch = |args: &PeerArgs| unsafe { self.kernels.launch(algo, &call, args, shape, cu) };
        let launched = match marks {
            Some(m) => m
                .launch_marked(|mark| {
                    args.mark_word = m.slot();
                    args.mark = mark;
                    launch(&args)
                })
                .map(|((), mark)| Some((m, mark))),
            None => launch(&args).map(|()| None),
        };
        order.last = numbered
            .filter(|_| launched.is_ok())
            .map(|footprint| (cu as usize, footprint, args.seq));
        order.numbered += u64::from(order.last.is_some());
        order.marked += u64::from(matches!(launched, Ok(Some(_))));
        Some(launched)
    }

    /// Keeps `s` for the release to wait on (a stream this group's kernels run on).
    pub(crate) fn note_stream(&self, s: &Arc<CudaStream>) {
        let mut streams = self.streams.lock();
        if !streams.iter().any(|k| Arc::ptr_eq(k, s)) {
            streams.push(s.clone());
        }
    }

    /// The error a kernel of this rank recorded when it gave up, if one did.
    pub(crate) fn failure(&self) -> Option<Error> {
        self.flags
            .status()
            .error(self.timeout.as_millis().min(u128::from(u64::MAX)) as u64)
    }

    /// Calls of `algo` launched or captured so far.
    pub(crate) fn calls(&self, algo: KernelAlgo) -> u64 {
        self.calls[algo.index()].load(Ordering::Relaxed)
    }

    /// Makes every kernel of this rank give up at its next check (an abort).
    pub(crate) fn raise_abort(&self) {
        self.flags.raise_abort();
    }
}

impl Drop for PeerMemory {
    /// Waits for the kernels launched on this rank's streams (they end on their own, give up
    /// on the abort flag, or after the time bound), then unmaps: a kernel never touches
    /// memory after it was let go.
    fn drop(&mut self) {
        if let Err(e) = self.ctx.bind_to_thread() {
            log::warn!("releasing peer memory: {e:?}");
        }
        for s in self.streams.lock().drain(..) {
            // SAFETY: the stream is kept alive by the Arc; a stream being captured refuses the
            // call, and then no kernel of this group runs on it.
            let r = unsafe { sys::cuStreamSynchronize(s.cu_stream()) };
            if r != sys::CUresult::CUDA_SUCCESS {
                log::debug!("releasing peer memory: waiting for a stream: {r:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::peer_kernels::follow::Extent;
    use oxccl_core::peer_kernels::KernelType;

    fn footprint(count: u64, send: usize, recv: usize) -> Footprint {
        let extent = |addr| Extent {
            addr,
            bytes: count * 4,
        };
        Footprint {
            algo: KernelAlgo::TwoShot,
            ty: KernelType::F32,
            count,
            send: extent(send),
            recv: extent(recv),
        }
    }

    /// A launch follows the last one only on the same stream and where the footprint rule
    /// allows; numbers are never 0, also past the wrap.
    #[test]
    fn a_launch_follows_the_last_one_on_its_stream_only() {
        let mut order = LaunchOrder::default();
        let a = footprint(65536, 0x10_0000, 0x20_0000);
        let (first, follow) = order.number(7, &a);
        assert_eq!((first, follow), (1, 0), "nothing to follow yet");
        order.last = Some((7, a, first));
        assert_eq!(
            order.number(7, &a),
            (2, 1),
            "the same call on the same stream"
        );
        order.last = Some((7, a, 2));
        assert_eq!(order.number(8, &a), (3, 0), "another stream");
        let shifted = footprint(65536, 0x20_0000 + 64, 0x30_0000);
        assert_eq!(
            order.number(7, &shifted),
            (4, 0),
            "reads the output before, shifted"
        );
        order.seq = u32::MAX;
        order.last = Some((7, a, u32::MAX));
        assert_eq!(
            order.number(7, &a),
            (1, u32::MAX),
            "the number after the last skips 0"
        );
    }
}

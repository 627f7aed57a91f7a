//! The end of a kernel call that marks it: its number, written by each of its blocks to an end
//! word in host-mapped memory as the block ends. Telling that such a call ended is a few loads
//! of host memory, where an event costs a driver call to record and another to query, on the
//! issuing thread of every operation.

use super::host_flags::HostFlags;
use cudarc::driver::{sys, CudaStream};
use oxccl_core::state::wait::{pause, Pause};
use oxccl_core::{text, Error, Result, ResultCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A marked kernel call on a stream (see the module).
#[derive(Debug, Clone)]
pub(crate) struct KernelEnd {
    /// The group's flags, holding the end words (kept while the mark is: a block is reused
    /// only once nothing holds it).
    flags: Arc<HostFlags>,
    call: u64,
    blocks: u32,
    /// The stream the kernel runs on (asked for its errors while a wait lasts).
    stream: Arc<CudaStream>,
}

impl KernelEnd {
    pub(crate) fn new(
        flags: Arc<HostFlags>,
        call: u64,
        blocks: u32,
        stream: Arc<CudaStream>,
    ) -> KernelEnd {
        KernelEnd {
            flags,
            call,
            blocks,
            stream,
        }
    }

    /// Whether the call ended (every block wrote its word; a kernel that gave up ends too,
    /// and its failure is the group's to report).
    pub(crate) fn ended(&self) -> bool {
        self.flags.ended(self.call, self.blocks)
    }

    /// Makes `waiter`'s later work wait until the call ended: nothing to do once it ended or
    /// on its own stream; else a wait on each block's end word, queued on `waiter` (the
    /// device's stream memory operations), so no thread blocks: a peer may be waiting for
    /// this thread before it calls. Without those operations the thread waits instead.
    pub(crate) fn order(&self, waiter: &Arc<CudaStream>) -> Result<()> {
        if self.ended() || waiter.cu_stream() == self.stream.cu_stream() {
            return Ok(());
        }
        let ctx = waiter.context();
        ctx.bind_to_thread()
            .map_err(|e| crate::cuda::cuda_error("binding a device to wait for a kernel", e))?;
        let waits = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)
            .unwrap_or(0);
        if waits == 0 {
            return self.synchronize();
        }
        for b in 0..self.blocks {
            // SAFETY: the address is the device mapping of block `b`'s end word (`b` below
            // the launch's blocks, at most MAX_BLOCKS) in pinned host memory that is never
            // freed (a released block goes to the spares) and whose end words never decrease
            // (a reused block's numbers go on from its last), so the queued wait reads live
            // memory and completes once the call ended; the stream is alive (the caller's).
            unsafe {
                sys::cuStreamWaitValue64_v2(
                    waiter.cu_stream(),
                    self.flags.end_addr() + 8 * u64::from(b),
                    self.call,
                    sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
                )
            }
            .result()
            .map_err(|e| crate::cuda::cuda_error("queueing a wait for a kernel's end", e))?;
        }
        Ok(())
    }

    /// Blocks until the call ended. A kernel ends on its own, gives up on the group's abort
    /// flag or after its time bound, so this returns; a context that broke (the kernel never
    /// wrote its words) is found by asking the stream, and is the error.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let began = Instant::now();
        let mut looks = 0u32;
        loop {
            if self.ended() {
                return Ok(());
            }
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(64) {
                self.stream_check()?;
            }
            match pause(began.elapsed()) {
                Pause::Yield => std::thread::yield_now(),
                Pause::Sleep(d) => std::thread::sleep(d.min(Duration::from_millis(1))),
            }
        }
    }

    /// Asks the stream: an error it reports is the wait's; a stream that ran everything while
    /// the words say otherwise cannot be (the kernel writes them before it ends) and is
    /// reported as a broken call, never waited on.
    fn stream_check(&self) -> Result<()> {
        // SAFETY: the stream is alive (held by the Arc) and not the default one (the kernels
        // run on the group's streams).
        let r = unsafe { sys::cuStreamQuery(self.stream.cu_stream()) };
        match r {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(()),
            sys::CUresult::CUDA_SUCCESS if self.ended() => Ok(()),
            sys::CUresult::CUDA_SUCCESS => Err(Error::Backend {
                code: ResultCode::INTERNAL_ERROR,
                text: text!("kernel call {} ended without marking its end", self.call),
                last: text!("its stream ran everything"),
            }),
            e => Err(crate::cuda::cuda_error(
                "waiting for a kernel's end",
                cudarc::driver::DriverError(e),
            )),
        }
    }
}

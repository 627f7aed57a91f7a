//! What a process group offers of its tune table and its communicator's buffers: the table,
//! what the communicator did with buffers, and buffers in the library's allocator.

use super::super::process_group::ProcessGroup;
use super::reg_cache::TunedStats;
use crate::buffer::Memory;
use oxccl_core::traits::CommOf;
use oxccl_core::tune::TuneTable;
use oxccl_core::Result;

impl<B: Memory> ProcessGroup<B> {
    /// What the group's communicator did with buffers: operations per mode, allocations
    /// registered and in windows now (makes the communicator if it is not made yet).
    pub fn tuned_stats(&self) -> Result<TunedStats> {
        Ok(self.inner.entry("read the buffer modes")?.regs.stats())
    }

    /// Runs `f` with the group's communicator (made first if needed), e.g. to inspect the
    /// mock's registrations and windows. `f` runs without the group's lock, so it may call
    /// the group; it must not issue on the communicator behind the group's back.
    pub fn with_comm<R>(&self, f: impl FnOnce(&CommOf<B>) -> R) -> Result<R> {
        let e = self.inner.entry("inspect the communicator")?;
        Ok(f(&e.comm))
    }

    /// The group's tune table, if any.
    pub fn tune_table(&self) -> Option<&TuneTable> {
        self.inner.opts.tune.as_deref()
    }
}

impl<B: Memory> ProcessGroup<B> {
    /// The table for an operation of `kind`, when that kind is tuned: the collectives whose
    /// buffers have the same size on every rank (a window must), and sends and receives
    /// (registered at most: see [`TuneTable::choose`]). Rooted operations with an absent
    /// buffer and uneven variants are always plain.
    pub(crate) fn tune_for(&self, kind: oxccl_core::OpKind) -> Option<&TuneTable> {
        use oxccl_core::OpKind as K;
        match kind {
            K::AllReduce
            | K::Broadcast
            | K::Reduce
            | K::AllGather
            | K::ReduceScatter
            | K::AllToAll
            | K::Send
            | K::Recv => self.inner.opts.tune.as_deref(),
            _ => None,
        }
    }
}

impl<B: Memory> ProcessGroup<B> {
    /// A buffer of `len` zeros in the library's allocator ([`Memory::CommBuf`]: NCCL's
    /// `ncclMemAlloc`, 2.19+), which the tune table may register or put in a window. Made on
    /// the group's copy stream, so allocating never makes the communicator.
    pub fn alloc_comm<T: crate::Element>(&self, len: usize) -> Result<B::CommBuf<T>> {
        let st = self.inner.copy_stream()?;
        self.inner.backend.alloc_comm(st, len)
    }

    /// A [`Memory::CommBuf`] holding a copy of `data`.
    pub fn upload_comm<T: crate::Element>(&self, data: &[T]) -> Result<B::CommBuf<T>> {
        let st = self.inner.copy_stream()?;
        self.inner.backend.upload_comm(st, data)
    }

    /// The contents of `buf` (either kind), after every operation that uses it (blocks).
    pub fn download_any<T: crate::Element>(
        &self,
        buf: &impl crate::buffer::Operand<B, Elem = T>,
    ) -> Result<Vec<T>> {
        let st = self.inner.copy_stream()?;
        buf.download(&self.inner.backend, st)
    }
}

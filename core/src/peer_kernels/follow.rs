//! When a kernel call may follow the group's call before it on the same stream block by block,
//! each block waiting only for the same block of that call instead of for all of it (the
//! kernels' "one call after another"; they also check on the device that nothing ran between).
//!
//! That is sound when every byte both calls touch, where either writes it, is touched by the
//! same block in both. The kernels hand out elements by their line within a buffer part (a
//! rank's part of the all-gather's output or the reduce-scatter's input, the whole buffer
//! otherwise; two-shot by the line within an owner's chunk), the same line of every part to
//! the same thread; so two calls of one kernel on as many elements agree on every byte of
//! buffers that start at the same address, and on nothing else.

use super::{KernelAlgo, KernelCall, KernelColl, KernelType, LINE_DATA_BYTES};

pub mod backoff;
pub use backoff::FollowBackoff;

/// The fewest blocks of a launch the host numbers for following: a launch of fewer gains less
/// from overlapping the call before than following costs it (a wait for its own end word,
/// and a release at its end), and runs as if following did not exist.
pub const MIN_BLOCKS: u32 = 8;

/// Where a buffer lies: its device address and length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Device address.
    pub addr: usize,
    /// Length in bytes.
    pub bytes: u64,
}

impl Extent {
    fn overlaps(&self, other: &Extent) -> bool {
        let (a, b) = (self.addr as u128, other.addr as u128);
        self.bytes > 0
            && other.bytes > 0
            && a < b + u128::from(other.bytes)
            && b < a + u128::from(self.bytes)
    }
}

/// What one kernel launch touches: the kernel, its element type and count (which fix how it
/// hands out elements to blocks), the input it reads and the output it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// The kernel.
    pub algo: KernelAlgo,
    /// Element type.
    pub ty: KernelType,
    /// Elements, as [`KernelCall::count`].
    pub count: u64,
    /// The input (read).
    pub send: Extent,
    /// The output (written).
    pub recv: Extent,
}

impl Footprint {
    /// The footprint of `call` run by `algo` on `nranks` ranks.
    pub fn of(algo: KernelAlgo, call: &KernelCall, nranks: u32) -> Footprint {
        let part = call.bytes();
        let all = part * u64::from(nranks);
        let (send, recv) = match call.coll {
            KernelColl::AllReduce => (part, part),
            KernelColl::AllGather => (part, all),
            KernelColl::ReduceScatter => (all, part),
        };
        Footprint {
            algo,
            ty: call.ty,
            count: call.count,
            send: Extent {
                addr: call.send,
                bytes: send,
            },
            recv: Extent {
                addr: call.recv,
                bytes: recv,
            },
        }
    }

    /// Which of its threads the kernel hands the byte at `addr` of `buffer` (one of this
    /// footprint's extents) to, as a key: the byte's line within its buffer part (two-shot:
    /// within an owner's chunk of lines). The model [`may_follow`] is checked against: two
    /// calls of one shape handle bytes of equal keys in the same block.
    pub fn block_key(&self, nranks: u32, buffer: &Extent, addr: usize) -> u64 {
        let part = self.count * self.ty.size();
        let line = (addr.wrapping_sub(buffer.addr) as u64)
            .checked_rem(part)
            .unwrap_or(0)
            / LINE_DATA_BYTES;
        match self.algo {
            KernelAlgo::TwoShot => {
                let chunk = part
                    .div_ceil(LINE_DATA_BYTES)
                    .div_ceil(u64::from(nranks.max(1)));
                line.checked_rem(chunk).unwrap_or(0)
            }
            _ => line,
        }
    }
}

/// Whether `next` may follow `before` block by block (both calls of one group): the same
/// kernel, type and count, and their buffers meet, where either writes, only at the same
/// address.
pub fn may_follow(before: &Footprint, next: &Footprint) -> bool {
    if before.algo != next.algo || before.ty != next.ty || before.count != next.count {
        return false;
    }
    let a = [(before.send, false), (before.recv, true)];
    let b = [(next.send, false), (next.recv, true)];
    a.iter().all(|(x, x_writes)| {
        b.iter()
            .all(|(y, y_writes)| !(x_writes | y_writes) || !x.overlaps(y) || x.addr == y.addr)
    })
}

#[cfg(test)]
mod tests;

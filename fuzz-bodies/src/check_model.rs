//! The argument rules of every operation, restated from their documentation (`CommOp`'s field
//! docs, `check`'s rule per operation, NCCL's API notes), as the set of arguments a call
//! violates. `check_op` compares `check::op`'s verdict with it. Nothing here calls the checks:
//! a rule written twice the same wrong way is the only way the two can agree on a bug.

use oxccl_core::check::CheckCtx;
use oxccl_core::feature::Feature;
use oxccl_core::{CommOp, DataType, ReduceOp, Scalar};

/// What a call gets wrong: the arguments at fault (a set: the order the checks run in does not
/// matter) and whether it needs a feature the loaded library lacks.
#[derive(Debug, Default)]
pub struct Faults {
    /// Arguments at fault (may repeat).
    pub bad: Vec<&'static str>,
    /// A data type or reduction the library does not have.
    pub unsupported: bool,
}

impl Faults {
    /// Records `arg` as at fault when `wrong`.
    fn flag(&mut self, wrong: bool, arg: &'static str) {
        if wrong {
            self.bad.push(arg);
        }
    }

    /// Whether the call breaks no rule and needs nothing missing.
    pub fn none(&self) -> bool {
        self.bad.is_empty() && !self.unsupported
    }
}

/// A buffer in bytes, in `u128` so that no sum or product below can overflow.
#[derive(Clone, Copy)]
struct Span {
    addr: u128,
    bytes: u128,
}

impl Span {
    fn of(addr: usize, len: usize, dt: DataType) -> Span {
        Span {
            addr: addr as u128,
            bytes: len as u128 * dt.size() as u128,
        }
    }

    /// Shares at least one byte with `o` (an empty buffer shares none).
    fn overlaps(self, o: Span) -> bool {
        self.bytes > 0
            && o.bytes > 0
            && self.addr < o.addr + o.bytes
            && o.addr < self.addr + self.bytes
    }
}

/// A buffer may be used: at most `isize::MAX` bytes, a non-null address unless empty, no wrap
/// past the end of the address space, the address aligned to the element size (even empty).
fn usable(addr: usize, len: usize, dt: DataType) -> bool {
    let s = Span::of(addr, len, dt);
    s.bytes <= isize::MAX as u128
        && (addr != 0 || len == 0)
        && no_wrap(addr, len, dt)
        && s.addr.is_multiple_of(dt.size() as u128)
}

/// The address one past the buffer's end is itself an address (`usize`): a buffer ending at
/// the very top of the address space counts as wrapping.
fn no_wrap(addr: usize, len: usize, dt: DataType) -> bool {
    let s = Span::of(addr, len, dt);
    s.addr + s.bytes <= usize::MAX as u128
}

/// The data type exists in the loaded library, for what the call does with it: fp8 that is
/// only moved needs nothing (it travels as uint8 without the library's fp8); reduced, it needs
/// the library's fp8 (2.24.3+).
fn data_type(ctx: &CheckCtx<'_>, dt: DataType, reduced: bool, f: &mut Faults) {
    let needs = match dt {
        DataType::Bfloat16 => Some(Feature::Bfloat16),
        DataType::Float8E4M3 | DataType::Float8E5M2 if reduced => Some(Feature::Float8),
        _ => None,
    };
    if needs.is_some_and(|n| ctx.features.require(n).is_err()) {
        f.unsupported = true;
    }
}

/// The reduction exists, applies to the type, and its premul-sum factor is well formed.
fn reduction(ctx: &CheckCtx<'_>, dt: DataType, op: &ReduceOp, f: &mut Faults) {
    let needs = match op {
        ReduceOp::Avg => Some(Feature::Avg),
        ReduceOp::PreMulSum(_) => Some(Feature::PreMulSum),
        _ => None,
    };
    if needs.is_some_and(|n| ctx.features.require(n).is_err()) {
        f.unsupported = true;
    }
    // NCCL's single-rank path has no fp8 average.
    let fp8 = matches!(dt, DataType::Float8E4M3 | DataType::Float8E5M2);
    f.flag(matches!(op, ReduceOp::Avg) && fp8 && ctx.size == 1, "op");
    if let ReduceOp::PreMulSum(s) = op {
        // Premul-sum takes the four wide float types only.
        let float = matches!(
            dt,
            DataType::Float16 | DataType::Bfloat16 | DataType::Float32 | DataType::Float64
        );
        f.flag(!float, "op");
        let scalar_ok = match s {
            Scalar::Host(h) => h.dtype() == dt,
            // One element read on the device: non-null, aligned, not wrapping.
            Scalar::Device { addr } => {
                *addr != 0 && *addr % dt.size() == 0 && no_wrap(*addr, 1, dt)
            }
        };
        f.flag(!scalar_ok, "scalar");
    }
}

/// One count per rank whose sum fits in `usize`: the sum, else `None` (and `arg` at fault).
fn counts_sum(n: usize, counts: &[usize], arg: &'static str, f: &mut Faults) -> Option<usize> {
    let sum: u128 = counts.iter().map(|c| *c as u128).sum();
    if counts.len() != n || sum > usize::MAX as u128 {
        f.bad.push(arg);
        return None;
    }
    Some(sum as usize)
}

/// Every argument `op` gets wrong on `ctx`'s communicator.
pub fn faults(op: &CommOp<'_>, ctx: &CheckCtx<'_>) -> Faults {
    let mut f = Faults::default();
    // The communicator's own numbers: 1..=i32::MAX ranks, this rank among them.
    f.flag(ctx.size == 0 || ctx.size > i32::MAX as u32, "size");
    f.flag(ctx.rank >= ctx.size, "rank");
    if !f.bad.is_empty() {
        // Every rule below is relative to a sane communicator; the checks refuse first.
        return f;
    }
    let n = ctx.size as usize;
    let me = ctx.rank as usize;
    let root_at_fault = |root: u32, f: &mut Faults| f.flag(root >= ctx.size, "root");
    match *op {
        CommOp::AllReduce {
            send,
            recv,
            dtype,
            op,
        } => {
            data_type(ctx, dtype, true, &mut f);
            reduction(ctx, dtype, &op, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            // Same length; in place only as the very same memory.
            f.flag(recv.len != send.len, "recv");
            let (s, r) = (
                Span::of(send.addr, send.len, dtype),
                Span::of(recv.addr, recv.len, dtype),
            );
            f.flag(send.addr != recv.addr && s.overlaps(r), "recv");
        }
        CommOp::Broadcast {
            send,
            recv,
            dtype,
            root,
        } => {
            data_type(ctx, dtype, false, &mut f);
            root_at_fault(root, &mut f);
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            // `send` is read on the root only, and nowhere else looked at.
            if ctx.rank == root {
                f.flag(!usable(send.addr, send.len, dtype), "send");
                f.flag(send.len != recv.len, "send");
                let (s, r) = (
                    Span::of(send.addr, send.len, dtype),
                    Span::of(recv.addr, recv.len, dtype),
                );
                f.flag(send.addr != recv.addr && s.overlaps(r), "recv");
            }
        }
        CommOp::Reduce {
            send,
            recv,
            dtype,
            op,
            root,
        } => {
            data_type(ctx, dtype, true, &mut f);
            reduction(ctx, dtype, &op, &mut f);
            root_at_fault(root, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            // The root's output is as long as the input; elsewhere empty or as long.
            let off_root_empty = ctx.rank != root && recv.len == 0;
            f.flag(!off_root_empty && recv.len != send.len, "recv");
            let (s, r) = (
                Span::of(send.addr, send.len, dtype),
                Span::of(recv.addr, recv.len, dtype),
            );
            f.flag(send.addr != recv.addr && s.overlaps(r), "recv");
        }
        CommOp::AllGather { send, recv, dtype } => {
            data_type(ctx, dtype, false, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            let whole = send.len as u128 * n as u128;
            f.flag(whole > usize::MAX as u128, "send");
            f.flag(recv.len as u128 != whole, "recv");
            // In place: `send` is part `rank` of `recv`.
            let at = recv.addr as u128 + me as u128 * Span::of(0, send.len, dtype).bytes;
            let (s, r) = (
                Span::of(send.addr, send.len, dtype),
                Span::of(recv.addr, recv.len, dtype),
            );
            f.flag(send.addr as u128 != at && s.overlaps(r), "recv");
        }
        CommOp::ReduceScatter {
            send,
            recv,
            dtype,
            op,
        } => {
            data_type(ctx, dtype, true, &mut f);
            reduction(ctx, dtype, &op, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            let whole = recv.len as u128 * n as u128;
            f.flag(whole > usize::MAX as u128, "recv");
            f.flag(send.len as u128 != whole, "send");
            // In place: `recv` is part `rank` of `send`.
            let at = send.addr as u128 + me as u128 * Span::of(0, recv.len, dtype).bytes;
            let (s, r) = (
                Span::of(send.addr, send.len, dtype),
                Span::of(recv.addr, recv.len, dtype),
            );
            f.flag(recv.addr as u128 != at && s.overlaps(r), "recv");
        }
        CommOp::AllToAll { send, recv, dtype } => {
            data_type(ctx, dtype, false, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            // Equal lengths, `size` equal parts, never in place.
            f.flag(recv.len != send.len, "recv");
            f.flag(send.len % n != 0, "send");
            distinct(send.addr, send.len, recv.addr, recv.len, dtype, &mut f);
        }
        CommOp::AllToAllV {
            send,
            recv,
            dtype,
            send_counts,
            recv_counts,
        } => {
            data_type(ctx, dtype, false, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            // One count per rank each way, summing to the buffer's length.
            if let Some(s) = counts_sum(n, send_counts, "send_counts", &mut f) {
                f.flag(s != send.len, "send_counts");
            }
            if let Some(r) = counts_sum(n, recv_counts, "recv_counts", &mut f) {
                f.flag(r != recv.len, "recv_counts");
            }
            distinct(send.addr, send.len, recv.addr, recv.len, dtype, &mut f);
        }
        CommOp::Gather {
            send,
            recv,
            dtype,
            root,
        } => {
            data_type(ctx, dtype, false, &mut f);
            root_at_fault(root, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            if ctx.rank == root {
                // `size` parts of the send length, in memory of its own.
                let whole = send.len as u128 * n as u128;
                f.flag(whole > usize::MAX as u128, "send");
                f.flag(recv.len as u128 != whole, "recv");
                distinct(send.addr, send.len, recv.addr, recv.len, dtype, &mut f);
            } else {
                f.flag(recv.len != 0, "recv");
            }
        }
        CommOp::Scatter {
            send,
            recv,
            dtype,
            root,
        } => {
            data_type(ctx, dtype, false, &mut f);
            root_at_fault(root, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            if ctx.rank == root {
                let whole = recv.len as u128 * n as u128;
                f.flag(whole > usize::MAX as u128, "recv");
                f.flag(send.len as u128 != whole, "send");
                distinct(send.addr, send.len, recv.addr, recv.len, dtype, &mut f);
            } else {
                f.flag(send.len != 0, "send");
            }
        }
        CommOp::AllGatherV {
            send,
            recv,
            dtype,
            counts,
        } => {
            data_type(ctx, dtype, false, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            // This rank's count in, every rank's count out.
            if let Some(sum) = counts_sum(n, counts, "counts", &mut f) {
                f.flag(send.len != counts[me], "send");
                f.flag(recv.len != sum, "recv");
            }
            distinct(send.addr, send.len, recv.addr, recv.len, dtype, &mut f);
        }
        CommOp::ReduceScatterV {
            send,
            recv,
            dtype,
            op,
            counts,
        } => {
            data_type(ctx, dtype, true, &mut f);
            reduction(ctx, dtype, &op, &mut f);
            f.flag(!usable(send.addr, send.len, dtype), "send");
            f.flag(!usable(recv.addr, recv.len, dtype), "recv");
            // Every rank's count in, this rank's count out.
            if let Some(sum) = counts_sum(n, counts, "counts", &mut f) {
                f.flag(send.len != sum, "send");
                f.flag(recv.len != counts[me], "recv");
            }
            distinct(send.addr, send.len, recv.addr, recv.len, dtype, &mut f);
        }
        CommOp::Send { buf, dtype, peer } => {
            data_type(ctx, dtype, false, &mut f);
            // Any rank, itself included (inside a group).
            f.flag(peer >= ctx.size, "peer");
            f.flag(!usable(buf.addr, buf.len, dtype), "buf");
        }
        CommOp::Recv { buf, dtype, peer } => {
            data_type(ctx, dtype, false, &mut f);
            f.flag(peer >= ctx.size, "peer");
            f.flag(!usable(buf.addr, buf.len, dtype), "buf");
        }
        CommOp::Barrier => {}
    }
    f
}

/// Operations that cannot run in place: `recv` is at fault when it shares memory with `send`.
fn distinct(sa: usize, sl: usize, ra: usize, rl: usize, dt: DataType, f: &mut Faults) {
    f.flag(Span::of(sa, sl, dt).overlaps(Span::of(ra, rl, dt)), "recv");
}

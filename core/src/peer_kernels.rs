//! oxccl's own kernels for ranks that share a node: two all-reduces, one-shot (every rank
//! pushes its input into every peer's memory, then reduces all of them) and two-shot (a
//! reduce-scatter then an all-gather through peer memory), and an all-gather and a
//! reduce-scatter built the same way. This module says which calls they can run, which of them
//! runs each call, and how it is launched.
//!
//! Every decision here is a pure function of its arguments: ranks must decide alike (a rank
//! that runs a kernel while its peer calls NCCL leaves both waiting), so nothing reads a
//! clock, the environment or the device.

use crate::dtype::DataType;
use crate::error::Error;
use crate::op::CommOp;
use crate::reduce::{HostScalar, ReduceOp, Scalar};

pub mod follow;
pub mod record;

/// The most ranks a group the kernels serve may have (the kernels' per-rank arrays).
pub const MAX_RANKS: u32 = 8;

/// Data bytes one 16-byte line carries (the rest are its two flags).
pub const LINE_DATA_BYTES: u64 = 8;

/// Lines in one slot (a parity and a source rank) of a rank's peer memory: a one-shot call moves at most
/// this many lines, a two-shot call this many per rank.
pub const LINES_PER_SLOT: u64 = 32 * 1024;

/// Bytes of the control block at the front of each rank's peer memory (the failure flag, an
/// epoch per chunk of [`CHUNK_LINES`] for the one-phase kernels and for two-shot, and per block
/// the last launch that ran it, for [`follow`]ing).
pub const CONTROL_BYTES: u64 = 4096;

/// Lines in one chunk of a kernel's slots: a chunk is read and written by one block on every
/// rank and counts its own calls, so the blocks of a call never wait for each other. A launch
/// of several blocks has this many threads in each ([`geometry`]).
pub const CHUNK_LINES: u64 = MAX_THREADS as u64;

/// The bytes of one rank's peer memory for a group of `nranks`: the control block, then three
/// regions (two-shot's reduce and gather, the one-phase kernels') of two parities of one slot
/// per rank.
pub const fn peer_bytes(nranks: u32) -> u64 {
    CONTROL_BYTES + 3 * 2 * nranks as u64 * LINES_PER_SLOT * 16
}

/// The kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelAlgo {
    /// All-reduce: every rank pushes its whole input to every peer and reduces what it
    /// received: one NVLink crossing, the lowest latency.
    OneShot,
    /// All-reduce: each rank reduces one chunk and pushes the result to every peer: two
    /// crossings, a quarter of the traffic per link on four ranks.
    TwoShot,
    /// All-gather: every rank pushes its input to every peer, then copies what each pushed.
    AllGather,
    /// Reduce-scatter: every rank pushes each peer's chunk of its input to that peer, then
    /// reduces its own chunk from what it received.
    ReduceScatter,
}

impl KernelAlgo {
    /// The all-reduce kernels, in order.
    pub const ALL: [KernelAlgo; 2] = [KernelAlgo::OneShot, KernelAlgo::TwoShot];

    /// Every kernel, in the order of the loaded table ([`KernelAlgo::index`]).
    pub const EVERY: [KernelAlgo; 4] = [
        KernelAlgo::OneShot,
        KernelAlgo::TwoShot,
        KernelAlgo::AllGather,
        KernelAlgo::ReduceScatter,
    ];

    /// Its name (`one-shot`, `two-shot`, `all-gather`, `reduce-scatter`), as the environment
    /// and the tool spell it.
    pub const fn name(self) -> &'static str {
        match self {
            KernelAlgo::OneShot => "one-shot",
            KernelAlgo::TwoShot => "two-shot",
            KernelAlgo::AllGather => "all-gather",
            KernelAlgo::ReduceScatter => "reduce-scatter",
        }
    }

    /// The PTX entry's prefix.
    pub const fn entry(self) -> &'static str {
        match self {
            KernelAlgo::OneShot => "oxccl_one_shot_",
            KernelAlgo::TwoShot => "oxccl_two_shot_",
            KernelAlgo::AllGather => "oxccl_all_gather_",
            KernelAlgo::ReduceScatter => "oxccl_reduce_scatter_",
        }
    }

    /// Its place in [`KernelAlgo::EVERY`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The collective it runs.
    pub const fn coll(self) -> KernelColl {
        match self {
            KernelAlgo::OneShot | KernelAlgo::TwoShot => KernelColl::AllReduce,
            KernelAlgo::AllGather => KernelColl::AllGather,
            KernelAlgo::ReduceScatter => KernelColl::ReduceScatter,
        }
    }

    /// Lines each rank's kernel handles for a call of `lines` lines ([`KernelCall::lines`]).
    pub const fn lines_per_rank(self, lines: u64, nranks: u32) -> u64 {
        match self {
            KernelAlgo::TwoShot => lines.div_ceil(nranks as u64),
            // One-shot moves the whole input; the all-gather and the reduce-scatter one rank's
            // part (their calls count one rank's elements).
            KernelAlgo::OneShot | KernelAlgo::AllGather | KernelAlgo::ReduceScatter => lines,
        }
    }
}

/// The collectives the kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelColl {
    /// `all_reduce`: one-shot or two-shot.
    AllReduce,
    /// `all_gather`.
    AllGather,
    /// `reduce_scatter`.
    ReduceScatter,
}

/// Who runs the all-reduces of a group whose ranks share a node (`OXCCL_PEER_KERNELS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PeerPolicy {
    /// The kernels where the table says they win, NCCL elsewhere.
    #[default]
    Auto,
    /// NCCL always: no peer memory is made.
    Nccl,
    /// This kernel for every call of its collective it can hold, NCCL for the rest.
    Force(KernelAlgo),
}

impl PeerPolicy {
    /// The policy a name gives: `auto`, `nccl` (or `off`), or a kernel's name (`one-shot`,
    /// `two-shot`, `all-gather`, `reduce-scatter`); `None` for anything else.
    pub fn parse(s: &str) -> Option<PeerPolicy> {
        match s {
            "auto" => Some(PeerPolicy::Auto),
            "nccl" | "off" => Some(PeerPolicy::Nccl),
            _ => KernelAlgo::EVERY
                .into_iter()
                .find(|a| a.name() == s)
                .map(PeerPolicy::Force),
        }
    }

    /// Its name, as [`PeerPolicy::parse`] reads it.
    pub const fn name(self) -> &'static str {
        match self {
            PeerPolicy::Auto => "auto",
            PeerPolicy::Nccl => "nccl",
            PeerPolicy::Force(a) => a.name(),
        }
    }
}

/// The element types the kernels reduce, as their PTX entries name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelType {
    /// `float32`.
    F32,
    /// `float64`.
    F64,
    /// `float16`.
    F16,
    /// `bfloat16`.
    Bf16,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
}

impl KernelType {
    /// Every type, in the order of the kernels' table.
    pub const ALL: [KernelType; 6] = [
        KernelType::F32,
        KernelType::F64,
        KernelType::F16,
        KernelType::Bf16,
        KernelType::I32,
        KernelType::I64,
    ];

    /// The kernels' type for `d`; `None` where NCCL runs it.
    pub const fn of(d: DataType) -> Option<KernelType> {
        match d {
            DataType::Float32 => Some(KernelType::F32),
            DataType::Float64 => Some(KernelType::F64),
            DataType::Float16 => Some(KernelType::F16),
            DataType::Bfloat16 => Some(KernelType::Bf16),
            DataType::Int32 => Some(KernelType::I32),
            DataType::Int64 => Some(KernelType::I64),
            _ => None,
        }
    }

    /// The element type it stands for.
    pub const fn dtype(self) -> DataType {
        match self {
            KernelType::F32 => DataType::Float32,
            KernelType::F64 => DataType::Float64,
            KernelType::F16 => DataType::Float16,
            KernelType::Bf16 => DataType::Bfloat16,
            KernelType::I32 => DataType::Int32,
            KernelType::I64 => DataType::Int64,
        }
    }

    /// The PTX entry's suffix.
    pub const fn suffix(self) -> &'static str {
        match self {
            KernelType::F32 => "f32",
            KernelType::F64 => "f64",
            KernelType::F16 => "f16",
            KernelType::Bf16 => "bf16",
            KernelType::I32 => "i32",
            KernelType::I64 => "i64",
        }
    }

    /// Its index in [`KernelType::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Element size in bytes.
    pub const fn size(self) -> u64 {
        match self {
            KernelType::F16 | KernelType::Bf16 => 2,
            KernelType::F32 | KernelType::I32 => 4,
            KernelType::F64 | KernelType::I64 => 8,
        }
    }

    const fn is_float(self) -> bool {
        !matches!(self, KernelType::I32 | KernelType::I64)
    }
}

/// The reduction code the kernels take (peer_reduce.cu's `OP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum KernelRed {
    /// Sum.
    Sum = 0,
    /// Product.
    Prod = 1,
    /// Minimum.
    Min = 2,
    /// Maximum.
    Max = 3,
    /// Sum of each rank's input times its factor (premul-sum; average on floats, as 1/n).
    PreMul = 4,
    /// Sum divided by the number of ranks (average on integers).
    AvgInt = 5,
}

/// One collective as the kernels run it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelCall {
    /// The collective.
    pub coll: KernelColl,
    /// Element type.
    pub ty: KernelType,
    /// Reduction.
    pub red: KernelRed,
    /// This rank's factor (premul-sum, float average); 1 otherwise.
    pub scale: f64,
    /// Elements: the all-reduce's; one rank's part for the all-gather (its input) and the
    /// reduce-scatter (its output).
    pub count: u64,
    /// Input address (device).
    pub send: usize,
    /// Output address (device; may equal `send`).
    pub recv: usize,
}

impl KernelCall {
    /// The 16-byte lines of [`KernelCall::count`] elements.
    pub const fn lines(&self) -> u64 {
        (self.count * self.ty.size()).div_ceil(LINE_DATA_BYTES)
    }

    /// Bytes of [`KernelCall::count`] elements.
    pub const fn bytes(&self) -> u64 {
        self.count * self.ty.size()
    }

    /// The operation's size as the tables and `oxccl perf` count it on `nranks` ranks: the
    /// all-reduce's buffer, the all-gather's output, the reduce-scatter's input.
    pub const fn op_bytes(&self, nranks: u32) -> u64 {
        match self.coll {
            KernelColl::AllReduce => self.bytes(),
            KernelColl::AllGather | KernelColl::ReduceScatter => self.bytes() * nranks as u64,
        }
    }
}

/// The value of a premul-sum factor held on the host; `None` for a factor in device memory
/// (read when the collective runs: NCCL's).
fn host_factor(s: &Scalar) -> Option<f64> {
    match s {
        Scalar::Host(HostScalar::F32(v)) => Some(f64::from(*v)),
        Scalar::Host(HostScalar::F64(v)) => Some(*v),
        Scalar::Host(HostScalar::Bf16(b)) => Some(f64::from(f32::from_bits(u32::from(*b) << 16))),
        Scalar::Host(HostScalar::F16(b)) => Some(f16_value(*b)),
        Scalar::Device { .. } => None,
    }
}

/// An IEEE half's value.
fn f16_value(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let frac = f64::from(bits & 0x3ff);
    let mag = match exp {
        0 => frac * pow2(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * pow2(e - 15),
    };
    sign * mag
}

fn pow2(e: i32) -> f64 {
    f64::from_bits(((1023 + e) as u64) << 52)
}

/// The call the kernels would run for `op` on a group of `nranks`; `None` where only NCCL
/// can: not an all-reduce, all-gather or reduce-scatter, an empty one, a type or reduction
/// the kernels lack (unsigned and 8-bit types, a factor in device memory, premul-sum on
/// integers), a group of one or of more than [`MAX_RANKS`].
pub fn kernel_call(op: &CommOp<'_>, nranks: u32) -> Option<KernelCall> {
    if !(2..=MAX_RANKS).contains(&nranks) {
        return None;
    }
    // (collective, send, recv, elements of the call, type, reduction)
    let (coll, send, recv, count, dtype, red) = match op {
        CommOp::AllReduce {
            send,
            recv,
            dtype,
            op,
        } => (KernelColl::AllReduce, send, recv, send.len, dtype, Some(op)),
        CommOp::AllGather { send, recv, dtype } => {
            (KernelColl::AllGather, send, recv, send.len, dtype, None)
        }
        CommOp::ReduceScatter {
            send,
            recv,
            dtype,
            op,
        } => (
            KernelColl::ReduceScatter,
            send,
            recv,
            recv.len,
            dtype,
            Some(op),
        ),
        _ => return None,
    };
    if count == 0 {
        return None;
    }
    let ty = KernelType::of(*dtype)?;
    let (red, scale) = match red {
        None => (KernelRed::Sum, 1.0),
        Some(red) => reduction(red, ty, nranks)?,
    };
    Some(KernelCall {
        coll,
        ty,
        red,
        scale,
        count: count as u64,
        send: send.addr,
        recv: recv.addr,
    })
}

/// The kernels' code and this rank's factor for `red` on `ty`; `None` where NCCL reduces.
fn reduction(red: &ReduceOp, ty: KernelType, nranks: u32) -> Option<(KernelRed, f64)> {
    Some(match red {
        ReduceOp::Sum => (KernelRed::Sum, 1.0),
        ReduceOp::Prod => (KernelRed::Prod, 1.0),
        ReduceOp::Min => (KernelRed::Min, 1.0),
        ReduceOp::Max => (KernelRed::Max, 1.0),
        ReduceOp::Avg if ty.is_float() => (KernelRed::PreMul, 1.0 / f64::from(nranks)),
        ReduceOp::Avg => (KernelRed::AvgInt, 1.0),
        ReduceOp::PreMulSum(s) if ty.is_float() => (KernelRed::PreMul, host_factor(s)?),
        ReduceOp::PreMulSum(_) => return None,
    })
}

/// Up to which size (bytes, inclusive, as [`KernelCall::op_bytes`] counts them) each kernel
/// runs under [`PeerPolicy::Auto`], by group size; 0: NCCL. The defaults, and how they were
/// chosen: docs/BENCHMARKS.md; `oxccl tune` writes a machine's own (a tune table's
/// `kernels` lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerTable {
    /// One-shot up to this many bytes, by group size (index = ranks).
    pub one_shot_max: [u64; MAX_RANKS as usize + 1],
    /// Two-shot above the one-shot limit and up to this many bytes, by group size.
    pub two_shot_max: [u64; MAX_RANKS as usize + 1],
    /// The all-gather kernel up to this many bytes of output, by group size.
    pub all_gather_max: [u64; MAX_RANKS as usize + 1],
    /// The reduce-scatter kernel up to this many bytes of input, by group size.
    pub reduce_scatter_max: [u64; MAX_RANKS as usize + 1],
}

impl Default for PeerTable {
    fn default() -> PeerTable {
        const K: u64 = 1024;
        PeerTable {
            one_shot_max: [0, 0, 128 * K, 128 * K, 128 * K, 0, 0, 0, 0],
            two_shot_max: [0, 0, 256 * K, 256 * K, 512 * K, 0, 0, 0, 0],
            all_gather_max: [0, 0, 512 * K, 512 * K, 512 * K, 0, 0, 0, 0],
            reduce_scatter_max: [0, 0, 256 * K, 256 * K, 512 * K, 0, 0, 0, 0],
        }
    }
}

impl PeerTable {
    /// A fingerprint ranks compare before they use the table (FNV-1a over its limits).
    pub fn fingerprint(&self) -> u64 {
        let mut h = crate::fnv::Fnv::default();
        let limits = self
            .one_shot_max
            .iter()
            .chain(self.two_shot_max.iter())
            .chain(self.all_gather_max.iter())
            .chain(self.reduce_scatter_max.iter());
        for v in limits {
            h.bytes(&v.to_le_bytes());
        }
        h.finish()
    }
}

/// Whether `algo` can run `call` on `nranks` ranks: its lines fit the peer memory's slots.
pub const fn fits(algo: KernelAlgo, call: &KernelCall, nranks: u32) -> bool {
    algo.lines_per_rank(call.lines(), nranks) <= LINES_PER_SLOT
}

/// The kernel that runs `call` on a group of `nranks` under `policy`; `None`: NCCL runs it.
/// A forced kernel runs the calls of its own collective it can hold; the others go to NCCL.
pub fn choose(
    policy: PeerPolicy,
    table: &PeerTable,
    call: &KernelCall,
    nranks: u32,
) -> Option<KernelAlgo> {
    if !(2..=MAX_RANKS).contains(&nranks) {
        return None;
    }
    let bytes = call.op_bytes(nranks);
    let n = nranks as usize;
    let pick = match (policy, call.coll) {
        (PeerPolicy::Nccl, _) => return None,
        (PeerPolicy::Force(a), coll) if a.coll() == coll => a,
        (PeerPolicy::Force(_), _) => return None,
        (PeerPolicy::Auto, KernelColl::AllReduce) if bytes <= table.one_shot_max[n] => {
            KernelAlgo::OneShot
        }
        (PeerPolicy::Auto, KernelColl::AllReduce) if bytes <= table.two_shot_max[n] => {
            KernelAlgo::TwoShot
        }
        (PeerPolicy::Auto, KernelColl::AllGather) if bytes <= table.all_gather_max[n] => {
            KernelAlgo::AllGather
        }
        (PeerPolicy::Auto, KernelColl::ReduceScatter) if bytes <= table.reduce_scatter_max[n] => {
            KernelAlgo::ReduceScatter
        }
        (PeerPolicy::Auto, _) => return None,
    };
    fits(pick, call, nranks).then_some(pick)
}

/// Threads per block of a launch of several blocks (the kernels' `__launch_bounds__` allow
/// 512): blocks of 256 lines spread a call over more SMs, which takes 8–128 KiB faster than
/// blocks of 512.
pub const MAX_THREADS: u32 = 256;

/// Blocks a launch may use: every block must be resident at once (a block waiting for a peer
/// must not hold back the block that would write to it), so far fewer than any GPU's SMs.
pub const MAX_BLOCKS: u32 = 64;

/// The launch shape (blocks, threads per block) for `lines` lines per rank: one line per
/// thread up to [`MAX_BLOCKS`] × [`MAX_THREADS`], whole warps, at least one.
pub fn geometry(lines: u64) -> (u32, u32) {
    let per_block = u64::from(MAX_THREADS);
    let blocks = lines.div_ceil(per_block).clamp(1, u64::from(MAX_BLOCKS)) as u32;
    let threads = if blocks > 1 {
        MAX_THREADS
    } else {
        (lines.div_ceil(32) * 32).clamp(32, per_block) as u32
    };
    (blocks, threads)
}

/// What a kernel that gave up wrote to its rank's status block (host memory the kernel
/// writes): why, which ranks it waited for in vain, and the failed call's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelStatus {
    /// 0: no failure; [`KernelStatus::ABORTED`]; [`KernelStatus::TIMED_OUT`].
    pub cause: u32,
    /// The ranks that did not arrive, a bit per rank.
    pub missing: u32,
    /// The failed call's epoch, from 0: its number among the group's calls of its kind
    /// (two-shot, or the other kernels) that reached the lines it waited for (every call
    /// reaches the first [`CHUNK_LINES`]).
    pub epoch: u32,
}

impl KernelStatus {
    /// The group's abort flag was set while the kernel waited.
    pub const ABORTED: u32 = 1;
    /// A peer did not arrive within the time bound.
    pub const TIMED_OUT: u32 = 2;

    /// The error the failed call reports, `None` when nothing failed: [`Error::Aborted`], or
    /// [`Error::Timeout`] naming the call and the ranks that did not arrive.
    pub fn error(&self, timeout_ms: u64) -> Option<Error> {
        let missing = RankList(self.missing);
        match self.cause {
            0 => None,
            KernelStatus::ABORTED => Some(Error::Aborted {
                reason: crate::text!(
                    "peer kernel call #{} stopped by the abort while waiting for ranks {missing}",
                    self.epoch
                ),
            }),
            KernelStatus::TIMED_OUT => Some(Error::Timeout {
                what: crate::text!(
                    "peer kernel call #{}: ranks {missing} did not arrive",
                    self.epoch
                ),
                after_ms: timeout_ms,
            }),
            other => Some(Error::Remote {
                detail: crate::text!(
                    "peer kernel call #{} ended with unknown status {other}",
                    self.epoch
                ),
            }),
        }
    }
}

/// A set of ranks, a bit each, shown as `[1, 3]`.
struct RankList(u32);

impl core::fmt::Display for RankList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("[")?;
        let mut first = true;
        for r in (0..32).filter(|r| self.0 >> r & 1 == 1) {
            if !first {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
            first = false;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests;

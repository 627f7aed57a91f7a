//! The vocabulary `perf` and `check` share: the collectives with nccl-tests' names, their
//! buffer shapes and bus-bandwidth factors, data types and reduce operators as flags, and the
//! size sweep. Pure functions, unit-tested here.

use clap::ValueEnum;
use oxccl::{DataType, ReduceOp};

/// A collective as nccl-tests names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Coll {
    /// Every rank gets the reduction of every rank's buffer.
    #[value(name = "all_reduce", alias = "all-reduce")]
    AllReduce,
    /// Every rank gets every rank's part, by rank.
    #[value(name = "all_gather", alias = "all-gather")]
    AllGather,
    /// Rank r gets part r of the reduction.
    #[value(name = "reduce_scatter", alias = "reduce-scatter")]
    ReduceScatter,
    /// Every rank gets the root's buffer.
    Broadcast,
    /// The root gets the reduction.
    Reduce,
    /// Part p of every rank goes to rank p.
    Alltoall,
    /// The root gets every rank's part.
    Gather,
    /// Rank r gets part r of the root's buffer.
    Scatter,
    /// Rank r sends to r+1 and receives from r-1 (a ring).
    Sendrecv,
    /// Every collective above, in that order.
    All,
}

impl Coll {
    /// The nine collectives, in nccl-tests' order.
    pub const EACH: [Coll; 9] = [
        Coll::AllReduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::Broadcast,
        Coll::Reduce,
        Coll::Alltoall,
        Coll::Gather,
        Coll::Scatter,
        Coll::Sendrecv,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::AllGather => "all_gather",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::Alltoall => "alltoall",
            Coll::Gather => "gather",
            Coll::Scatter => "scatter",
            Coll::Sendrecv => "sendrecv",
            Coll::All => "all",
        }
    }

    /// Whether the collective takes a reduce operator (the redop column).
    pub fn reduces(self) -> bool {
        matches!(self, Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce)
    }

    /// Whether the collective has a root (the root column).
    pub fn rooted(self) -> bool {
        matches!(
            self,
            Coll::Broadcast | Coll::Reduce | Coll::Gather | Coll::Scatter
        )
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks (doc/PERFORMANCE.md): busbw = algbw ×
    /// factor, so that busbw compares with the hardware's link speed at any rank count.
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = f64::from(n.max(1));
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::AllGather | Coll::ReduceScatter | Coll::Alltoall => (n - 1.0) / n,
            Coll::Gather | Coll::Scatter => (n - 1.0) / n,
            Coll::Broadcast | Coll::Reduce | Coll::Sendrecv | Coll::All => 1.0,
        }
    }

    /// Element counts (send, recv) of rank `rank` for a `count`-element operation on `n`
    /// ranks with root `root`, as nccl-tests sizes them: `count` is the whole array (for the
    /// gathers and scatters the sum of the parts, a multiple of `n`).
    pub fn shape(self, count: usize, n: u32, rank: u32, root: u32) -> (usize, usize) {
        let part = count / n.max(1) as usize;
        let at_root = rank == root;
        match self {
            Coll::AllReduce | Coll::Broadcast | Coll::Sendrecv | Coll::All => (count, count),
            Coll::Reduce => (count, count),
            Coll::AllGather => (part, part * n as usize),
            Coll::ReduceScatter => (part * n as usize, part),
            Coll::Alltoall => (part * n as usize, part * n as usize),
            Coll::Gather => (part, if at_root { part * n as usize } else { 0 }),
            Coll::Scatter => (if at_root { part * n as usize } else { 0 }, part),
        }
    }

    /// The element count nccl-tests runs for `bytes` of `elem`-byte elements on `n` ranks:
    /// rounded down so that every rank's part is whole.
    pub fn count_for(self, bytes: usize, elem: usize, n: u32) -> usize {
        let count = bytes / elem.max(1);
        match self {
            Coll::AllGather
            | Coll::ReduceScatter
            | Coll::Alltoall
            | Coll::Gather
            | Coll::Scatter => count - count % n.max(1) as usize,
            _ => count,
        }
    }
}

/// The collectives a list on the command line names (`all` expands), each once, in order.
pub fn expand(list: &[Coll]) -> Vec<Coll> {
    let mut out = Vec::new();
    for c in list {
        let add: &[Coll] = if *c == Coll::All {
            &Coll::EACH
        } else {
            std::slice::from_ref(c)
        };
        for a in add {
            if !out.contains(a) {
                out.push(*a);
            }
        }
    }
    out
}

/// A data type flag, with nccl-tests' names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    /// int8
    Int8,
    /// uint8
    Uint8,
    /// int32
    Int32,
    /// uint32
    Uint32,
    /// int64
    Int64,
    /// uint64
    Uint64,
    /// float16 (half)
    #[value(alias = "half")]
    Float16,
    /// float32 (float)
    #[value(alias = "float")]
    Float32,
    /// float64 (double)
    #[value(alias = "double")]
    Float64,
    /// bfloat16
    Bfloat16,
    /// float8 e4m3
    #[value(name = "f8e4m3")]
    F8e4m3,
    /// float8 e5m2
    #[value(name = "f8e5m2")]
    F8e5m2,
}

impl Dtype {
    /// Every type, in NCCL's order.
    pub const ALL: [Dtype; 12] = [
        Dtype::Int8,
        Dtype::Uint8,
        Dtype::Int32,
        Dtype::Uint32,
        Dtype::Int64,
        Dtype::Uint64,
        Dtype::Float16,
        Dtype::Float32,
        Dtype::Float64,
        Dtype::Bfloat16,
        Dtype::F8e4m3,
        Dtype::F8e5m2,
    ];

    /// The NCCL data type.
    pub fn data_type(self) -> DataType {
        DataType::ALL[Dtype::ALL.iter().position(|d| *d == self).unwrap_or(7)]
    }

    /// The name in reports (nccl-tests' spelling where it has one).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Int32 => "int32",
            Dtype::Uint32 => "uint32",
            Dtype::Int64 => "int64",
            Dtype::Uint64 => "uint64",
            Dtype::Float16 => "half",
            Dtype::Float32 => "float",
            Dtype::Float64 => "double",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::F8e4m3 => "f8e4m3",
            Dtype::F8e5m2 => "f8e5m2",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.data_type().size()
    }

    /// Whether the type is a floating-point one.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::Float16
                | Dtype::Float32
                | Dtype::Float64
                | Dtype::Bfloat16
                | Dtype::F8e4m3
                | Dtype::F8e5m2
        )
    }
}

/// A reduce operator flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Redop {
    /// sum
    Sum,
    /// product
    Prod,
    /// minimum
    Min,
    /// maximum
    Max,
    /// average (sum / ranks)
    Avg,
}

impl Redop {
    /// Every operator.
    pub const ALL: [Redop; 5] = [Redop::Sum, Redop::Prod, Redop::Min, Redop::Max, Redop::Avg];

    /// The operator for the library.
    pub fn reduce_op(self) -> ReduceOp {
        match self {
            Redop::Sum => ReduceOp::Sum,
            Redop::Prod => ReduceOp::Prod,
            Redop::Min => ReduceOp::Min,
            Redop::Max => ReduceOp::Max,
            Redop::Avg => ReduceOp::Avg,
        }
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Redop::Sum => "sum",
            Redop::Prod => "prod",
            Redop::Min => "min",
            Redop::Max => "max",
            Redop::Avg => "avg",
        }
    }
}

/// The sizes of a sweep from `min` to `max` bytes: × `factor` each step, or + `incr` when
/// `incr` is non-zero (nccl-tests' -f and -i). Empty when the arguments make no sweep.
pub fn sweep(min: usize, max: usize, factor: usize, incr: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut s = min;
    while s <= max && out.len() < 4096 {
        out.push(s);
        let next = if incr > 0 {
            s.saturating_add(incr)
        } else {
            s.saturating_mul(factor.max(2))
        };
        if next == s {
            break;
        }
        s = next;
    }
    out
}

/// `text` as a byte count: digits with an optional K, M or G suffix (powers of 1024, as
/// nccl-tests reads -b and -e), `B` or `iB` allowed after it.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("a size such as 8, 64K, 1M or 1G, got `{text}`"))?;
    n.checked_mul(1usize << shift)
        .ok_or_else(|| format!("a size below 2^64 bytes, got `{text}`"))
}

/// `bytes` as nccl-tests-like short text: 8B, 64KiB, 1MiB.
pub fn human(bytes: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (u, name) in UNITS {
        if bytes >= u && bytes.is_multiple_of(u) {
            return format!("{}{name}", bytes / u);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(Coll::AllReduce.bus_factor(2), 1.0);
        assert_eq!(Coll::AllReduce.bus_factor(4), 1.5);
        assert_eq!(Coll::AllGather.bus_factor(4), 0.75);
        assert_eq!(Coll::ReduceScatter.bus_factor(8), 0.875);
        assert_eq!(Coll::Broadcast.bus_factor(8), 1.0);
        assert_eq!(Coll::Sendrecv.bus_factor(8), 1.0);
        assert_eq!(Coll::Alltoall.bus_factor(2), 0.5);
        assert_eq!(Coll::AllReduce.bus_factor(1), 0.0);
    }

    #[test]
    fn shapes_and_counts() {
        assert_eq!(Coll::AllGather.shape(8, 4, 1, 0), (2, 8));
        assert_eq!(Coll::ReduceScatter.shape(8, 4, 1, 0), (8, 2));
        assert_eq!(Coll::Gather.shape(8, 4, 0, 0), (2, 8));
        assert_eq!(Coll::Gather.shape(8, 4, 1, 0), (2, 0));
        assert_eq!(Coll::Scatter.shape(8, 4, 1, 0), (0, 2));
        assert_eq!(Coll::AllGather.count_for(40, 4, 4), 8);
        assert_eq!(Coll::AllReduce.count_for(40, 4, 4), 10);
    }

    #[test]
    fn sweeps_and_sizes() {
        assert_eq!(sweep(8, 64, 2, 0), vec![8, 16, 32, 64]);
        assert_eq!(sweep(8, 20, 2, 4), vec![8, 12, 16, 20]);
        assert_eq!(sweep(0, 10, 2, 0), vec![0]);
        assert!(sweep(64, 8, 2, 0).is_empty());
        assert_eq!(parse_bytes("64K"), Ok(65536));
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("8"), Ok(8));
        assert!(parse_bytes("x").is_err());
        assert_eq!(human(1 << 20), "1MiB");
        assert_eq!(human(12), "12B");
        assert_eq!(expand(&[Coll::Broadcast, Coll::All]).len(), 9);
        assert_eq!(Dtype::Bfloat16.data_type(), DataType::Bfloat16);
        assert_eq!(Dtype::F8e5m2.data_type(), DataType::Float8E5M2);
    }
}

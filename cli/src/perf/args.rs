//! The options of the measuring commands, `oxccl perf`, `oxccl tune` and `oxccl ping-pong`
//! (nccl-tests' flags where they make sense): the groups they share, then each command's own.

use super::backend::BackendSel;
use crate::ops::{self, Coll, Dtype, Redop};
use clap::{Args, ValueEnum};

/// The sizes and iterations of a measurement (nccl-tests' -b -e -f -i -n -w).
#[derive(Args, Clone, Debug)]
pub struct SweepArgs {
    /// Smallest size (bytes; K, M, G suffixes). Default: 8.
    #[arg(short = 'b', long = "minbytes", value_parser = ops::parse_bytes)]
    pub min_bytes: Option<usize>,
    /// Largest size. Default: 1M on the mock, 128M on NCCL.
    #[arg(short = 'e', long = "maxbytes", value_parser = ops::parse_bytes)]
    pub max_bytes: Option<usize>,
    /// Multiply the size by this each step.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..))]
    pub factor: u64,
    /// Add this many bytes each step instead (overrides -f).
    #[arg(short = 'i', long = "stepbytes", value_parser = ops::parse_bytes)]
    pub incr: Option<usize>,
    /// Timed iterations per size. Default: 20 (5 on the mock).
    #[arg(short = 'n', long = "iters", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub iters: Option<u64>,
    /// Untimed warm-up iterations. Default: 5 (1 on the mock).
    #[arg(short = 'w', long = "warmup_iters", value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub warmup: Option<u64>,
}

/// Where a measurement runs: the backend, its library, and the ranks of this process.
#[derive(Args, Clone, Debug)]
pub struct WorldArgs {
    /// GPUs (ranks) driven by this process, a thread each. Default: every visible GPU (2 on
    /// the mock). Under torchrun, srun or mpirun: 1 per process.
    #[arg(short = 'g', long = "ngpus", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub gpus: Option<u32>,
    /// Backend.
    #[arg(long, value_enum, default_value_t = BackendSel::Auto)]
    pub backend: BackendSel,
    /// NCCL library to load (instead of the search).
    #[arg(long, value_name = "PATH")]
    pub library: Option<std::path::PathBuf>,
}

/// What each timed operation is: the collectives, their element type, reduce operator and
/// root, and whether the results are checked.
#[derive(Args, Clone, Debug)]
pub struct CaseArgs {
    /// Collectives to run (`all` for the nine).
    #[arg(value_enum, default_values_t = [Coll::AllReduce])]
    pub colls: Vec<Coll>,
    /// Element type.
    #[arg(short = 'd', long = "datatype", value_enum, default_value_t = Dtype::Float32)]
    pub dtype: Dtype,
    /// Reduce operator.
    #[arg(short = 'o', long = "op", value_enum, default_value_t = Redop::Sum)]
    pub redop: Redop,
    /// Root rank of rooted collectives.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: u32,
    /// Check results against the host reference once per size and layer (1, as nccl-tests) or
    /// not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
}

/// Which layers `oxccl perf` times, as `--layer` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayerChoice {
    /// NCCL through the loaded function pointer.
    Raw,
    /// `Comm::issue`.
    Comm,
    /// `ProcessGroup` (c10d's API).
    Pg,
    /// The three side by side.
    All,
}

/// Who runs the collectives of the comm and pg layers that oxccl's kernels have (the kernels
/// or NCCL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KernelsSel {
    /// oxccl's kernels where the table says they win, NCCL elsewhere.
    Auto,
    /// NCCL always.
    Nccl,
    /// The one-shot kernel wherever it fits.
    OneShot,
    /// The two-shot kernel wherever it fits.
    TwoShot,
    /// The all-gather kernel for every all_gather it holds (all-reduces on NCCL).
    AllGather,
    /// The reduce-scatter kernel for every reduce_scatter it holds (all-reduces on NCCL).
    ReduceScatter,
}

impl KernelsSel {
    /// The policy it stands for.
    pub fn policy(self) -> oxccl::core::peer_kernels::PeerPolicy {
        use oxccl::core::peer_kernels::{KernelAlgo, PeerPolicy};
        match self {
            KernelsSel::Auto => PeerPolicy::Auto,
            KernelsSel::Nccl => PeerPolicy::Nccl,
            KernelsSel::OneShot => PeerPolicy::Force(KernelAlgo::OneShot),
            KernelsSel::TwoShot => PeerPolicy::Force(KernelAlgo::TwoShot),
            KernelsSel::AllGather => PeerPolicy::Force(KernelAlgo::AllGather),
            KernelsSel::ReduceScatter => PeerPolicy::Force(KernelAlgo::ReduceScatter),
        }
    }
}

/// Options of `oxccl perf` (nccl-tests' flags where they make sense).
#[derive(Args, Clone, Debug)]
#[command(after_help = "Examples:
  oxccl perf                                   all_reduce 8 B..1 MiB (mock: 2 ranks)
  oxccl perf all -b 8 -e 128M -f 2 -g 2 --layer all --svg perf.svg
  oxccl perf all_reduce all_gather -d bfloat16 -c 1 --json > perf.json
  oxccl perf all_reduce --layer pg --tuned oxccl.tune   the pg layer under `oxccl tune`'s table
  torchrun --nproc-per-node 2 --no-python oxccl perf all_reduce -b 8 -e 1G")]
pub struct PerfArgs {
    /// -b -e -f -i -n -w.
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// The collectives, -d -o -r -c.
    #[command(flatten)]
    pub case: CaseArgs,
    /// -g, --backend, --library.
    #[command(flatten)]
    pub world: WorldArgs,
    /// Blocking communicators (1) or nonblocking ones (0), for the raw and comm layers.
    #[arg(short = 'z', long = "blocking", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub blocking: u8,
    /// CUDA-graph launches: capture the timed loop into a graph and launch it this many
    /// times (0: no graphs). Every layer on NCCL; the pg layer on the mock world too (its
    /// streams record and replay).
    #[arg(short = 'G', long = "cudagraph", default_value_t = 0)]
    pub graphs: u32,
    /// Buffers: 0 plain, 1 registered (ncclCommRegister), 2 symmetric windows (ncclMemAlloc and
    /// ncclCommWindowRegister, NCCL 2.27+). Raw and comm layers by address; the pg layer on
    /// CommBuf buffers in a group whose tune table says that mode (the mock world too; with
    /// -G, registered before each capture).
    #[arg(short = 'R', long = "registration", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub registration: u8,
    /// Time the pg layer under this tune table (a file `oxccl tune` wrote), on CommBuf
    /// buffers: the check that the table is at least as fast as the best of -R 0, 1, 2.
    #[arg(long, value_name = "FILE", conflicts_with = "registration")]
    pub tuned: Option<std::path::PathBuf>,
    /// Layers to time side by side.
    #[arg(long, value_enum, default_value_t = LayerChoice::All)]
    pub layer: LayerChoice,
    /// Who runs the all-reduces, all-gathers and reduce-scatters of the comm and pg layers on
    /// NCCL: oxccl's kernels (on ranks of one node) or NCCL; the raw layer is always NCCL.
    /// Default: `OXCCL_PEER_KERNELS`, else auto.
    #[arg(long, value_enum, value_name = "WHO")]
    pub peer_kernels: Option<KernelsSel>,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file (the table still goes to stdout).
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<std::path::PathBuf>,
    /// Write busbw and latency against size as an SVG chart.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,
    /// Where stderr is not a terminal (a log, a pipe, a launcher's capture): a progress line
    /// there at the first size to end after each SECS seconds (0: after every size). On a
    /// terminal the line is redrawn instead, unless the table's rows stream to it.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub progress_every: u64,
    /// Test hook: every check sees one wrong element (the exit code must be 1).
    #[arg(long, hide = true)]
    pub inject_error: bool,
}

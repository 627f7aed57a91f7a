//! The options of `oxccl tune`: perf's sweep, world and case options, where its table goes,
//! and how many rounds the modes alternate in.

use crate::perf::args::{CaseArgs, SweepArgs, WorldArgs};
use clap::Args;

/// Options of `oxccl tune`.
#[derive(Args, Clone, Debug)]
#[command(
    mut_arg("check", |a| a.help("Check each mode's results once per size (1: a mode with wrong results is never chosen) or not (0)")),
    after_help = "Examples:
  oxccl tune all -g 2 -b 8 -e 128M -n 40 --out oxccl.tune
  oxccl perf all -g 2 -b 8 -e 128M --layer pg --tuned oxccl.tune   the pg layer under it
  torchrun --nproc-per-node 2 --no-python oxccl tune all_reduce all_gather -e 16M"
)]
pub struct TuneArgs {
    /// -b -e -f -i -n -w.
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// The collectives, -d -o -r -c.
    #[command(flatten)]
    pub case: CaseArgs,
    /// -g, --backend, --library.
    #[command(flatten)]
    pub world: WorldArgs,
    /// Blocking communicators (1) or nonblocking ones (0).
    #[arg(short = 'z', long = "blocking", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub blocking: u8,
    /// Rounds each size's iterations are split into, the modes alternating in each.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Where the table is written.
    #[arg(long, value_name = "FILE", default_value = "oxccl.tune")]
    pub out: std::path::PathBuf,
    /// One JSON object on stdout instead of the table's text (the file is written alike).
    #[arg(long)]
    pub json: bool,
}

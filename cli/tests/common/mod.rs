//! Set-up the CLI's test files share (each includes this file as `mod common;`): the `oxccl`
//! tool run as a child and the collectives of `oxccl perf`. What they share with the library's
//! tests (launchers' variables, ranks as processes) is the package `oxccl-testkit`.
#![allow(dead_code)]

use std::process::{Command, Output};

/// Every collective of `oxccl perf`, in the order `perf all` runs them.
pub const ALL_COLLECTIVES: [&str; 9] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "gather",
    "scatter",
    "sendrecv",
];

/// Runs the `oxccl` tool with `args` and waits for it.
pub fn oxccl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(args)
        .output()
        .expect("oxccl runs")
}

//! The bodies of oxccl's fuzz targets, one module each, each with `fuzz(data: &[u8])`.
//!
//! The cargo-fuzz binaries in `fuzz/fuzz_targets/` call these, and the library's test
//! `oxccl/tests/fuzz_corpus.rs` replays `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` through them ([`TARGETS`]), so CI exercises every target
//! without cargo-fuzz. Both take this package as a dependency by path; it is not published.
//! Several targets compare the code under test against a small reference model written in
//! the target itself.

pub mod admission;
pub mod check_model;
pub mod check_op;
pub mod comm_life;
pub mod comm_life_model;
mod comm_life_split;
mod comm_life_world;
pub mod elf;
pub mod env;
pub mod group_call;
pub mod lifecycle;
pub mod peer_kernels;
pub mod pg;
pub mod recorder;
pub mod store;
pub mod survivors;
pub mod text;
pub mod verdicts;
pub mod watchdog;
pub mod wire;
pub mod work;

/// A target's body: one input, any bytes; panics on a finding.
pub type Body = fn(&[u8]);

/// Every target: its name (the folder of its corpus) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("admission", admission::fuzz),
    ("check_op", check_op::fuzz),
    ("comm_life", comm_life::fuzz),
    ("elf", elf::fuzz),
    ("env", env::fuzz),
    ("group_call", group_call::fuzz),
    ("lifecycle", lifecycle::fuzz),
    ("peer_kernels", peer_kernels::fuzz),
    ("pg", pg::fuzz),
    ("recorder", recorder::fuzz),
    ("store", store::fuzz),
    ("survivors", survivors::fuzz),
    ("text", text::fuzz),
    ("verdicts", verdicts::fuzz),
    ("watchdog", watchdog::fuzz),
    ("wire", wire::fuzz),
    ("work", work::fuzz),
];

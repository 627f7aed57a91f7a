//! oxccl-rules: the process-group layer's decisions as pure functions over plain data.
//!
//! `#![no_std]` with `alloc`: nothing here waits, spawns or reads a clock or the environment;
//! callers pass what they observed and get back what to do. So every rule is tested and
//! fuzzed without threads, a store or a GPU. Each module is named after the part of the
//! `oxccl` package that runs it (its README has the table): [`watchdog`], [`recorder`],
//! [`membership`] (who belongs to a group), [`elastic`] (going on after a lost rank), [`launch`], [`tune`], [`env`](mod@env).
//!
//! The feature `std` (off by default) adds the one part that touches the system: reading the
//! tune table from its file (`tune::file`).
#![no_std]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod elastic;
pub mod env;
pub mod launch;
pub mod membership;
pub mod recorder;
pub mod tune;
pub mod watchdog;

pub use env::{BackendChoice, EnvConfig, ErrorHandling};
pub use launch::{HostList, HostName, LaunchInfo, Launcher};
pub use recorder::{FlightRecorder, PgConfig, TensorMeta, TraceEntry, TraceRecord, TraceState};

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

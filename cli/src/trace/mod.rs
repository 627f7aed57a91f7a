//! `oxccl trace`: the command ([`run`]) and the analysis of flight-recorder dumps it prints
//! ([`analysis`]).

pub mod analysis;
mod command;

pub use command::{run, TraceArgs};

//! oxccl: NCCL for Rust.

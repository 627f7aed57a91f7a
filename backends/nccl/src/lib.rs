//! oxccl-nccl (being built).

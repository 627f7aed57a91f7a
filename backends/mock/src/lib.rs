//! oxccl-mock (being built).

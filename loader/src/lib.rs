//! oxccl-loader (being built).

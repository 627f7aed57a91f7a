//! The device a communicator runs on.

/// A device ordinal (a CUDA device for NCCL; a label for the mock world).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Device(pub u32);

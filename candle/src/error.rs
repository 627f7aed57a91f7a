//! One error for both sides: a candle program `?`s oxccl-candle's calls into its
//! `candle_core::Result`, and candle's errors into this crate's [`Result`].

use candle_core::{DType, DeviceLocation};

/// What went wrong in a collective on candle tensors, or in the layers built on them.
// oxccl's error is large on purpose (bounded inline text, see the workspace's lints); only the
// Ok path is hot.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The process group refused or failed the operation (its variant says what to do).
    #[error("oxccl: {0}")]
    Oxccl(#[from] oxccl::Error),
    /// A tensor operation failed in candle.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// `arg` has a dtype that NCCL has no type for (candle's I16, F6, F4, F8E8M0), or that this
    /// operation refuses.
    #[error("`{arg}`: dtype {dtype:?} {why}")]
    DType {
        /// The argument.
        arg: &'static str,
        /// Its dtype.
        dtype: DType,
        /// Why it is refused.
        why: &'static str,
    },
    /// `arg` is on a device this group cannot reach (a CUDA tensor in a build without the
    /// `cuda` feature or on a mock group, or a GPU other than the group's).
    #[error("`{arg}`: a tensor on {got:?}, where {expected}")]
    Device {
        /// The argument.
        arg: &'static str,
        /// Where it is.
        got: DeviceLocation,
        /// Where it must be.
        expected: String,
    },
    /// `arg`'s shape is wrong here (on this rank alone).
    #[error("`{arg}`: shape {got:?}, expected {expected}")]
    Shape {
        /// The argument.
        arg: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// What was expected.
        expected: String,
    },
    /// `arg` disagrees across ranks: every rank must pass the same dtype and shape.
    #[error("`{arg}`: this rank has {ours}, global rank {rank} has {theirs}")]
    Mismatch {
        /// The argument.
        arg: &'static str,
        /// The first rank that disagrees with this one.
        rank: u32,
        /// This rank's dtype and shape.
        ours: String,
        /// That rank's.
        theirs: String,
    },
    /// `arg` is out of range (a dimension, a rank, a size that does not split evenly).
    #[error("`{arg}`: {why}")]
    Invalid {
        /// The argument.
        arg: &'static str,
        /// Why.
        why: String,
    },
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;

impl From<Error> for candle_core::Error {
    /// Candle's wrapped error, keeping the message (and a backtrace where candle takes one).
    fn from(e: Error) -> candle_core::Error {
        match e {
            Error::Candle(c) => c,
            other => candle_core::Error::wrap(other),
        }
    }
}

impl From<Error> for oxccl::Error {
    /// For `?` inside `oxccl::launch::WithProcessGroup::run`, which returns oxccl's error: an
    /// oxccl error comes back as it was, the rest as an invalid argument naming theirs.
    fn from(e: Error) -> oxccl::Error {
        match e {
            Error::Oxccl(e) => e,
            Error::Candle(c) => oxccl::Error::invalid("tensor", format_args!("candle: {c}")),
            Error::DType { arg, .. }
            | Error::Device { arg, .. }
            | Error::Shape { arg, .. }
            | Error::Mismatch { arg, .. }
            | Error::Invalid { arg, .. } => oxccl::Error::invalid(arg, format_args!("{e}")),
        }
    }
}

impl Error {
    pub(crate) fn invalid(arg: &'static str, why: impl Into<String>) -> Error {
        Error::Invalid {
            arg,
            why: why.into(),
        }
    }
}

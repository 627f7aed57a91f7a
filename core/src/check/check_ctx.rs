//! What the checks know of the communicator, and the checks of its own numbers and of a rank
//! argument.

use crate::error::{Error, Result};
use crate::feature::FeatureSet;

/// What the checks need to know of the communicator.
#[derive(Debug, Clone, Copy)]
pub struct CheckCtx<'f> {
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub size: u32,
    /// What the loaded library can do.
    pub features: &'f FeatureSet,
}

impl CheckCtx<'_> {
    /// `Ok` when the communicator's own numbers are sane: `1 <= size <= i32::MAX`, `rank < size`.
    pub fn validate(&self) -> Result<()> {
        if self.size == 0 || self.size > i32::MAX as u32 {
            return Err(Error::invalid(
                "size",
                format_args!("1..={}, got {}", i32::MAX, self.size),
            ));
        }
        if self.rank >= self.size {
            return Err(Error::invalid(
                "rank",
                format_args!("a rank below {}, got {}", self.size, self.rank),
            ));
        }
        Ok(())
    }
}

/// A root (or peer) is a rank of the communicator.
pub fn rank_arg(ctx: &CheckCtx<'_>, arg: &'static str, r: u32) -> Result<()> {
    if r >= ctx.size {
        return Err(Error::invalid(
            arg,
            format_args!("a rank below {}, got {r}", ctx.size),
        ));
    }
    Ok(())
}

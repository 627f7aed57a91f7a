//! The check of a shrink: which ranks a communicator leaves out.

use super::check_ctx::{rank_arg, CheckCtx};
use crate::error::{Error, Result};

/// `exclude`, the ranks a shrink of `ctx`'s communicator leaves out: ranks of the
/// communicator, each once, not this rank (a rank never takes part in the call that leaves it
/// out: the survivors call it), and fewer than all of them; at least one (NCCL refuses an
/// empty list: a communicator of the same ranks is made anew, or split with one color).
pub fn shrink(ctx: &CheckCtx<'_>, exclude: &[u32]) -> Result<()> {
    if exclude.is_empty() {
        return Err(Error::invalid(
            "exclude",
            format_args!("at least one rank to leave out, got none"),
        ));
    }
    for (i, &r) in exclude.iter().enumerate() {
        rank_arg(ctx, "exclude", r)?;
        if exclude[..i].contains(&r) {
            return Err(Error::invalid(
                "exclude",
                format_args!("each rank at most once, got {r} twice"),
            ));
        }
        if r == ctx.rank {
            return Err(Error::invalid(
                "exclude",
                format_args!(
                    "ranks other than the caller's own ({r}): the ranks that stay call shrink"
                ),
            ));
        }
    }
    // Distinct ranks below `size`, the caller's not among them: at most size - 1, so one
    // rank (the caller) always stays.
    Ok(())
}

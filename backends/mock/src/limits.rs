//! What one mock communicator allows, and assumes unless told otherwise: the most ranks, the
//! NCCL release it imitates, how long a blocking init waits for the other ranks.

use oxccl_core::{Error, Result, Version};
use std::time::Duration;

/// The most ranks one mock communicator may have (a world, an `init_rank` size). Every rank
/// lives in this process with its own state (about a kilobyte, and each collective keeps a
/// slot per rank), so a size near `i32::MAX` would exhaust memory instead of failing; larger
/// sizes are refused with [`Error::InvalidArgument`] on `"n"` (a world) or `"size"` (a backend).
pub const MAX_RANKS: u32 = 1 << 17;

/// `Ok` when `size` ranks fit in one process (see [`MAX_RANKS`]); otherwise an error on `arg`.
pub(crate) fn check_size(arg: &'static str, size: u32) -> Result<()> {
    if size > MAX_RANKS {
        return Err(Error::invalid(
            arg,
            format_args!("at most {MAX_RANKS} ranks in one mock communicator, got {size}"),
        ));
    }
    Ok(())
}

/// The NCCL release a world imitates unless told otherwise.
pub const DEFAULT_VERSION: Version = Version::new(2, 28, 3);

/// How long a blocking `init_rank` waits for the other ranks by default.
pub const DEFAULT_INIT_TIMEOUT: Duration = Duration::from_secs(60);

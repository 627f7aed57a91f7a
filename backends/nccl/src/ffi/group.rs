//! Groups: `ncclGroupStart` and `ncclGroupEnd`.

use super::symbol::{base, Code};
use oxccl_core::Result;
use oxccl_loader::Api;

/// `ncclGroupStart`.
pub(crate) fn group_start(api: &Api) -> Result<Code> {
    let f = base(api.group_start, "ncclGroupStart")?;
    // SAFETY: no arguments; NCCL keeps the group depth per thread, so any thread may open one.
    Ok(unsafe { f() })
}

/// `ncclGroupEnd`.
pub(crate) fn group_end(api: &Api) -> Result<Code> {
    let f = base(api.group_end, "ncclGroupEnd")?;
    // SAFETY: no arguments; an end without a start is refused by NCCL with a code.
    Ok(unsafe { f() })
}

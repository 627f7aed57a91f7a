//! The checks of a grow: the size it grows to, and the rank a joiner asks for.

use super::check_ctx::CheckCtx;
use crate::error::{Error, Result};
use crate::id::UniqueId;

/// A grow of `ctx`'s communicator to `size` ranks: more than it has, within NCCL's `int`.
pub fn grow(ctx: &CheckCtx<'_>, size: u32) -> Result<()> {
    if size <= ctx.size || i32::try_from(size).is_err() {
        return Err(Error::invalid(
            "size",
            format_args!(
                "more ranks than the communicator's {} and at most {}, got {size}",
                ctx.size,
                i32::MAX
            ),
        ));
    }
    Ok(())
}

/// A joiner of a grow to `size` ranks asking for `rank` with `id`: a rank below `size`, a
/// size within NCCL's `int`, and an id that is not all zeros (one the root made).
pub fn join_grown(id: &UniqueId, rank: u32, size: u32) -> Result<()> {
    if size == 0 || i32::try_from(size).is_err() {
        return Err(Error::invalid(
            "size",
            format_args!("1..={} ranks, got {size}", i32::MAX),
        ));
    }
    if rank >= size {
        return Err(Error::invalid(
            "rank",
            format_args!("a rank below the grown size {size}, got {rank}"),
        ));
    }
    if id.as_bytes().iter().all(|b| *b == 0) {
        return Err(Error::invalid(
            "id",
            format_args!("the id the running root made (grow_id), got all zeros"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feature::FeatureSet;
    use crate::version::Version;

    #[test]
    fn grows_only_up_and_joiners_only_within() {
        let f = FeatureSet::for_version(Version::new(2, 32, 3));
        let ctx = CheckCtx {
            rank: 0,
            size: 3,
            features: &f,
        };
        assert!(grow(&ctx, 4).is_ok());
        for bad in [0, 3, 2, u32::MAX] {
            assert!(matches!(
                grow(&ctx, bad),
                Err(Error::InvalidArgument { arg: "size", .. })
            ));
        }
        let mut id = UniqueId::from_bytes(&[1u8; 128]).unwrap();
        assert!(join_grown(&id, 3, 4).is_ok());
        assert!(matches!(
            join_grown(&id, 4, 4),
            Err(Error::InvalidArgument { arg: "rank", .. })
        ));
        id = UniqueId::from_bytes(&[0u8; 128]).unwrap();
        assert!(matches!(
            join_grown(&id, 3, 4),
            Err(Error::InvalidArgument { arg: "id", .. })
        ));
    }
}

//! Who belongs to a process group, and how its communicator comes to be: pure rules, so the
//! process group's decisions are tested and fuzzed without threads or GPUs.

use crate::error::{Error, Result};

/// A group's member list is valid for a world of `world` ranks: each rank below `world`, no
/// rank twice. (The list's order is the group-rank order the caller chose; c10d sorts it.)
pub fn check_ranks(world: u32, ranks: &[u32]) -> Result<()> {
    for (i, &r) in ranks.iter().enumerate() {
        if r >= world {
            return Err(Error::invalid(
                "ranks",
                format_args!("global ranks below the world size {world}, got {r}"),
            ));
        }
        if ranks[..i].contains(&r) {
            return Err(Error::invalid(
                "ranks",
                format_args!("each rank at most once, got {r} twice"),
            ));
        }
    }
    Ok(())
}

/// The group rank of global rank `global` in a group of `ranks`, or `None` when it is not a
/// member.
pub fn group_rank(ranks: &[u32], global: u32) -> Option<u32> {
    ranks.iter().position(|&r| r == global).map(|i| i as u32)
}

/// The split color of a group: a hash of its member list (FNV-1a over the ranks), kept below
/// `i32::MAX` as NCCL requires of a color. Equal lists give equal colors on every rank.
pub fn split_color(ranks: &[u32]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for r in ranks {
        for b in r.to_le_bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h & 0x7fff_ffff
}

/// The contiguous blocks of `size` ranks that [`new_subgroups`](crate) forms from a world of
/// `world` ranks: block `i` is `i*size .. (i+1)*size`. `size` must divide `world`.
pub fn subgroup_block(world: u32, size: u32, rank: u32) -> Result<core::ops::Range<u32>> {
    if size == 0 || size > world || world % size != 0 {
        return Err(Error::invalid(
            "group_size",
            format_args!("a positive divisor of the world size {world}, got {size}"),
        ));
    }
    let start = rank / size * size;
    Ok(start..start + size)
}

/// An enumeration of subgroups is valid: each group's ranks are valid, and no rank appears
/// in two groups.
pub fn check_enumeration<'a>(
    world: u32,
    groups: impl Iterator<Item = &'a [u32]> + Clone,
) -> Result<()> {
    for (i, g) in groups.clone().enumerate() {
        check_ranks(world, g)?;
        for other in groups.clone().take(i) {
            if let Some(r) = g.iter().find(|r| other.contains(r)) {
                return Err(Error::invalid(
                    "ranks_per_subgroup",
                    format_args!("each rank in at most one subgroup, got rank {r} in two"),
                ));
            }
        }
    }
    Ok(())
}

/// How a subgroup's communicator is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommPlan {
    /// Split from the parent's communicator at once, while every parent rank is in
    /// `new_group` (eager: a device was bound at init and communicators are blocking).
    SplitNow,
    /// Split from the parent's communicator at the first operation on the group (every parent
    /// rank is a member, so every one of them reaches that operation).
    SplitOnFirstUse,
    /// A new communicator of the members alone, its id exchanged through the store, at the
    /// first operation on the group.
    InitOnFirstUse,
}

/// The plan for a subgroup's communicator. A split needs the parent's communicator and the
/// library's split; eager creation needs a bound device and blocking communicators (a
/// nonblocking init is waited out by the first operation, so it stays lazy, as in c10d).
/// A lazy split is only safe when every parent rank is a member: a split is collective over
/// the parent, and non-members never reach the group's first operation.
pub fn comm_plan(
    can_split: bool,
    device_bound: bool,
    nonblocking: bool,
    parent_size: u32,
    group_size: u32,
) -> CommPlan {
    match (can_split, device_bound && !nonblocking) {
        (true, true) => CommPlan::SplitNow,
        (true, false) if group_size == parent_size => CommPlan::SplitOnFirstUse,
        _ => CommPlan::InitOnFirstUse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_checked() {
        assert!(check_ranks(4, &[0, 3]).is_ok());
        assert!(matches!(
            check_ranks(4, &[0, 4]),
            Err(Error::InvalidArgument { arg: "ranks", .. })
        ));
        assert!(matches!(
            check_ranks(4, &[1, 1]),
            Err(Error::InvalidArgument { arg: "ranks", .. })
        ));
    }

    #[test]
    fn group_rank_is_the_index() {
        assert_eq!(group_rank(&[1, 3], 3), Some(1));
        assert_eq!(group_rank(&[1, 3], 0), None);
    }

    #[test]
    fn colors_differ_by_list_and_fit_i32() {
        assert_eq!(split_color(&[0, 1]), split_color(&[0, 1]));
        assert_ne!(split_color(&[0, 1]), split_color(&[2, 3]));
        assert!(split_color(&[u32::MAX; 9]) <= i32::MAX as u32);
    }

    #[test]
    fn blocks_divide_the_world() {
        assert_eq!(subgroup_block(8, 4, 5).unwrap(), 4..8);
        assert_eq!(subgroup_block(8, 8, 5).unwrap(), 0..8);
        for bad in [0, 3, 9] {
            assert!(matches!(
                subgroup_block(8, bad, 0),
                Err(Error::InvalidArgument {
                    arg: "group_size",
                    ..
                })
            ));
        }
    }

    #[test]
    fn enumeration_refuses_a_rank_in_two_groups() {
        let ok: [&[u32]; 2] = [&[0, 1], &[2, 3]];
        assert!(check_enumeration(4, ok.iter().copied()).is_ok());
        let bad: [&[u32]; 2] = [&[0, 1], &[1, 2]];
        assert!(matches!(
            check_enumeration(4, bad.iter().copied()),
            Err(Error::InvalidArgument {
                arg: "ranks_per_subgroup",
                ..
            })
        ));
    }

    #[test]
    fn plans() {
        assert_eq!(comm_plan(true, true, false, 4, 1), CommPlan::SplitNow);
        assert_eq!(comm_plan(true, true, true, 4, 4), CommPlan::SplitOnFirstUse);
        assert_eq!(
            comm_plan(true, false, false, 4, 4),
            CommPlan::SplitOnFirstUse
        );
        assert_eq!(
            comm_plan(true, false, false, 4, 2),
            CommPlan::InitOnFirstUse
        );
        assert_eq!(
            comm_plan(false, true, false, 4, 4),
            CommPlan::InitOnFirstUse
        );
    }
}

//! Who belongs to a process group, and how its communicator comes to be: pure rules, so the
//! process group's decisions are tested and fuzzed without threads or GPUs.

use core::fmt;
use oxccl_core::error::{Error, Result};

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
    if size == 0 || size > world || !world.is_multiple_of(size) {
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

/// The members whose arrival marks are missing before a collective creation (an init, a
/// split): `ranks[i]` (participant `i`'s global rank) for each `i` not marked in `marked`
/// (a participant past `marked`'s end counts as missing), in participant order.
pub fn missing_arrivals<'a>(
    ranks: &'a [u32],
    marked: &'a [bool],
) -> impl Iterator<Item = u32> + 'a {
    ranks
        .iter()
        .enumerate()
        .filter(move |(i, _)| !marked.get(*i).copied().unwrap_or(false))
        .map(|(_, &r)| r)
}

/// Why a participant's wait for a collective creation ended in a timeout.
#[derive(Clone, Copy)]
pub enum ArrivalStall<'a> {
    /// These global ranks never marked their arrival (not empty).
    Missing(&'a [u32]),
    /// Every rank arrived; the backend did not complete the creation in time (its own words).
    BackendLate(&'a str),
    /// Every rank arrived, but after this participant's deadline.
    Late,
    /// The store could not say who is missing (its error).
    Unreadable(&'a dyn fmt::Display),
}

impl<'a> ArrivalStall<'a> {
    /// The stall from what the store said of the marks (`Ok`: the missing ranks) and, when
    /// the backend gave up, its words: missing ranks first, then the backend, then the clock.
    pub fn of(
        missing: core::result::Result<&'a [u32], &'a dyn fmt::Display>,
        backend: Option<&'a str>,
    ) -> Self {
        match (missing, backend) {
            (Ok(m), _) if !m.is_empty() => ArrivalStall::Missing(m),
            (Ok(_), Some(said)) => ArrivalStall::BackendLate(said),
            (Ok(_), None) => ArrivalStall::Late,
            (Err(read), _) => ArrivalStall::Unreadable(read),
        }
    }
}

/// What a participant's timeout on a collective creation says.
#[derive(Debug, Clone, Copy)]
pub struct ArrivalTimeout<'a> {
    /// What was being created ("the init of group 3 (tp)").
    pub what: &'a str,
    /// This participant's global rank.
    pub me: u32,
    /// The creation's key prefix in the store (its marks are `PREFIX/arrived/<group rank>`).
    pub prefix: &'a str,
    /// Participant 0's global rank (it had more to do: the unique id).
    pub first: Option<u32>,
    /// Said instead of where the marks are when `first` is among the missing.
    pub first_note: Option<&'a str>,
}

/// Writes the text of a creation's timeout: who never arrived first (ranks folded, see
/// [`crate::watchdog::desync::write_ranks`]), else that the backend or the clock gave up.
pub fn write_arrival_timeout(
    out: &mut impl fmt::Write,
    t: &ArrivalTimeout<'_>,
    stall: ArrivalStall<'_>,
) -> fmt::Result {
    let what = t.what;
    let me = t.me;
    match stall {
        ArrivalStall::Missing(m) if !m.is_empty() => {
            out.write_str("ranks ")?;
            crate::watchdog::desync::write_ranks(out, m)?;
            let first_missing = t.first.is_some_and(|r| m.contains(&r));
            match t.first_note.filter(|_| first_missing) {
                Some(note) => write!(out, " never arrived at {what}; {note}"),
                None => write!(
                    out,
                    " never arrived at {what} (seen by rank {me}; store marks `{}/arrived/<group rank>`)",
                    t.prefix
                ),
            }
        }
        ArrivalStall::BackendLate(said) => write!(
            out,
            "every rank arrived at {what}; the backend did not complete it in time on rank {me}: {said}"
        ),
        ArrivalStall::Missing(_) | ArrivalStall::Late => {
            write!(out, "{what}: every rank arrived, but too late for rank {me}")
        }
        ArrivalStall::Unreadable(read) => write!(
            out,
            "{what} did not complete on rank {me}; the store cannot say who is missing: {read}"
        ),
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

    #[test]
    fn missing_arrivals_are_the_unmarked_members() {
        let ranks = [4, 0, 7, 2];
        let got: heapless::Vec<u32, 4> = missing_arrivals(&ranks, &[true, false, true]).collect();
        assert_eq!(got.as_slice(), &[0, 2], "unmarked, and past the marks' end");
        assert_eq!(missing_arrivals(&ranks, &[true; 4]).count(), 0);
        assert_eq!(missing_arrivals(&[], &[false]).count(), 0);
    }

    #[test]
    fn arrival_timeouts_say_who_or_why() {
        let t = ArrivalTimeout {
            what: "the init of group 3 (tp)",
            me: 1,
            prefix: "oxccl/pg/3/init/0",
            first: Some(0),
            first_note: Some("rank 1 waited for the unique id"),
        };
        let show = |stall| {
            let mut s = heapless::String::<256>::new();
            write_arrival_timeout(&mut s, &t, stall).unwrap();
            s
        };
        let err: &dyn fmt::Display = &"connection reset";
        assert_eq!(
            show(ArrivalStall::of(Ok(&[2, 3]), Some("late"))),
            "ranks [2, 3] never arrived at the init of group 3 (tp) (seen by rank 1; store marks `oxccl/pg/3/init/0/arrived/<group rank>`)"
        );
        assert_eq!(
            show(ArrivalStall::of(Ok(&[0, 5]), None)),
            "ranks [0, 5] never arrived at the init of group 3 (tp); rank 1 waited for the unique id"
        );
        assert_eq!(
            show(ArrivalStall::of(Ok(&[]), Some("NCCL timed out"))),
            "every rank arrived at the init of group 3 (tp); the backend did not complete it in time on rank 1: NCCL timed out"
        );
        assert_eq!(
            show(ArrivalStall::of(Ok(&[]), None)),
            "the init of group 3 (tp): every rank arrived, but too late for rank 1"
        );
        assert_eq!(
            show(ArrivalStall::of(Err(err), Some("x"))),
            "the init of group 3 (tp) did not complete on rank 1; the store cannot say who is missing: connection reset"
        );
    }
}

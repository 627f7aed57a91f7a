//! Who may join a running elastic world: the verdict on each join ticket, decided once by
//! the members' admission and read alike by every member and every joiner.
//!
//! A joiner names the global rank it asks for. It is admitted only when that rank is a rank
//! of the world (below the size the world was made with), not a member of the world the
//! decision starts from, and not asked for by an earlier ticket of the same decision. A
//! ticket whose joiner never wrote its rank is void. Everything else is refused with the
//! reason, so no process is told it joined when it did not.

use oxccl_core::error::{Error, Result};

/// The verdict on one join ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TicketVerdict {
    /// The ticket's rank joins at the decision's epoch.
    Admitted,
    /// The rank is a member of the running world already.
    Member,
    /// An earlier ticket of the same decision asked for this rank: `first` was admitted.
    Twice {
        /// The ticket that took the rank.
        first: u64,
    },
    /// The rank is not a rank of the world (not below its size).
    OutsideWorld,
    /// The ticket's joiner never wrote a rank (it died between taking and writing it).
    Void,
}

/// Encoded size of one verdict.
pub const VERDICT_LEN: usize = 9;

impl TicketVerdict {
    /// Writes the verdict as [`VERDICT_LEN`] bytes: a code, then the first ticket of a
    /// [`TicketVerdict::Twice`] (little-endian; zero otherwise).
    pub fn encode(self) -> [u8; VERDICT_LEN] {
        let (code, arg) = match self {
            TicketVerdict::Admitted => (0u8, 0u64),
            TicketVerdict::Member => (1, 0),
            TicketVerdict::Twice { first } => (2, first),
            TicketVerdict::OutsideWorld => (3, 0),
            TicketVerdict::Void => (4, 0),
        };
        let mut out = [0; VERDICT_LEN];
        out[0] = code;
        out[1..].copy_from_slice(&arg.to_le_bytes());
        out
    }

    /// Reads a verdict written by [`TicketVerdict::encode`]; `None` for anything else.
    pub fn decode(bytes: &[u8]) -> Option<TicketVerdict> {
        let bytes: &[u8; VERDICT_LEN] = bytes.try_into().ok()?;
        let arg = u64::from_le_bytes(bytes[1..].try_into().ok()?);
        let zero = arg == 0;
        match bytes[0] {
            0 if zero => Some(TicketVerdict::Admitted),
            1 if zero => Some(TicketVerdict::Member),
            2 => Some(TicketVerdict::Twice { first: arg }),
            3 if zero => Some(TicketVerdict::OutsideWorld),
            4 if zero => Some(TicketVerdict::Void),
            _ => None,
        }
    }

    /// The joiner's error for a refused ticket `ticket` asking for `rank`, in a world of
    /// `size` whose members were `members` at `epoch`; `Ok` when admitted.
    pub fn result(
        self,
        ticket: u64,
        rank: u32,
        size: u32,
        members: &[u32],
        epoch: u64,
    ) -> Result<()> {
        match self {
            TicketVerdict::Admitted => Ok(()),
            TicketVerdict::Member => Err(member(rank, members, epoch)),
            TicketVerdict::Twice { first } => Err(Error::invalid(
                "rank",
                format_args!(
                    "a rank no other process asks for; ticket {first} took rank {rank} in the same admission (this was ticket {ticket})"
                ),
            )),
            TicketVerdict::OutsideWorld => Err(outside(rank, size)),
            TicketVerdict::Void => Err(Error::invalid(
                "rank",
                format_args!("a rank written under ticket {ticket} before the members admitted it"),
            )),
        }
    }
}

/// The refusal of a join as `rank`, a member of the world at `epoch`.
pub fn member(rank: u32, members: &[u32], epoch: u64) -> Error {
    Error::invalid(
        "rank",
        format_args!(
            "a rank that is not a member of the running world; rank {rank} is one of its members {members:?} at epoch {epoch} (a replacement joins once the members have decided it lost)"
        ),
    )
}

/// The refusal of a join as `rank` in a world of `size`.
pub fn outside(rank: u32, size: u32) -> Error {
    Error::invalid(
        "rank",
        format_args!("a rank of the running world, below its size {size}, got {rank}"),
    )
}

/// Whether a join as `rank` may take a ticket now, in a world of `size` whose members are
/// `members` at `epoch`: the same rules as [`judge`], checked before the joiner counts itself.
pub fn check_join(rank: u32, size: u32, members: &[u32], epoch: u64) -> Result<()> {
    if rank >= size {
        return Err(outside(rank, size));
    }
    if members.contains(&rank) {
        return Err(member(rank, members, epoch));
    }
    Ok(())
}

/// Judges `tickets` (ticket number and the rank its joiner wrote, `None` when it wrote none),
/// in ticket order, against a world of `size` whose members are `members`: writes each
/// ticket's verdict into `out` (which holds `tickets.len()`) and returns how many were
/// admitted. The admitted ranks join in ticket order after the members.
pub fn judge(
    size: u32,
    members: &[u32],
    tickets: &[(u64, Option<u32>)],
    out: &mut [TicketVerdict],
) -> Result<usize> {
    if out.len() < tickets.len() {
        return Err(Error::invalid(
            "out",
            format_args!("room for {} verdicts, got {}", tickets.len(), out.len()),
        ));
    }
    let mut admitted = 0;
    for (i, &(_, rank)) in tickets.iter().enumerate() {
        out[i] = match rank {
            None => TicketVerdict::Void,
            Some(r) if r >= size => TicketVerdict::OutsideWorld,
            Some(r) if members.contains(&r) => TicketVerdict::Member,
            Some(r) => match tickets[..i]
                .iter()
                .zip(out.iter())
                .find(|((_, q), v)| *q == Some(r) && **v == TicketVerdict::Admitted)
            {
                Some(((first, _), _)) => TicketVerdict::Twice { first: *first },
                None => {
                    admitted += 1;
                    TicketVerdict::Admitted
                }
            },
        };
    }
    Ok(admitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_twice_outsiders_and_void_tickets_are_refused() {
        let tickets = [
            (4, Some(2)),
            (5, Some(1)),
            (6, Some(2)),
            (7, None),
            (8, Some(9)),
            (9, Some(3)),
        ];
        let mut out = [TicketVerdict::Void; 6];
        let n = judge(4, &[0, 1, 3], &tickets, &mut out).unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            out,
            [
                TicketVerdict::Admitted,
                TicketVerdict::Member,
                TicketVerdict::Twice { first: 4 },
                TicketVerdict::Void,
                TicketVerdict::OutsideWorld,
                TicketVerdict::Member,
            ]
        );
        assert!(judge(4, &[], &tickets, &mut out[..2]).is_err());
    }

    #[test]
    fn verdicts_round_trip_and_garbage_is_refused() {
        for v in [
            TicketVerdict::Admitted,
            TicketVerdict::Member,
            TicketVerdict::Twice { first: u64::MAX },
            TicketVerdict::OutsideWorld,
            TicketVerdict::Void,
        ] {
            assert_eq!(TicketVerdict::decode(&v.encode()), Some(v));
        }
        assert_eq!(TicketVerdict::decode(&[0; 8]), None);
        assert_eq!(TicketVerdict::decode(&[9; VERDICT_LEN]), None);
        let mut b = TicketVerdict::Member.encode();
        b[3] = 1;
        assert_eq!(TicketVerdict::decode(&b), None);
    }

    #[test]
    fn a_join_is_checked_before_it_counts_itself() {
        assert!(check_join(2, 4, &[0, 1, 3], 1).is_ok());
        let e = check_join(1, 4, &[0, 1, 3], 1).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { arg: "rank", expected } if expected.contains("one of its members [0, 1, 3] at epoch 1")),
            "{e}"
        );
        let e = check_join(4, 4, &[0], 0).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { arg: "rank", expected } if expected.contains("below its size 4, got 4")),
            "{e}"
        );
        let e = TicketVerdict::Twice { first: 3 }
            .result(5, 2, 4, &[0], 0)
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { arg: "rank", expected } if expected.contains("ticket 3 took rank 2")),
            "{e}"
        );
    }
}

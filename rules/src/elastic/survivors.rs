//! How the survivors of a lost rank agree on who goes on: pure rules over what each of them
//! reads from the store, so that every survivor ends with the same members whatever the order
//! of arrivals and deaths (fuzzed against a model: `fuzz-bodies/src/survivors.rs`).
//!
//! A group's members at view `v` are a list of global ranks in group order. When a member
//! sees a peer lost (a timeout, a remote error, the watchdog's verdict):
//!
//! 1. it arrives at view `v`: adds 1 to the view's arrival counter in the store and writes its
//!    rank under the number the counter returned (so every arrival is kept, in order);
//! 2. once every member arrived, or the agreement window passed since its own arrival
//!    ([`ready_to_propose`]), it proposes view `v + 1`: the members that arrived, in group
//!    order ([`propose`]), written ([`encode`]) with compare-and-set on the view's decision
//!    key, so the first proposal stands and nobody overwrites it;
//! 3. every member reads that decision ([`decode`]) and goes on with its new group rank, or
//!    stops when the decision left it out or answers another view ([`verdict`]): it comes
//!    back only by joining a later view.
//!
//! A proposer arrived before it proposed, so a decision is never empty; a rank that died
//! before arriving is never in one; a rank that arrives after the decision is refused, not
//! merged. Timing decides only when a proposal is made, never what the members read.

use oxccl_core::error::{Error, Result};

/// The first bytes of an encoded decision.
const MAGIC: &[u8; 4] = b"OXV1";
/// Bytes before the ranks: magic, view, count.
const HEADER: usize = 4 + 8 + 4;

/// Whether a member that arrived at a view should propose the next one: all `members` arrived
/// (`arrived`: how many of them, [`propose`]'s count; ranks of no member never count), or
/// `waited_ms` since its own arrival reached `window_ms`.
pub fn ready_to_propose(members: usize, arrived: usize, waited_ms: u64, window_ms: u64) -> bool {
    arrived >= members || waited_ms >= window_ms
}

/// The members of the next view: those of `members` that `arrived` says arrived, in group
/// order, written to the front of `out`; returns how many. `out` must hold `members.len()`
/// ranks. (`arrived` is asked once per member, so a caller with a set answers in linear time.)
pub fn propose(members: &[u32], arrived: impl Fn(u32) -> bool, out: &mut [u32]) -> Result<usize> {
    if out.len() < members.len() {
        return Err(Error::invalid(
            "out",
            format_args!("room for {} ranks, got {}", members.len(), out.len()),
        ));
    }
    let mut n = 0;
    for &m in members {
        if arrived(m) {
            out[n] = m;
            n += 1;
        }
    }
    Ok(n)
}

/// Bytes [`encode`] writes for `ranks` members.
pub const fn encoded_len(ranks: usize) -> usize {
    HEADER + 4 * ranks
}

/// Writes the decision "view `view` has the members `ranks`" to the front of `out` (at least
/// [`encoded_len`] bytes); returns how many bytes.
pub fn encode(view: u64, ranks: &[u32], out: &mut [u8]) -> Result<usize> {
    let len = encoded_len(ranks.len());
    let Ok(count) = u32::try_from(ranks.len()) else {
        return Err(Error::invalid(
            "ranks",
            format_args!("at most {} ranks, got {}", u32::MAX, ranks.len()),
        ));
    };
    if out.len() < len {
        return Err(Error::invalid(
            "out",
            format_args!("room for {len} bytes, got {}", out.len()),
        ));
    }
    out[..4].copy_from_slice(MAGIC);
    out[4..12].copy_from_slice(&view.to_le_bytes());
    out[12..16].copy_from_slice(&count.to_le_bytes());
    for (i, r) in ranks.iter().enumerate() {
        out[HEADER + 4 * i..HEADER + 4 * i + 4].copy_from_slice(&r.to_le_bytes());
    }
    Ok(len)
}

/// A decision read back: its view and the members it names, written to the front of `out`
/// (returned as how many). Anything but what [`encode`] writes, a rank named twice, or more
/// ranks than `out` holds is refused.
pub fn decode(bytes: &[u8], out: &mut [u32]) -> Result<(u64, usize)> {
    let bad = |what: core::fmt::Arguments<'_>| Err(Error::invalid("decision", what));
    if bytes.len() < HEADER || &bytes[..4] != MAGIC {
        return bad(format_args!(
            "an encoded view decision, got {} bytes",
            bytes.len()
        ));
    }
    let view = u64::from_le_bytes(bytes[4..12].try_into().unwrap_or([0; 8]));
    let count = u32::from_le_bytes(bytes[12..16].try_into().unwrap_or([0; 4])) as usize;
    if bytes.len() != encoded_len(count) {
        return bad(format_args!(
            "{} bytes for {count} ranks, got {}",
            encoded_len(count),
            bytes.len()
        ));
    }
    if count > out.len() {
        return bad(format_args!("at most {} ranks, got {count}", out.len()));
    }
    let read = |out: &mut [u32]| {
        for (i, slot) in out[..count].iter_mut().enumerate() {
            let at = HEADER + 4 * i;
            *slot = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        }
    };
    // A rank twice is found in sorted order (n log n, no allocation: a decision may name
    // 100 000 ranks); the order written is then read again.
    read(out);
    out[..count].sort_unstable();
    if let Some(w) = out[..count].windows(2).find(|w| w[0] == w[1]) {
        let r = w[0];
        return bad(format_args!("each rank once, got {r} twice"));
    }
    read(out);
    Ok((view, count))
}

/// What a member does once it read the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It goes on at the next view as group rank `rank` of `size`.
    Member {
        /// Its group rank in the next view.
        rank: u32,
        /// The next view's number of members.
        size: u32,
    },
    /// The decision left it out (it arrived after the decision was made): it stops, and may
    /// join a later view as a new rank.
    LeftOut,
    /// The decision answers another view than the one it expected (it is behind): it stops.
    Stale {
        /// The view the decision is for.
        decided: u64,
    },
}

/// The verdict for global rank `me`, which expects view `expected`, of the decision naming
/// view `view` with the members `ranks`.
pub fn verdict(expected: u64, view: u64, ranks: &[u32], me: u32) -> Verdict {
    if view != expected {
        return Verdict::Stale { decided: view };
    }
    match ranks.iter().position(|&r| r == me) {
        Some(i) => Verdict::Member {
            rank: i as u32,
            size: ranks.len() as u32,
        },
        None => Verdict::LeftOut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposals_keep_group_order_and_only_members_that_arrived() {
        let members = [7, 3, 9, 1];
        let mut out = [0; 4];
        // Arrival order, a repeat and an outsider (rank 5) do not matter.
        let arrived = [1, 5, 7, 1, 9];
        let n = propose(&members, |m| arrived.contains(&m), &mut out).unwrap();
        assert_eq!(&out[..n], &[7, 9, 1]);
        assert_eq!(propose(&members, |_| false, &mut out).unwrap(), 0);
        let mut small = [0; 3];
        assert!(matches!(
            propose(&members, |m| m == 1, &mut small),
            Err(Error::InvalidArgument { arg: "out", .. })
        ));
    }

    #[test]
    fn decisions_round_trip_and_refuse_garbage() {
        let mut bytes = [0u8; 64];
        let len = encode(12, &[4, 0, 2], &mut bytes).unwrap();
        assert_eq!(len, encoded_len(3));
        let mut out = [0u32; 8];
        assert_eq!(decode(&bytes[..len], &mut out).unwrap(), (12, 3));
        assert_eq!(&out[..3], &[4, 0, 2]);
        // Truncated, extended, wrong magic, too many for `out`, a rank twice.
        assert!(decode(&bytes[..len - 1], &mut out).is_err());
        assert!(decode(&bytes[..len + 1], &mut out).is_err());
        let mut wrong = bytes;
        wrong[0] = b'X';
        assert!(decode(&wrong[..len], &mut out).is_err());
        assert!(decode(&bytes[..len], &mut [0u32; 2]).is_err());
        let len2 = encode(1, &[5, 5], &mut bytes).unwrap();
        let e = decode(&bytes[..len2], &mut out).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    arg: "decision",
                    ..
                }
            ),
            "{e}"
        );
        assert!(encode(1, &[1, 2, 3], &mut [0u8; 10]).is_err());
    }

    #[test]
    fn verdicts_renumber_refuse_late_and_stale_ranks() {
        let next = [7, 9, 1];
        assert_eq!(
            verdict(4, 4, &next, 9),
            Verdict::Member { rank: 1, size: 3 }
        );
        assert_eq!(verdict(4, 4, &next, 3), Verdict::LeftOut);
        assert_eq!(verdict(3, 4, &next, 9), Verdict::Stale { decided: 4 });
    }

    #[test]
    fn proposals_wait_for_everyone_or_the_window() {
        assert!(ready_to_propose(4, 4, 0, 1000));
        assert!(!ready_to_propose(4, 3, 999, 1000));
        assert!(ready_to_propose(4, 3, 1000, 1000));
    }
}

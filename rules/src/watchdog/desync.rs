//! Desync debugging (c10d's `TORCH_NCCL_DESYNC_DEBUG`): every rank of a group publishes, through
//! the store, the last collective it issued and the last it saw complete; when a collective
//! times out on one rank, that rank reads every member's report and names the ranks that never
//! joined the collective (they are behind, or dead) and those that joined but did not finish.
//!
//! Everything here is a pure function of the reports, so the analysis is tested and fuzzed
//! without stores or threads: the encoding of a report in the store, its strict decoding, each
//! rank's standing against the timed-out collective, and the report's text.

use core::fmt::{self, Write};
use oxccl_core::error::{Error, Result};

/// What one rank last reported of a group's collectives (sequence numbers from 1; 0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RankProgress {
    /// The last collective the rank issued.
    pub issued: u64,
    /// The last collective the rank saw complete (never above `issued`).
    pub completed: u64,
}

/// Longest encoded report: two `u64` in decimal and a comma.
pub const ENCODED_CAPACITY: usize = 41;

impl RankProgress {
    /// The report as stored: `issued,completed` in decimal ASCII (what [`RankProgress::decode`]
    /// reads back).
    pub fn encode(&self) -> heapless::String<ENCODED_CAPACITY> {
        let mut s = heapless::String::new();
        // Two u64 and a comma always fit the capacity.
        let _ = write!(s, "{},{}", self.issued, self.completed);
        s
    }

    /// A stored report, strictly: two decimal numbers (ASCII digits only) separated by one
    /// comma, the second not above the first. Anything else is an error naming `value`.
    pub fn decode(bytes: &[u8]) -> Result<RankProgress> {
        let bad = || {
            Error::invalid(
                "value",
                format_args!(
                    "a desync report `issued,completed` (decimal, completed <= issued), got {} bytes",
                    bytes.len()
                ),
            )
        };
        let text = core::str::from_utf8(bytes).map_err(|_| bad())?;
        let (a, b) = text.split_once(',').ok_or_else(bad)?;
        let num = |s: &str| crate::env::parse_u64("value", s, 0, u64::MAX).map_err(|_| bad());
        let p = RankProgress {
            issued: num(a)?,
            completed: num(b)?,
        };
        if p.completed > p.issued {
            return Err(bad());
        }
        Ok(p)
    }
}

/// Where one rank stands against the collective that timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// No report: the rank never issued a collective of the group (or cannot reach the store).
    Silent,
    /// It never issued the collective: its last issued one is this earlier one.
    NotJoined {
        /// Its last issued collective.
        issued: u64,
    },
    /// It issued the collective but has not seen it complete.
    Stuck {
        /// Its last completed collective.
        completed: u64,
    },
    /// It saw the collective complete.
    Finished,
}

impl Standing {
    /// Whether the rank is one the timed-out collective waits for without it having joined
    /// (silent or behind): the likely cause of the timeout.
    pub fn is_lagging(self) -> bool {
        matches!(self, Standing::Silent | Standing::NotJoined { .. })
    }
}

/// The standing of a rank that reported `progress` (`None`: no report) against collective
/// `seq`.
pub fn standing(seq: u64, progress: Option<RankProgress>) -> Standing {
    match progress {
        None => Standing::Silent,
        Some(p) if p.issued < seq => Standing::NotJoined { issued: p.issued },
        Some(p) if p.completed < seq => Standing::Stuck {
            completed: p.completed,
        },
        Some(_) => Standing::Finished,
    }
}

/// The ranks (as given: global ranks) that never joined collective `seq`, in order.
pub fn lagging(
    seq: u64,
    reports: &[(u32, Option<RankProgress>)],
) -> impl Iterator<Item = u32> + '_ {
    reports
        .iter()
        .filter(move |(_, p)| standing(seq, *p).is_lagging())
        .map(|(r, _)| *r)
}

/// Writes `ranks` (ascending) as a bracketed list with runs folded: `[0-3, 7]`, so a verdict
/// naming many ranks still fits a short error text.
pub fn write_ranks(out: &mut impl Write, ranks: &[u32]) -> fmt::Result {
    out.write_char('[')?;
    let (mut i, mut first_run) = (0, true);
    while i < ranks.len() {
        let first = ranks[i];
        let mut last = first;
        while last != u32::MAX && ranks.get(i + 1) == Some(&(last + 1)) {
            i += 1;
            last = ranks[i];
        }
        if first_run {
            first_run = false;
        } else {
            out.write_str(", ")?;
        }
        match last.wrapping_sub(first) {
            0 => write!(out, "{first}")?,
            1 => write!(out, "{first}, {last}")?,
            _ => write!(out, "{first}-{last}")?,
        }
        i += 1;
    }
    out.write_char(']')
}

/// Writes the note a collective's timeout ends with when desync debugging gave a verdict:
/// `ranks [..] never joined it`, or, when `lagging` is empty, that every rank joined it (so
/// the hang is elsewhere). `lagging`: global ranks, ascending.
pub fn write_note(out: &mut impl Write, lagging: &[u32]) -> fmt::Result {
    if lagging.is_empty() {
        return out.write_str("every rank joined it (desync debug)");
    }
    out.write_str("ranks ")?;
    write_ranks(out, lagging)?;
    out.write_str(" never joined it")
}

/// Writes the head of the abort reason for collective `seq` when ranks lagged (`ranks [..]
/// never joined collective #seq`: first, so that a reason cut to the error's inline length
/// still says it); writes nothing and returns `false` when `lagging` is empty.
pub fn write_headline(
    out: &mut impl Write,
    seq: u64,
    lagging: &[u32],
) -> core::result::Result<bool, fmt::Error> {
    if lagging.is_empty() {
        return Ok(false);
    }
    out.write_str("ranks ")?;
    write_ranks(out, lagging)?;
    write!(out, " never joined collective #{seq}")?;
    Ok(true)
}

/// Writes the report of collective `seq` (`op`, e.g. "all_reduce") that timed out on rank `me`,
/// from every member's report (`(global rank, report)`): who never joined it and where they
/// are, who joined but did not finish, who finished.
pub fn write_report(
    out: &mut impl Write,
    me: u32,
    seq: u64,
    op: &str,
    reports: &[(u32, Option<RankProgress>)],
) -> fmt::Result {
    write!(
        out,
        "desync report: collective #{seq} ({op}) timed out on rank {me}"
    )?;
    let of =
        |want: fn(Standing) -> bool| reports.iter().filter(move |(_, p)| want(standing(seq, *p)));
    if lagging(seq, reports).next().is_none() {
        out.write_str("; every rank joined it")?;
    } else {
        write!(out, "; ranks that never joined it:")?;
        for (r, p) in of(|s| s.is_lagging()) {
            match standing(seq, *p) {
                Standing::NotJoined { issued: 0 } => write!(out, " {r} (issued none)")?,
                Standing::NotJoined { issued } => write!(out, " {r} (last issued #{issued})")?,
                _ => write!(out, " {r} (no report: never issued one, or dead)")?,
            }
        }
    }
    let mut stuck = of(|s| matches!(s, Standing::Stuck { .. })).peekable();
    if stuck.peek().is_some() {
        out.write_str("; joined but not finished:")?;
        for (r, _) in stuck {
            write!(out, " {r}")?;
        }
    }
    let mut done = of(|s| s == Standing::Finished).peekable();
    if done.peek().is_some() {
        out.write_str("; finished it:")?;
        for (r, _) in done {
            write!(out, " {r}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(issued: u64, completed: u64) -> Option<RankProgress> {
        Some(RankProgress { issued, completed })
    }

    #[test]
    fn rank_lists_fold_runs() {
        let show = |r: &[u32]| {
            let mut s = heapless::String::<64>::new();
            write_ranks(&mut s, r).unwrap();
            s
        };
        assert_eq!(show(&[]), "[]");
        assert_eq!(show(&[2]), "[2]");
        assert_eq!(show(&[1, 2]), "[1, 2]");
        assert_eq!(show(&[0, 1, 2, 3, 7, 9, 10, 11]), "[0-3, 7, 9-11]");
        assert_eq!(show(&[u32::MAX - 1, u32::MAX]), "[4294967294, 4294967295]");
        assert_eq!(show(&[5, 3]), "[5, 3]", "not ascending: written as given");
    }

    #[test]
    fn verdict_texts_name_the_lagging_ranks() {
        let mut s = heapless::String::<96>::new();
        write_note(&mut s, &[1, 2, 3, 6]).unwrap();
        assert_eq!(s, "ranks [1-3, 6] never joined it");
        s.clear();
        write_note(&mut s, &[]).unwrap();
        assert_eq!(s, "every rank joined it (desync debug)");
        s.clear();
        assert_eq!(write_headline(&mut s, 9, &[4]), Ok(true));
        assert_eq!(s, "ranks [4] never joined collective #9");
        s.clear();
        assert_eq!(write_headline(&mut s, 9, &[]), Ok(false));
        assert_eq!(s, "");
    }

    #[test]
    fn encoding_round_trips_and_decoding_is_strict() {
        for q in [(0, 0), (5, 4), (u64::MAX, u64::MAX)] {
            let r = RankProgress {
                issued: q.0,
                completed: q.1,
            };
            assert_eq!(RankProgress::decode(r.encode().as_bytes()).unwrap(), r);
        }
        for bad in [
            &b""[..],
            b"5",
            b"5,",
            b",5",
            b"4,5",
            b"-1,0",
            b"1,0,0",
            b" 1,0",
            b"1,\xff",
            b"18446744073709551616,0",
        ] {
            match RankProgress::decode(bad) {
                Err(Error::InvalidArgument { arg: "value", .. }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn standings_against_the_timed_out_collective() {
        assert_eq!(standing(3, None), Standing::Silent);
        assert_eq!(standing(3, p(2, 2)), Standing::NotJoined { issued: 2 });
        assert_eq!(standing(3, p(3, 2)), Standing::Stuck { completed: 2 });
        assert_eq!(standing(3, p(4, 2)), Standing::Stuck { completed: 2 });
        assert_eq!(standing(3, p(3, 3)), Standing::Finished);
        assert!(Standing::Silent.is_lagging());
        assert!(!Standing::Finished.is_lagging());
    }

    #[test]
    fn the_report_names_the_lagging_ranks() {
        let reports = [
            (0, p(2, 1)),
            (1, p(1, 1)),
            (2, p(2, 1)),
            (3, None),
            (5, p(2, 2)),
        ];
        let lag: heapless::Vec<u32, 8> = lagging(2, &reports).collect();
        assert_eq!(&lag[..], &[1, 3]);
        let mut s = heapless::String::<512>::new();
        write_report(&mut s, 0, 2, "all_reduce", &reports).unwrap();
        assert!(s.contains("#2 (all_reduce) timed out on rank 0"), "{s}");
        assert!(
            s.contains("never joined it: 1 (last issued #1) 3 (no report"),
            "{s}"
        );
        assert!(s.contains("joined but not finished: 0 2"), "{s}");
        assert!(s.contains("finished it: 5"), "{s}");
        let mut all = heapless::String::<512>::new();
        write_report(&mut all, 1, 1, "barrier", &[(0, p(1, 0)), (1, p(1, 0))]).unwrap();
        assert!(all.contains("every rank joined it"), "{all}");
    }
}

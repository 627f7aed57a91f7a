//! The agreement behind `ProcessGroup::release_windows`: releasing a window is collective, so
//! every rank publishes the windows it would release and all release only if every rank's
//! list is the same. The list's text and the verdict's are pure, so they are fuzzed.

use core::fmt::{self, Write};

/// Writes the windows a rank would release, as it publishes them: `none`, or their numbers
/// ascending and comma-separated. `windows` is sorted here, so two ranks' texts are equal
/// exactly when their lists hold the same numbers (as many times each).
pub fn write_release_list(out: &mut impl Write, windows: &mut [u64]) -> fmt::Result {
    if windows.is_empty() {
        return out.write_str("none");
    }
    windows.sort_unstable();
    for (i, n) in windows.iter().enumerate() {
        if i > 0 {
            out.write_char(',')?;
        }
        write!(out, "{n}")?;
    }
    Ok(())
}

/// Writes a difference between two ranks, as the verdict every rank reads: global rank
/// `their_rank` has `theirs` of `what` where global rank `my_rank` has `mine`.
pub fn write_disagreement(
    out: &mut impl Write,
    what: &str,
    their_rank: u32,
    theirs: &str,
    my_rank: u32,
    mine: &str,
) -> fmt::Result {
    write!(
        out,
        "global rank {their_rank} has {what} {theirs} and rank {my_rank} has {mine}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_sorted_and_none_when_empty() {
        let mut s = heapless::String::<64>::new();
        write_release_list(&mut s, &mut []).unwrap();
        assert_eq!(s, "none");
        s.clear();
        write_release_list(&mut s, &mut [9, 2, u64::MAX, 2]).unwrap();
        assert_eq!(s, "2,2,9,18446744073709551615");
    }

    #[test]
    fn a_disagreement_names_both_ranks() {
        let mut s = heapless::String::<96>::new();
        write_disagreement(&mut s, "windows to release", 3, "1,2", 0, "none").unwrap();
        assert_eq!(
            s,
            "global rank 3 has windows to release 1,2 and rank 0 has none"
        );
    }
}

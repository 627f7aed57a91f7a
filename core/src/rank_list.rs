//! A short list of ranks carried by value (an error names the ranks a group lost): the
//! first [`RankList::CAPACITY`] in order, and how many there were in all.

use core::fmt;

/// Ranks, in the order given: the first [`RankList::CAPACITY`] kept, the total counted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankList {
    kept: heapless::Vec<u32, 16>,
    total: u32,
}

impl RankList {
    /// How many ranks are kept; the rest are counted only.
    pub const CAPACITY: usize = 16;

    /// The list of `ranks` (the first [`RankList::CAPACITY`] kept).
    pub fn new(ranks: &[u32]) -> RankList {
        let mut kept = heapless::Vec::new();
        for r in ranks.iter().take(Self::CAPACITY) {
            // Within capacity: `take` bounds the loop.
            let _ = kept.push(*r);
        }
        RankList {
            kept,
            total: u32::try_from(ranks.len()).unwrap_or(u32::MAX),
        }
    }

    /// The ranks kept, in order.
    pub fn kept(&self) -> &[u32] {
        &self.kept
    }

    /// How many ranks the list stands for.
    pub fn len(&self) -> u32 {
        self.total
    }

    /// Whether it stands for none.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Whether all of the ranks are kept (none only counted).
    pub fn is_whole(&self) -> bool {
        self.kept.len() as u64 == u64::from(self.total)
    }
}

impl fmt::Display for RankList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.kept.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
        }
        let more = u64::from(self.total).saturating_sub(self.kept.len() as u64);
        if more > 0 {
            write!(f, " and {more} more")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::ToString;
    use std::vec::Vec;

    #[test]
    fn keeps_the_first_ranks_and_counts_all() {
        let l = RankList::new(&[3, 1]);
        assert_eq!(l.kept(), &[3, 1]);
        assert_eq!(l.len(), 2);
        assert!(l.is_whole());
        assert_eq!(l.to_string(), "3, 1");
        let many: Vec<u32> = (0..20).collect();
        let l = RankList::new(&many);
        assert_eq!(l.kept().len(), RankList::CAPACITY);
        assert_eq!(l.len(), 20);
        assert!(!l.is_whole());
        assert!(l.to_string().ends_with("15 and 4 more"));
        assert!(RankList::new(&[]).is_empty());
    }
}

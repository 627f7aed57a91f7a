//! What a rank knew of the other ranks' dumps when it wrote its own: why it dumped, whether
//! the store answered it, and, for a failing rank that waited for every rank's dump, who never
//! reported. Written at the dump's top level under [`NOTE_KEY`] (PyTorch's analyzer ignores
//! keys it does not know), read back by the recorder's `reader` (as `oxccl trace` prints it)
//! to say why a rank's dump is missing; the words it uses for causes and wait ends are defined
//! here, for the writer and that reader alike.

use super::value::DumpValue;
use oxccl_rules::watchdog::DumpWaitEnd;

/// The dump's top-level key holding its [`DumpNote`].
pub const NOTE_KEY: &str = "oxccl_dump";

/// Why a rank dumped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpCause {
    /// One of its own operations failed or timed out.
    OwnFailure,
    /// Another rank's failure signalled every rank through the store (that rank, when the
    /// signal named one it could read).
    Signal(Option<u32>),
    /// A person asked (a `dump_request` file), or the program did.
    Request,
    /// The heartbeat monitor found the watchdog stuck.
    Heartbeat,
}

impl DumpCause {
    /// The word a note uses for this cause (a signal's rank is a field of its own).
    pub fn word(&self) -> &'static str {
        match self {
            DumpCause::OwnFailure => "own failure",
            DumpCause::Signal(_) => "signal",
            DumpCause::Request => "request",
            DumpCause::Heartbeat => "heartbeat",
        }
    }

    /// The cause a note's `word` names (a signal from `signalled_by`); `None` for a word
    /// this version does not know.
    pub fn from_word(word: &str, signalled_by: Option<u32>) -> Option<DumpCause> {
        match word {
            "own failure" => Some(DumpCause::OwnFailure),
            "signal" => Some(DumpCause::Signal(signalled_by)),
            "request" => Some(DumpCause::Request),
            "heartbeat" => Some(DumpCause::Heartbeat),
            _ => None,
        }
    }
}

/// The word a dump's note uses for how a wait ended.
pub fn wait_end_word(end: DumpWaitEnd) -> &'static str {
    match end {
        DumpWaitEnd::AllReported => "all reported",
        DumpWaitEnd::LimitPassed => "limit passed",
        DumpWaitEnd::StoreUnreachable => "store unreachable",
    }
}

/// The wait's end a note's word names; `None` for a word this version does not know.
pub fn wait_end_from_word(s: &str) -> Option<DumpWaitEnd> {
    [
        DumpWaitEnd::AllReported,
        DumpWaitEnd::LimitPassed,
        DumpWaitEnd::StoreUnreachable,
    ]
    .into_iter()
    .find(|&e| wait_end_word(e) == s)
}

/// A failing rank's wait for every rank's dump, as it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpWait {
    /// How it ended.
    pub outcome: DumpWaitEnd,
    /// How long it waited, ms (from the failure, its own dump included).
    pub waited_ms: u64,
    /// The ranks that had not reported a dump when it ended (empty when unknown: a gone
    /// store, or a world too large to ask rank by rank).
    pub unreported: Vec<u32>,
}

/// What a rank knew of the coordination when it dumped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpNote {
    /// Why it dumped.
    pub cause: DumpCause,
    /// The first store error it met while signalling or reporting; `None`: the store answered.
    pub store_error: Option<String>,
    /// Its wait for every rank's dump, once ended (a failing rank that signalled).
    pub wait: Option<DumpWait>,
}

impl DumpNote {
    /// A note for a dump of `cause`, before anything was asked of the store.
    pub fn new(cause: DumpCause) -> DumpNote {
        DumpNote {
            cause,
            store_error: None,
            wait: None,
        }
    }

    /// The note as the dump holds it (a dict of plain values).
    pub fn value(&self) -> DumpValue {
        let from = match self.cause {
            DumpCause::Signal(r) => r,
            _ => None,
        };
        let opt_int = |v: Option<u64>| v.map_or(DumpValue::None, DumpValue::int);
        DumpValue::dict([
            ("cause", DumpValue::str(self.cause.word())),
            ("signalled_by", opt_int(from.map(u64::from))),
            (
                "store_error",
                self.store_error
                    .as_deref()
                    .map_or(DumpValue::None, DumpValue::str),
            ),
            (
                "wait_end",
                self.wait.as_ref().map_or(DumpValue::None, |w| {
                    DumpValue::str(wait_end_word(w.outcome))
                }),
            ),
            (
                "waited_ms",
                opt_int(self.wait.as_ref().map(|w| w.waited_ms)),
            ),
            (
                "unreported_ranks",
                DumpValue::List(
                    self.wait
                        .iter()
                        .flat_map(|w| w.unreported.iter().map(|&r| DumpValue::int(r)))
                        .collect(),
                ),
            ),
        ])
    }
}

/// "0-16, 18-63" for a sorted list of ranks: how notes' readers and the watchdog's messages
/// name many ranks at once.
pub fn rank_ranges(ranks: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let start = ranks[i];
        let mut end = start;
        while i + 1 < ranks.len() && ranks[i + 1] == end.wrapping_add(1) {
            i += 1;
            end = ranks[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_ranges_join_consecutive_ranks() {
        assert_eq!(rank_ranges(&[]), "");
        assert_eq!(rank_ranges(&[3]), "3");
        assert_eq!(rank_ranges(&[0, 1, 2, 4, 6, 7]), "0-2, 4, 6-7");
    }

    #[test]
    fn words_name_their_cause_and_end_both_ways() {
        for c in [
            DumpCause::OwnFailure,
            DumpCause::Signal(Some(3)),
            DumpCause::Request,
            DumpCause::Heartbeat,
        ] {
            assert_eq!(DumpCause::from_word(c.word(), Some(3)), Some(c));
        }
        for e in [
            DumpWaitEnd::AllReported,
            DumpWaitEnd::LimitPassed,
            DumpWaitEnd::StoreUnreachable,
        ] {
            assert_eq!(wait_end_from_word(wait_end_word(e)), Some(e));
        }
        assert_eq!(DumpCause::from_word("boredom", None), None);
        assert_eq!(wait_end_from_word("later"), None);
    }
}

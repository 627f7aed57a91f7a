//! What a rank knew of the other ranks' dumps when it wrote its own: why it dumped, whether
//! the store answered it, and, for a failing rank that waited for every rank's dump, who never
//! reported. Written at the dump's top level under [`NOTE_KEY`] (PyTorch's analyzer ignores
//! keys it does not know), read back by `oxccl trace` to say why a rank's dump is missing.

use super::pickle::PyValue;
use oxccl_core::watchdog::DumpWaitEnd;
use serde_json::Value;

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

/// The word a dump's note uses for how a wait ended.
fn end_word(end: DumpWaitEnd) -> &'static str {
    match end {
        DumpWaitEnd::AllReported => "all reported",
        DumpWaitEnd::LimitPassed => "limit passed",
        DumpWaitEnd::StoreUnreachable => "store unreachable",
    }
}

/// The wait's end a note's word names.
fn end_of_word(s: &str) -> Option<DumpWaitEnd> {
    [
        DumpWaitEnd::AllReported,
        DumpWaitEnd::LimitPassed,
        DumpWaitEnd::StoreUnreachable,
    ]
    .into_iter()
    .find(|&e| end_word(e) == s)
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
    pub(crate) fn value(&self) -> PyValue {
        let (cause, from) = match self.cause {
            DumpCause::OwnFailure => ("own failure", None),
            DumpCause::Signal(r) => ("signal", r),
            DumpCause::Request => ("request", None),
            DumpCause::Heartbeat => ("heartbeat", None),
        };
        let opt_int = |v: Option<u64>| v.map_or(PyValue::None, PyValue::int);
        PyValue::dict([
            ("cause", PyValue::str(cause)),
            ("signalled_by", opt_int(from.map(u64::from))),
            (
                "store_error",
                self.store_error
                    .as_deref()
                    .map_or(PyValue::None, PyValue::str),
            ),
            (
                "wait_end",
                self.wait
                    .as_ref()
                    .map_or(PyValue::None, |w| PyValue::str(end_word(w.outcome))),
            ),
            (
                "waited_ms",
                opt_int(self.wait.as_ref().map(|w| w.waited_ms)),
            ),
            (
                "unreported_ranks",
                PyValue::List(
                    self.wait
                        .iter()
                        .flat_map(|w| w.unreported.iter().map(|&r| PyValue::int(r)))
                        .collect(),
                ),
            ),
        ])
    }

    /// The note of a parsed JSON dump; `None` when the dump has none or it is not one this
    /// version reads (a note is advice: a dump stays readable without it).
    pub(crate) fn parse(v: &Value) -> Option<DumpNote> {
        let o = v.as_object()?;
        let text = |k: &str| o.get(k).and_then(Value::as_str);
        let rank = |k: &str| {
            o.get(k)
                .and_then(Value::as_u64)
                .and_then(|r| u32::try_from(r).ok())
        };
        let cause = match text("cause")? {
            "own failure" => DumpCause::OwnFailure,
            "signal" => DumpCause::Signal(rank("signalled_by")),
            "request" => DumpCause::Request,
            "heartbeat" => DumpCause::Heartbeat,
            _ => return None,
        };
        let wait = text("wait_end")
            .and_then(end_of_word)
            .map(|outcome| DumpWait {
                outcome,
                waited_ms: o.get("waited_ms").and_then(Value::as_u64).unwrap_or(0),
                unreported: o
                    .get("unreported_ranks")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|r| r.as_u64().and_then(|r| u32::try_from(r).ok()))
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        Some(DumpNote {
            cause,
            store_error: text("store_error").map(str::to_string),
            wait,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(n: &DumpNote) -> Option<DumpNote> {
        DumpNote::parse(&crate::trace::dump::to_json(&n.value()))
    }

    #[test]
    fn notes_read_back_as_written() {
        let notes = [
            DumpNote::new(DumpCause::OwnFailure),
            DumpNote::new(DumpCause::Signal(Some(3))),
            DumpNote::new(DumpCause::Signal(None)),
            DumpNote::new(DumpCause::Request),
            DumpNote::new(DumpCause::Heartbeat),
            DumpNote {
                cause: DumpCause::OwnFailure,
                store_error: Some("connection refused".into()),
                wait: Some(DumpWait {
                    outcome: DumpWaitEnd::LimitPassed,
                    waited_ms: 60_000,
                    unreported: vec![1, 5],
                }),
            },
            DumpNote {
                cause: DumpCause::OwnFailure,
                store_error: None,
                wait: Some(DumpWait {
                    outcome: DumpWaitEnd::AllReported,
                    waited_ms: 3,
                    unreported: vec![],
                }),
            },
        ];
        for n in &notes {
            assert_eq!(roundtrip(n).as_ref(), Some(n));
        }
    }

    #[test]
    fn unknown_or_malformed_notes_are_none() {
        for bad in [
            serde_json::json!(null),
            serde_json::json!([1]),
            serde_json::json!({}),
            serde_json::json!({"cause": "boredom"}),
            serde_json::json!({"cause": 7}),
        ] {
            assert_eq!(DumpNote::parse(&bad), None, "{bad}");
        }
        // An odd wait end reads as no wait; odd ranks are skipped.
        let n = DumpNote::parse(&serde_json::json!({
            "cause": "own failure", "wait_end": "later", "unreported_ranks": [1]
        }))
        .unwrap();
        assert_eq!(n.wait, None);
        let n = DumpNote::parse(&serde_json::json!({
            "cause": "signal", "signalled_by": -1, "wait_end": "limit passed",
            "unreported_ranks": [2, "x", 4294967296u64, 3]
        }))
        .unwrap();
        assert_eq!(n.cause, DumpCause::Signal(None));
        assert_eq!(n.wait.unwrap().unreported, vec![2, 3]);
    }
}

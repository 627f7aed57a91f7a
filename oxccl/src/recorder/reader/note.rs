//! Reading a dump's note back (what a rank knew of the other ranks' dumps, written by the
//! library's [`DumpNote`]), in the words the library defines for it.

use crate::recorder::{wait_end_from_word, DumpCause, DumpNote, DumpWait};
use serde_json::Value;

/// The note of a parsed JSON dump; `None` when the dump has none or it is not one this
/// version reads (a note is advice: a dump stays readable without it).
pub fn parse_note(v: &Value) -> Option<DumpNote> {
    let o = v.as_object()?;
    let text = |k: &str| o.get(k).and_then(Value::as_str);
    let rank = |k: &str| {
        o.get(k)
            .and_then(Value::as_u64)
            .and_then(|r| u32::try_from(r).ok())
    };
    let cause = DumpCause::from_word(text("cause")?, rank("signalled_by"))?;
    let wait = text("wait_end")
        .and_then(wait_end_from_word)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::to_json;
    use oxccl_rules::watchdog::DumpWaitEnd;

    fn roundtrip(n: &DumpNote) -> Option<DumpNote> {
        parse_note(&serde_json::from_str(&to_json(&n.value())).unwrap())
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
            assert_eq!(parse_note(&bad), None, "{bad}");
        }
        // An odd wait end reads as no wait; odd ranks are skipped.
        let n = parse_note(&serde_json::json!({
            "cause": "own failure", "wait_end": "later", "unreported_ranks": [1]
        }))
        .unwrap();
        assert_eq!(n.wait, None);
        let n = parse_note(&serde_json::json!({
            "cause": "signal", "signalled_by": -1, "wait_end": "limit passed",
            "unreported_ranks": [2, "x", 4294967296u64, 3]
        }))
        .unwrap();
        assert_eq!(n.cause, DumpCause::Signal(None));
        assert_eq!(n.wait.unwrap().unreported, vec![2, 3]);
    }
}

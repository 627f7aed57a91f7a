//! The elastic world's admission (`oxccl_rules::elastic::admission`) and alive rule
//! (`oxccl_rules::elastic::LastActive`) against models written here.
//!
//! Admission: for any world size, member list and tickets (ranks or none), `judge` gives the
//! model's verdict on every ticket: void without a rank, outside at or past the size, member
//! when in the list, twice when an earlier ticket of the same decision was admitted for the
//! rank, admitted otherwise; the admitted ranks are never members and never repeat; a
//! joiner's `check_join` refuses exactly what `judge` would refuse as outside or member; every
//! verdict survives its encoding, and no bytes decode into a verdict that encodes otherwise.
//!
//! Alive rule: over any schedule of work notes (clock readings that may run late or back) and
//! decisions, a rank stays in exactly when its latest noted work is within the timeout plus
//! the window of the decision's reading, and the record never moves back.

use arbitrary::{Arbitrary, Unstructured};
use oxccl_rules::elastic::admission::{check_join, judge, TicketVerdict, VERDICT_LEN};
use oxccl_rules::elastic::LastActive;

#[derive(Debug, Arbitrary)]
enum Event {
    /// Work noted at this clock reading.
    Work(u32),
    /// A decision begun at this reading, under this timeout and window.
    Decide(u32, u16, u16),
}

#[derive(Debug, Arbitrary)]
enum Case {
    Admission {
        size: u8,
        members: Vec<u8>,
        tickets: Vec<Option<u8>>,
    },
    Verdict(Vec<u8>),
    Alive(Vec<Event>),
}

fn model(size: u32, members: &[u32], tickets: &[(u64, Option<u32>)]) -> Vec<TicketVerdict> {
    let mut taken: Vec<(u32, u64)> = Vec::new();
    tickets
        .iter()
        .map(|&(t, r)| match r {
            None => TicketVerdict::Void,
            Some(r) if r >= size => TicketVerdict::OutsideWorld,
            Some(r) if members.contains(&r) => TicketVerdict::Member,
            Some(r) => match taken.iter().find(|(q, _)| *q == r) {
                Some(&(_, first)) => TicketVerdict::Twice { first },
                None => {
                    taken.push((r, t));
                    TicketVerdict::Admitted
                }
            },
        })
        .collect()
}

/// One input.
pub fn fuzz(data: &[u8]) {
    let Ok(case) = Case::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    match case {
        Case::Admission {
            size,
            members,
            tickets,
        } => {
            let size = u32::from(size % 16);
            let mut ms: Vec<u32> = Vec::new();
            for m in members.iter().map(|m| u32::from(*m % 20)) {
                if !ms.contains(&m) {
                    ms.push(m);
                }
            }
            let tickets: Vec<(u64, Option<u32>)> = tickets
                .iter()
                .take(64)
                .enumerate()
                .map(|(i, r)| (i as u64 + 7, r.map(|r| u32::from(r % 24))))
                .collect();
            let mut out = vec![TicketVerdict::Void; tickets.len()];
            let n = judge(size, &ms, &tickets, &mut out).expect("room for every verdict");
            let want = model(size, &ms, &tickets);
            assert_eq!(out, want, "size {size} members {ms:?} tickets {tickets:?}");
            let admitted: Vec<u32> = tickets
                .iter()
                .zip(&out)
                .filter(|(_, v)| **v == TicketVerdict::Admitted)
                .filter_map(|((_, r), _)| *r)
                .collect();
            assert_eq!(n, admitted.len());
            for (i, r) in admitted.iter().enumerate() {
                assert!(!ms.contains(r) && *r < size && !admitted[..i].contains(r));
            }
            for &(_, r) in &tickets {
                let Some(r) = r else { continue };
                let refused = r >= size || ms.contains(&r);
                assert_eq!(check_join(r, size, &ms, 3).is_err(), refused, "rank {r}");
            }
            for v in out {
                assert_eq!(TicketVerdict::decode(&v.encode()), Some(v));
            }
            if tickets.is_empty() {
                assert!(judge(size, &ms, &[(1, Some(0))], &mut []).is_err());
            }
        }
        Case::Verdict(bytes) => {
            if let Some(v) = TicketVerdict::decode(&bytes) {
                assert_eq!(bytes.len(), VERDICT_LEN);
                assert_eq!(v.encode().as_slice(), bytes.as_slice());
            }
        }
        Case::Alive(events) => {
            let mut rec = LastActive::default();
            let mut latest = 0u64;
            for e in events {
                match e {
                    Event::Work(at) => {
                        let before = rec;
                        rec = rec.note(u64::from(at));
                        latest = latest.max(u64::from(at));
                        assert!(rec.at_ms >= before.at_ms, "the record moved back");
                        assert_eq!(rec.at_ms, latest);
                    }
                    Event::Decide(now, timeout, window) => {
                        let (now, timeout, window) =
                            (u64::from(now), u64::from(timeout), u64::from(window));
                        let want = now.saturating_sub(latest) <= timeout + window;
                        assert_eq!(
                            rec.stays_in(now, timeout, window),
                            want,
                            "now {now} last {latest}"
                        );
                    }
                }
            }
        }
    }
}

//! The survivors' agreement (`oxccl_rules::elastic::survivors`) against a model of the store
//! and of ranks that arrive, die, propose and read in any order: a store with an arrival
//! counter, the arrivals it numbered, and a decision key written by compare-and-set. After
//! every schedule: all ranks that read a decision read the same members; those members are a
//! subsequence of the group that arrived before the decision was written (none died before
//! arriving); the proposer whose write stood is in the decision; a rank is told to go on exactly when the
//! decision names it, with its position as its new rank; a rank reading another view's
//! decision is told it is stale. Arbitrary bytes never decode into a decision with a rank twice.

use arbitrary::{Arbitrary, Unstructured};
use oxccl_rules::elastic::survivors::{decode, encode, encoded_len, propose, verdict, Verdict};

#[derive(Debug, Arbitrary)]
enum Step {
    /// Rank `r` (of the group, or not: an outsider) arrives.
    Arrive(u8),
    /// Rank `r` dies (does nothing any more).
    Die(u8),
    /// Rank `r` proposes from the arrivals it reads now.
    Propose(u8),
    /// Rank `r` reads the decision, if there is one.
    Read(u8),
}

#[derive(Debug, Arbitrary)]
enum Case {
    /// A group of `n` members (a permutation of global ranks) at view `view`, and a schedule.
    Schedule {
        n: u8,
        shuffle: u64,
        view: u32,
        steps: Vec<Step>,
        /// The view a late rank believes it is at (a stale one when different).
        stale_reader: Option<(u8, u32)>,
    },
    /// Any bytes as a decision.
    Garbage(Vec<u8>),
}

/// The store as the protocol uses it.
#[derive(Default)]
struct Store {
    /// Arrivals in the order the counter numbered them.
    arrivals: Vec<u32>,
    /// The decision and how many arrivals there were when it was written.
    decision: Option<(Vec<u8>, usize)>,
}

impl Store {
    /// Compare-and-set on an absent key: the first write stands; returns what the key holds
    /// and whether this write was the one.
    fn decide(&mut self, bytes: Vec<u8>) -> (Vec<u8>, bool) {
        let won = self.decision.is_none();
        let at = self.arrivals.len();
        (self.decision.get_or_insert((bytes, at)).0.clone(), won)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Rank {
    Waiting,
    Arrived,
    Dead,
}

/// The decision's members and view.
fn read(bytes: &[u8], room: usize) -> (u64, Vec<u32>) {
    let mut out = vec![0u32; room];
    let (view, n) = decode(bytes, &mut out).expect("a decision written by encode decodes");
    out.truncate(n);
    (view, out)
}

fn schedule(n: u8, shuffle: u64, view: u32, steps: &[Step], stale_reader: Option<(u8, u32)>) {
    let n = usize::from(n % 16) + 1;
    // The group's members: global ranks 0..2n, n of them in a shuffled order.
    let mut members: Vec<u32> = (0..2 * n as u32).collect();
    let mut s = shuffle | 1;
    for i in (1..members.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        members.swap(i, (s % (i as u64 + 1)) as usize);
    }
    members.truncate(n);
    let global = |r: u8| -> u32 { u32::from(r) % (2 * n as u32 + 2) };
    let view = u64::from(view);
    let next = view + 1;
    let mut state: Vec<Rank> = vec![Rank::Waiting; 2 * n + 2];
    let mut store = Store::default();
    // What each rank was told: (global rank, verdict).
    let mut told: Vec<(u32, Verdict)> = Vec::new();
    let mut proposers: Vec<u32> = Vec::new();
    for step in steps {
        match *step {
            Step::Arrive(r) => {
                let g = global(r);
                if state[g as usize] == Rank::Waiting {
                    state[g as usize] = Rank::Arrived;
                    store.arrivals.push(g);
                }
            }
            Step::Die(r) => state[global(r) as usize] = Rank::Dead,
            Step::Propose(r) => {
                let g = global(r);
                // Only a member that arrived proposes (and once it holds a verdict, no more).
                if state[g as usize] != Rank::Arrived
                    || !members.contains(&g)
                    || told.iter().any(|(t, _)| *t == g)
                {
                    continue;
                }
                let mut out = vec![0u32; n];
                let k = propose(&members, |m| store.arrivals.contains(&m), &mut out)
                    .expect("room for members");
                out.truncate(k);
                assert!(
                    out.contains(&g),
                    "a proposer proposes itself: {g} not in {out:?}"
                );
                let mut bytes = vec![0u8; encoded_len(k)];
                encode(next, &out, &mut bytes).expect("encode");
                let (stored, won) = store.decide(bytes);
                let (v, ranks) = read(&stored, n);
                told.push((g, verdict(next, v, &ranks, g)));
                if won {
                    proposers.push(g);
                }
            }
            Step::Read(r) => {
                let g = global(r);
                if state[g as usize] == Rank::Dead || told.iter().any(|(t, _)| *t == g) {
                    continue;
                }
                if let Some((bytes, _)) = &store.decision {
                    let (v, ranks) = read(bytes, n);
                    told.push((g, verdict(next, v, &ranks, g)));
                }
            }
        }
    }
    let Some((bytes, arrived_then)) = &store.decision else {
        assert!(told.is_empty(), "nobody is told anything before a decision");
        return;
    };
    let (v, decided) = read(bytes, n);
    assert_eq!(v, next, "the decision is for the next view");
    // A subsequence of the members, each of which arrived before the decision was written.
    let mut it = members.iter();
    for r in &decided {
        assert!(
            it.any(|m| m == r),
            "{decided:?} not in group order of {members:?}"
        );
        assert!(
            store.arrivals[..*arrived_then].contains(r),
            "{r} is in the decision without having arrived before it"
        );
    }
    for p in &proposers {
        assert!(decided.contains(p), "proposer {p} left out of {decided:?}");
    }
    for (g, t) in &told {
        let want = match decided.iter().position(|r| r == g) {
            Some(i) => Verdict::Member {
                rank: i as u32,
                size: decided.len() as u32,
            },
            None => Verdict::LeftOut,
        };
        assert_eq!(*t, want, "rank {g} of {members:?}, decided {decided:?}");
    }
    if let Some((r, believed)) = stale_reader {
        let believed = u64::from(believed);
        let t = verdict(believed, v, &decided, global(r));
        if believed != next {
            assert_eq!(t, Verdict::Stale { decided: next });
        } else {
            assert!(!matches!(t, Verdict::Stale { .. }));
        }
    }
}

fn garbage(bytes: &[u8]) {
    let mut out = [0u32; 16];
    if let Ok((view, n)) = decode(bytes, &mut out) {
        let ranks = &out[..n];
        for (i, r) in ranks.iter().enumerate() {
            assert!(!ranks[..i].contains(r), "a rank twice in {ranks:?}");
        }
        // What decodes encodes back to the same bytes.
        let mut again = vec![0u8; encoded_len(n)];
        encode(view, ranks, &mut again).expect("encode");
        assert_eq!(again, bytes);
    }
}

/// The target's body.
pub fn fuzz(data: &[u8]) {
    let Ok(case) = Case::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    match case {
        Case::Schedule {
            n,
            shuffle,
            view,
            steps,
            stale_reader,
        } => schedule(n, shuffle, view, &steps, stale_reader),
        Case::Garbage(bytes) => garbage(&bytes),
    }
}

//! The survivors' decision in the store. Each member that saw a peer lost marks its arrival at
//! the group's current view (`PREFIX/view/<v>/arrived/<rank>`, counted at `.../count`); once
//! every member arrived, or the window passed since its own arrival, a member proposes the
//! next view's members, the ones whose marks it finds, with compare-and-set on
//! `.../decision`, so the first proposal stands; every member reads that one decision. A
//! member's store calls while it waits are two per look (the decision, the count); only a
//! proposer reads the marks, one per member.

use crate::deadline::ms;
use crate::store::Store;
use oxccl_core::{Error, Result};
use oxccl_rules::elastic::survivors::{
    decode, encode, encoded_len, propose, ready_to_propose, verdict, Verdict,
};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How often a waiting member looks at the store.
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// One member's part in deciding who goes on after view `view` lost a rank.
#[derive(Debug, Clone)]
pub struct Survivors<'a> {
    /// Where the decision is made (equal for every member; the store may be shared).
    pub prefix: &'a str,
    /// The view that lost a rank (every member counts views alike; 0 for a group's first).
    pub view: u64,
    /// The view's members: global ranks in group order.
    pub members: &'a [u32],
    /// This member's global rank.
    pub me: u32,
    /// How long after its own arrival a member waits for the others before it proposes
    /// without them (a rank that has not arrived by then is left out).
    pub window: Duration,
}

/// What the members decided: this member's verdict and the next view's members (global
/// ranks in group order; `view + 1` is its number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Whether, and as which rank, this member goes on.
    pub verdict: Verdict,
    /// The next view's members.
    pub members: Vec<u32>,
}

impl Survivors<'_> {
    fn key(&self, what: &str) -> String {
        format!("{}/view/{}/{what}", self.prefix, self.view)
    }

    /// Marks this member's arrival, waits for the decision (proposing it when its turn
    /// comes), and returns it. A `me` that is not one of `members`, or `members` with a rank
    /// twice, is refused before the store is touched.
    pub fn decide(&self, store: &dyn Store) -> Result<Outcome> {
        let mut seen = HashSet::with_capacity(self.members.len());
        if let Some(m) = self.members.iter().find(|m| !seen.insert(**m)) {
            return Err(Error::invalid(
                "members",
                format_args!("each rank once, got {m} twice"),
            ));
        }
        if !self.members.contains(&self.me) {
            return Err(Error::invalid(
                "me",
                format_args!(
                    "one of the view's members {:?}, got {}",
                    self.members, self.me
                ),
            ));
        }
        store.set(&self.key(&format!("arrived/{}", self.me)), b"1")?;
        store.add(&self.key("count"), 1)?;
        let arrived_at = Instant::now();
        let decision = self.key("decision");
        loop {
            if store.check(&[&decision])? {
                return self.read(&store.get(&decision, store.timeout())?);
            }
            let count = store.add(&self.key("count"), 0)?;
            let count = usize::try_from(count).unwrap_or(0);
            if ready_to_propose(
                self.members.len(),
                count,
                ms(arrived_at.elapsed()),
                ms(self.window),
            ) {
                return self.propose(store, &decision);
            }
            std::thread::sleep(LOOK_EVERY);
        }
    }

    /// Proposes the members whose marks are there; reads back what the decision key holds
    /// (this proposal, or an earlier one).
    fn propose(&self, store: &dyn Store, decision: &str) -> Result<Outcome> {
        let mut arrived = HashSet::with_capacity(self.members.len());
        for &m in self.members {
            if store.check(&[&self.key(&format!("arrived/{m}"))])? {
                arrived.insert(m);
            }
        }
        let mut next = vec![0; self.members.len()];
        let n = propose(self.members, |m| arrived.contains(&m), &mut next)?;
        let mut bytes = vec![0; encoded_len(n)];
        encode(self.view + 1, &next[..n], &mut bytes)?;
        let stored = store.compare_set(decision, b"", &bytes)?;
        self.read(&stored)
    }

    fn read(&self, bytes: &[u8]) -> Result<Outcome> {
        let mut members = vec![0; self.members.len()];
        let (view, n) = decode(bytes, &mut members)?;
        members.truncate(n);
        Ok(Outcome {
            verdict: verdict(self.view + 1, view, &members, self.me),
            members,
        })
    }
}

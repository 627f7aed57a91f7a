//! What one family of groups (a default group and its subgroups) shares: the numbering of
//! its groups and, when it goes on after losses, the survivors' record (the epoch it is at,
//! what changed at each epoch, whether this rank was left out).

use crate::recorder::now_ns;
use oxccl_core::text::text_str;
use oxccl_core::{Error, RankList};
use oxccl_rules::elastic::LastActive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What every group made from one default group shares.
pub(crate) struct GroupFamily {
    /// The next group uid: every rank creates groups in the same order, so uids agree.
    pub next_uid: AtomicU64,
    /// The survivors' record, when the family goes on after losses ([`PgOptions::elastic`]).
    pub elastic: Option<Elastic>,
}

/// A family's elastic state; its lock serializes this process's decisions and catch-ups.
pub(crate) struct Elastic {
    /// How long survivors wait for each other before they decide.
    pub window: Duration,
    /// The epoch the family is at (raised under the book's lock).
    pub epoch: AtomicU64,
    /// Whether [`Book::out`] is set: what every operation reads, without the lock.
    pub left_out: AtomicBool,
    pub book: Mutex<Book>,
    /// When this rank was last at work in the family ([`LastActive`]), ms of the process's
    /// monotonic clock ([`now_ns`]); the family's making counts as work.
    active_ms: AtomicU64,
}

impl Elastic {
    pub(crate) fn new(window: Duration) -> Elastic {
        Elastic {
            window,
            epoch: AtomicU64::new(0),
            left_out: AtomicBool::new(false),
            book: Mutex::new(Book::default()),
            active_ms: AtomicU64::new(now_ms()),
        }
    }

    /// Notes that this rank put work on one of the family's communicators now (the alive
    /// rule, [`LastActive`]). On every call's path: a load and, once a millisecond at most,
    /// a store, no read-modify-write (a thread's older reading landing last costs a
    /// millisecond of the record, nothing more).
    #[inline]
    pub(crate) fn note_active(&self) {
        let now = now_ms();
        if now > self.active_ms.load(Ordering::Relaxed) {
            self.active_ms.store(now, Ordering::Relaxed);
        }
    }

    /// When this rank was last at work, by the alive rule.
    pub(crate) fn last_active(&self) -> LastActive {
        LastActive {
            at_ms: self.active_ms.load(Ordering::Relaxed),
        }
    }

    /// Whether this rank takes part in a decision begun now, under a timeout of `timeout_ms`
    /// and this family's window (and how long it has been idle, for the record).
    pub(crate) fn stays_in(&self, timeout_ms: u64) -> (bool, u64) {
        let (now, last) = (now_ms(), self.last_active());
        let window = u64::try_from(self.window.as_millis()).unwrap_or(u64::MAX);
        (last.stays_in(now, timeout_ms, window), last.idle_ms(now))
    }
}

/// What changed, epoch by epoch.
#[derive(Default)]
pub(crate) struct Book {
    pub changes: Vec<Change>,
    /// Join tickets admitted so far (see `admit`).
    pub taken: u64,
    /// Admission rounds of the current epoch so far (every member calls them alike).
    pub admit_round: u64,
    /// Set once this rank is out of the family (left out by the survivors, or their decision
    /// failed here): every later operation fails with it.
    pub out: Option<Error>,
}

/// One epoch's change of the world's members (global ranks, sorted).
pub(crate) struct Change {
    /// The epoch it made.
    pub epoch: u64,
    pub lost: Vec<u32>,
    /// In the order they joined (after the members they join).
    pub joined: Vec<u32>,
    /// The joiners came in by the library's grow (else by a new communicator).
    pub grow: bool,
}

impl Book {
    /// The ranks lost after epoch `from` up to `to` (sorted, each once).
    pub(crate) fn lost_between(&self, from: u64, to: u64) -> Vec<u32> {
        self.collect(from, to, |c| &c.lost)
    }

    /// The ranks that joined after epoch `from` up to `to`, in the order they joined, and
    /// whether all of them came by a grow.
    pub(crate) fn joined_between(&self, from: u64, to: u64) -> (Vec<u32>, bool) {
        let changes = || {
            self.changes
                .iter()
                .filter(move |c| c.epoch > from && c.epoch <= to)
        };
        let mut joined: Vec<u32> = Vec::new();
        for c in changes() {
            for r in &c.joined {
                if !joined.contains(r) {
                    joined.push(*r);
                }
            }
        }
        (joined, changes().all(|c| c.grow || c.joined.is_empty()))
    }

    fn collect(&self, from: u64, to: u64, pick: impl Fn(&Change) -> &Vec<u32>) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .changes
            .iter()
            .filter(|c| c.epoch > from && c.epoch <= to)
            .flat_map(|c| pick(c).iter().copied())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The error of an operation of epoch `since` that a loss interrupted, the family now at
    /// `now`.
    pub(crate) fn members_lost(&self, since: u64, now: u64, cause: &Error) -> Error {
        Error::MembersLost {
            lost: RankList::new(&self.lost_between(since, now)),
            epoch: now,
            cause: text_str(&cause.to_string()),
        }
    }
}

/// Milliseconds of the process's monotonic clock (the one every operation reads).
fn now_ms() -> u64 {
    now_ns() / 1_000_000
}

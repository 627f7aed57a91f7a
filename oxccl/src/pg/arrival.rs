//! The arrival of the participants of a collective creation or agreement in the store: a
//! mark and a count each, one key that says all came, and, when some never do, who they are,
//! read from the marks by one participant for all.

use crate::deadline::ms;
use crate::read_for_all::{rank_list, read_for_all};
use crate::store::Store;
use oxccl_core::{text, Error, Result};
use std::time::{Duration, Instant};

/// How long a participant that timed out waits for the list of who is missing, once another
/// participant claimed the reading of the marks (it is past its own deadline already).
const MISSING_LIST_WAIT: Duration = Duration::from_secs(2);

/// The arrival of the participants of a collective creation (an init, a split) in the store,
/// before the backend is called: each marks itself (`PREFIX/arrived/INDEX`) and counts itself
/// (`PREFIX/count`); the last one sets `PREFIX/all`, which every one waits for until the
/// deadline. A participant that never arrives is named by the others from the marks missing,
/// whatever the backend (NCCL cannot say which rank it waits for), and the backend is not
/// called while one is missing: a creation that cannot complete leaves nothing to abort.
/// A participant's store calls are a handful whatever the number of participants; only the
/// one that reads the marks after a timeout reads one per participant (see
/// [`Arrival::missing`]).
pub(crate) struct Arrival<'a> {
    pub store: &'a dyn Store,
    /// Key prefix of this creation (equal across participants).
    pub prefix: String,
    /// This participant's index in `ranks`.
    pub index: u32,
    /// The participants' global ranks, by index.
    pub ranks: &'a [u32],
    /// When the creation's time is up.
    pub deadline: Instant,
    /// What is being created, for the error texts ("the init of group 3 (tp)").
    pub what: String,
}

impl Arrival<'_> {
    fn mark(&self, index: usize) -> String {
        format!("{}/arrived/{index}", self.prefix)
    }

    /// Time left before the deadline.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Marks and counts this participant; the last one to arrive says so to all.
    pub fn arrive(&self) -> Result<()> {
        self.store.set(&self.mark(self.index as usize), b"1")?;
        let n = self.store.add(&format!("{}/count", self.prefix), 1)?;
        if n >= self.ranks.len() as i64 {
            self.store.set(&format!("{}/all", self.prefix), b"1")?;
        }
        Ok(())
    }

    /// Waits until every participant arrived; past the deadline, [`Error::Timeout`] naming
    /// the global ranks whose marks are missing. `first_note` is said instead of where the
    /// marks are when participant 0 is among them (it may have had more to do: the unique id).
    pub fn wait_all(&self, first_note: Option<&str>) -> Result<()> {
        let began = Instant::now();
        let all = format!("{}/all", self.prefix);
        match self.store.wait(&[&all], self.left()) {
            Err(Error::Timeout { .. }) => {
                Err(self.missing_error(ms(began.elapsed()), None, first_note))
            }
            other => other,
        }
    }

    /// The global ranks whose marks are missing (`Err`: the store could not say), other than
    /// this participant. The first participant to ask (`PREFIX/missing/claim`) reads the
    /// marks and publishes the list at `PREFIX/missing`; the others read that list (when
    /// every participant times out together, one reads the marks instead of all of them),
    /// and read the marks themselves only when it does not come in time.
    pub fn missing(&self) -> Result<Vec<u32>> {
        let list = format!("{}/missing", self.prefix);
        let found = read_for_all(self.store, &list, MISSING_LIST_WAIT, rank_list(), || {
            self.read_marks()
        })?;
        // This participant came, whenever the list was read.
        let me = self.ranks.get(self.index as usize).copied();
        Ok(found.into_iter().filter(|&r| Some(r) != me).collect())
    }

    /// The global ranks whose marks are missing now: one store call per participant.
    fn read_marks(&self) -> Result<Vec<u32>> {
        let marked = (0..self.ranks.len())
            .map(|i| self.store.check(&[&self.mark(i)]))
            .collect::<Result<Vec<bool>>>()?;
        Ok(oxccl_rules::membership::missing_arrivals(self.ranks, &marked).collect())
    }

    /// The timeout of this participant after `after_ms`, naming who never arrived first (the
    /// text is cut at the error's capacity; [`oxccl_rules::membership::write_arrival_timeout`]
    /// decides it); `cause`: the backend's own timeout, when it was the backend that gave up.
    fn missing_error(
        &self,
        after_ms: u64,
        cause: Option<&Error>,
        first_note: Option<&str>,
    ) -> Error {
        use oxccl_rules::membership::{write_arrival_timeout, ArrivalStall, ArrivalTimeout};
        // Its own words only: the time is the error's already.
        let said = cause.map(|e| match e {
            Error::Timeout { what, .. } => what.to_string(),
            other => other.to_string(),
        });
        let missing = self.missing();
        let stall = ArrivalStall::of(
            match &missing {
                Ok(m) => Ok(m.as_slice()),
                Err(read) => Err(read),
            },
            said.as_deref(),
        );
        let prefix = self.store.full_key(&self.prefix);
        let t = ArrivalTimeout {
            what: &self.what,
            me: self.ranks.get(self.index as usize).copied().unwrap_or(0),
            prefix: &prefix,
            first: self.ranks.first().copied(),
            first_note,
        };
        let mut what = String::new();
        // Writing into a String cannot fail.
        let _ = write_arrival_timeout(&mut what, &t, stall);
        Error::Timeout {
            what: text!("{what}"),
            after_ms,
        }
    }

    /// A backend's failure to create, explained: its timeout becomes this creation's, naming
    /// the ranks that never arrived (if any, by then); other errors pass.
    pub fn explain(&self, e: Error) -> Error {
        match &e {
            Error::Timeout { after_ms, .. } => self.missing_error(*after_ms, Some(&e), None),
            _ => e,
        }
    }
}

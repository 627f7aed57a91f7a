//! The ranks' agreement through the store on a value every member must hold alike: the
//! tune table when a communicator is made, the windows a release frees.

use super::super::keys;
use crate::pg::arrival::Arrival;
use crate::store::Store;
use oxccl_core::{text, Error, Result};
use oxccl_rules::tune::file::TUNE_FILE_VAR;
use oxccl_rules::tune::release::write_disagreement;
use oxccl_rules::tune::TuneTable;
use std::time::Duration;

/// Who agrees: a group's members, as an agreement through the store needs them.
pub(crate) struct AgreeingGroup<'a> {
    /// The group's store.
    pub store: &'a dyn Store,
    /// The group's uid.
    pub uid: u64,
    /// This process's group rank; `None` when it is not a member.
    pub rank: Option<u32>,
    /// The members' global ranks, by group rank.
    pub ranks: &'a [u32],
    /// How long a member waits for the others.
    pub timeout: Duration,
}

/// Compares the ranks' tune tables through the store when a communicator is made, before any
/// operation on it (see [`agree_on`]), so on a mismatch every rank refuses alike (a window
/// registered on some ranks only would hang the others). Nothing is exchanged when this rank
/// has no table; a rank with one waits (up to the group's timeout) for the others'
/// fingerprints, so a rank without `OXCCL_TUNE_FILE` shows as the one that never wrote its key.
pub(crate) fn agree(table: Option<&TuneTable>, members: &AgreeingGroup<'_>) -> Result<()> {
    let Some(table) = table else {
        return Ok(());
    };
    let mine = format!("{:016x}", table.fingerprint());
    let hint = format!("its tune table (does every rank set {TUNE_FILE_VAR}?)");
    match agree_on(members, "tune", &mine, "tune table", &hint)? {
        None => Ok(()),
        Some(verdict) => Err(Error::invalid(
            "tune",
            format_args!(
                "the same tune table on every rank of group {} ({TUNE_FILE_VAR}): {verdict}",
                members.uid
            ),
        )),
    }
}

/// Whether every member of the group holds the same `mine` for `topic`, through the store,
/// in a handful of store calls per member whatever the group's size: group rank 0 publishes
/// its value; every other member reads it, and one that holds another value writes the
/// verdict (the first such write stands); then every member arrives ([`Arrival`]) and, once
/// all did, reads the verdict, so all ranks decide alike. `None`: they agree; `Some(why)`:
/// a difference, naming the ranks and their values (`what` names the value). A member that
/// never takes part is named after the group's timeout (`hint`: what it did not publish,
/// and the likely cause).
pub(crate) fn agree_on(
    inner: &AgreeingGroup<'_>,
    topic: &str,
    mine: &str,
    what: &str,
    hint: &str,
) -> Result<Option<String>> {
    let Some(rank) = inner.rank else {
        return Ok(None);
    };
    let store = inner.store;
    let key = |who: &str| keys::agreement(topic, inner.uid, who);
    let never_published = |ranks: &[u32], after_ms: u64| Error::Timeout {
        what: text!(
            "group rank{} {} never published {hint}",
            if ranks.len() == 1 { "" } else { "s" },
            ranks
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        after_ms,
    };
    let arrival = Arrival {
        store,
        prefix: key("arrival"),
        index: rank,
        ranks: inner.ranks,
        deadline: crate::deadline::deadline_after(inner.timeout),
        what: format!("the agreement on {what} of group {}", inner.uid),
    };
    let began = std::time::Instant::now();
    let first = inner.ranks.first().copied().unwrap_or(0);
    if rank == 0 {
        store.set(&key("0"), mine.as_bytes())?;
    } else {
        let theirs = store.get(&key("0"), arrival.left()).map_err(|e| match e {
            Error::Timeout { after_ms, .. } => never_published(&[0], after_ms),
            other => other,
        })?;
        if theirs != mine.as_bytes() {
            let me = inner.ranks.get(rank as usize).copied().unwrap_or(rank);
            let mut verdict = String::new();
            // Writing into a String cannot fail.
            let _ = write_disagreement(
                &mut verdict,
                what,
                me,
                mine,
                first,
                &String::from_utf8_lossy(&theirs),
            );
            store.compare_set(&key("verdict"), b"", verdict.as_bytes())?;
        }
    }
    arrival.arrive()?;
    match arrival.wait_all(None) {
        Ok(()) => {}
        Err(Error::Timeout { .. }) => {
            let after_ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
            let missing = arrival.missing()?;
            let group_ranks: Vec<u32> = missing
                .iter()
                .filter_map(|g| inner.ranks.iter().position(|r| r == g))
                .map(|i| i as u32)
                .collect();
            return Err(never_published(&group_ranks, after_ms));
        }
        Err(e) => return Err(e),
    }
    if !store.check(&[&key("verdict")])? {
        return Ok(None);
    }
    let verdict = store.get(&key("verdict"), LAST_READ)?;
    Ok(Some(String::from_utf8_lossy(&verdict).into_owned()))
}

/// The time given to read the verdict, which is there already when it is read.
const LAST_READ: Duration = Duration::from_millis(500);

//! The ranks' agreement through the store on a value every member must hold alike: the
//! tune table when a communicator is made, the windows a release frees.

use super::super::keys;
use super::file::TUNE_FILE_VAR;
use crate::store::Store;
use oxccl_core::tune::release::{write_disagreement, AGREED};
use oxccl_core::tune::TuneTable;
use oxccl_core::{text, Error, Result};
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

/// The least time [`agree_on`] gives a read past its deadline.
const LAST_READ: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether every member of the group holds the same `mine` for `topic`, through the store:
/// group rank 0 reads every rank's value and writes a verdict every rank reads, so all
/// ranks decide alike. `None`: they agree; `Some(why)`: the first difference, naming the
/// ranks and their values (`what` names the value). A rank that never writes its value is
/// named after the group's timeout (`hint`: what it did not publish, and the likely cause).
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
    let timeout = inner.timeout;
    let key = |r: &str| keys::agreement(topic, inner.uid, r);
    let waited = |e: Error, r: usize| match e {
        Error::Timeout { after_ms, .. } => Error::Timeout {
            what: text!("group rank {r} never published {hint}"),
            after_ms,
        },
        other => other,
    };
    store.set(&key(&rank.to_string()), mine.as_bytes())?;
    let verdict = if rank == 0 {
        // One deadline for all the reads (a read per rank each given the whole timeout kept
        // rank 0 up to (size - 1) timeouts, and the others' wait for the verdict ended first);
        // a read past it still gets a moment, for a value that is there already.
        let began = std::time::Instant::now();
        let left = || timeout.saturating_sub(began.elapsed()).max(LAST_READ);
        let mut verdict = String::from(AGREED);
        for (r, &global) in inner.ranks.iter().enumerate().skip(1) {
            let got = store
                .get(&key(&r.to_string()), left())
                .map_err(|e| waited(e, r))?;
            if got != mine.as_bytes() {
                verdict.clear();
                // Writing into a String cannot fail.
                let _ = write_disagreement(
                    &mut verdict,
                    what,
                    global,
                    &String::from_utf8_lossy(&got),
                    inner.ranks.first().copied().unwrap_or(0),
                    mine,
                );
                break;
            }
        }
        store.set(&key("verdict"), verdict.as_bytes())?;
        verdict
    } else {
        let got = store
            .get(&key("verdict"), timeout)
            .map_err(|e| waited(e, 0))?;
        String::from_utf8_lossy(&got).into_owned()
    };
    Ok((verdict != AGREED).then_some(verdict))
}

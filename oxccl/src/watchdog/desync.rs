//! Desync debugging (c10d's `TORCH_NCCL_DESYNC_DEBUG`), a group's part of it: this rank's
//! progress (the newest collective issued and seen complete), published in the store for the
//! other ranks, and, when a collective times out here, the report and verdict read from every
//! member's progress (the analysis is the core's `watchdog::desync`).

use super::lock::lock;
use crate::read_for_all::{read_for_all, Form};
use crate::store::Store;
use oxccl_core::OpKind;
use oxccl_rules::watchdog::desync::RankProgress;
use std::sync::Mutex;
use std::time::Duration;

/// Where the watchdog of group `uid`'s group rank `rank` writes its progress (desync debug;
/// listed with every other key of a process group in `pg::keys`).
pub(crate) fn desync_key(uid: u64, rank: u32) -> String {
    format!("oxccl/desync/{uid}/{rank}")
}

/// Where the first rank whose collective `seq` of group `uid` timed out publishes every
/// member's progress as it read it (see [`Desync::timeout_report`]).
pub(crate) fn desync_list_key(uid: u64, seq: u64) -> String {
    format!("oxccl/desync/{uid}/seq/{seq}")
}

/// Every member's progress as one value: `issued,completed` or `-` (unknown) per member, by
/// group rank, separated by `;`.
fn encode_list(read: &[(u32, Option<RankProgress>)]) -> String {
    let parts: Vec<String> = read
        .iter()
        .map(|(_, p)| p.map_or_else(|| "-".to_string(), |p| p.encode().to_string()))
        .collect();
    parts.join(";")
}

/// [`encode_list`]'s value read back for members of global ranks `ranks`; `None` when it
/// is not one (another length, a bad entry).
fn decode_list(v: &[u8], ranks: &[u32]) -> Option<Vec<(u32, Option<RankProgress>)>> {
    let parts: Vec<&[u8]> = v.split(|&b| b == b';').collect();
    if parts.len() != ranks.len() {
        return None;
    }
    ranks
        .iter()
        .zip(parts)
        .map(|(&g, p)| match p {
            b"-" => Some((g, None)),
            p => RankProgress::decode(p).ok().map(|p| (g, Some(p))),
        })
        .collect()
}

/// A group's desync-debug state: this rank's progress (kept by the watchdog) and what it last
/// published in the store.
pub(crate) struct Desync {
    /// The group's uid (its keys in the store name it).
    uid: u64,
    /// This rank's global rank.
    global_rank: u32,
    /// This rank in the group.
    pub group_rank: u32,
    /// The members' global ranks, by group rank.
    pub ranks: Vec<u32>,
    /// (now, last published).
    progress: Mutex<(RankProgress, Option<RankProgress>)>,
    /// The last report written on a timeout.
    pub report: Mutex<Option<String>>,
    /// The verdict of the last collective that timed out here (computed once per collective,
    /// by the watchdog or a blocking wait, whichever saw the timeout first).
    last: Mutex<Option<Verdict>>,
}

/// What desync debugging concluded of a collective that timed out on this rank: the global
/// ranks that never joined it (empty: every rank did, so the hang is elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// The collective's sequence number.
    pub seq: u64,
    /// The global ranks that never joined it, ascending.
    pub lagging: Vec<u32>,
}

impl Verdict {
    /// The note a timed-out work's error ends with (the rules'
    /// [`oxccl_rules::watchdog::desync::write_note`]).
    pub fn note(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = oxccl_rules::watchdog::desync::write_note(&mut s, &self.lagging);
        s
    }

    /// The head of an abort reason (first, so that a reason cut to the error's inline length
    /// still says it); `None` when no rank lagged (the rules'
    /// [`oxccl_rules::watchdog::desync::write_headline`]).
    pub fn headline(&self) -> Option<String> {
        let mut s = String::new();
        let wrote = oxccl_rules::watchdog::desync::write_headline(&mut s, self.seq, &self.lagging);
        wrote.unwrap_or(false).then_some(s)
    }
}

/// The time the rank that reads every member's progress is given per member, by the ranks
/// that wait for its list.
const PER_MEMBER_READ: Duration = Duration::from_micros(200);

/// How long a desync verdict waits for each rank's progress in the store.
pub(crate) const DESYNC_READ_LIMIT: Duration = Duration::from_secs(2);

impl Desync {
    /// Group `uid`'s state on the rank of global rank `global_rank`, group rank `group_rank`
    /// among members of global ranks `ranks`; nothing noted yet.
    pub fn new(uid: u64, global_rank: u32, group_rank: u32, ranks: Vec<u32>) -> Desync {
        Desync {
            uid,
            global_rank,
            group_rank,
            ranks,
            progress: Mutex::new((RankProgress::default(), None)),
            report: Mutex::new(None),
            last: Mutex::new(None),
        }
    }

    /// Notes a collective issued (`completed == false`) or seen complete.
    pub fn note(&self, seq: u64, completed: bool) {
        let mut p = lock(&self.progress);
        p.0.issued = p.0.issued.max(seq);
        if completed {
            p.0.completed = p.0.completed.max(seq);
        }
    }

    /// Writes this rank's progress to the store when it changed since the last write (at most
    /// one store call per group per watchdog pass). A store failure is logged, and retried at
    /// the next change.
    pub fn publish(&self, store: &dyn Store) {
        let now = {
            let mut p = lock(&self.progress);
            if p.1 == Some(p.0) {
                return;
            }
            p.1 = Some(p.0);
            p.0
        };
        let key = desync_key(self.uid, self.group_rank);
        if let Err(e) = store.set(&key, now.encode().as_bytes()) {
            log::warn!("oxccl desync debug: cannot publish progress at `{key}`: {e}");
            lock(&self.progress).1 = None;
        }
    }

    /// The desync report of a collective `seq` (`op`) that timed out here: every member's
    /// published progress read from `store` (each read bounded by `limit`), analysed by the
    /// core ([`oxccl_rules::watchdog::desync::write_report`]). `None` when the store could not
    /// be read (the report kept then says so). The report is also kept for
    /// `ProcessGroup::desync_report`. With it, the global ranks that never joined the
    /// collective.
    pub fn timeout_report(
        &self,
        store: &dyn Store,
        seq: u64,
        op: OpKind,
        limit: Duration,
    ) -> Option<(String, Vec<u32>)> {
        // Publish this rank's own last state first, so the report has it.
        self.publish(store);
        let reports = self.every_progress(store, seq, limit);
        let reachable = reports.is_some();
        let mut reports = reports.unwrap_or_default();
        // This rank's own entry is what it knows now (a list read by another rank may be older).
        let mine = lock(&self.progress).0;
        if let Some(entry) = reports.get_mut(self.group_rank as usize) {
            entry.1 = Some(mine);
        }
        if !reachable {
            // No verdict: ranks whose progress could not be read are not known to lag.
            *lock(&self.report) = Some(format!(
                "desync report: collective #{seq} ({}) timed out on rank {}; the store could not be read, so the other ranks' progress is unknown",
                op.name(),
                self.global_rank
            ));
            return None;
        }
        let mut text = String::new();
        let _ = oxccl_rules::watchdog::desync::write_report(
            &mut text,
            self.global_rank,
            seq,
            op.name(),
            &reports,
        );
        *lock(&self.report) = Some(text.clone());
        let lagging = oxccl_rules::watchdog::desync::lagging(seq, &reports).collect();
        Some((text, lagging))
    }

    /// Every member's published progress, by group rank: read by the first rank whose
    /// collective `seq` timed out (it claims `…/seq/<seq>/claim`) and published for the others
    /// at `oxccl/desync/<uid>/seq/<seq>`, so when every rank times out on the same hang one
    /// rank reads every member's key instead of each of them; a rank whose list does not
    /// come within `limit` reads the keys itself. `None` when the store could not be read.
    fn every_progress(
        &self,
        store: &dyn Store,
        seq: u64,
        limit: Duration,
    ) -> Option<Vec<(u32, Option<RankProgress>)>> {
        let list = desync_list_key(self.uid, seq);
        // The claimant makes two calls per member: give it the time they take.
        let wait = limit + PER_MEMBER_READ * self.ranks.len() as u32;
        let form = Form {
            encode: |read: &Vec<(u32, Option<RankProgress>)>| encode_list(read).into_bytes(),
            decode: |b: &[u8]| decode_list(b, &self.ranks),
        };
        match read_for_all(store, &list, wait, form, || self.read_every(store, limit)) {
            Ok(every) => Some(every),
            Err(e) => {
                log::warn!(
                    "oxccl desync debug: store unreachable ({e}): the other ranks' progress is unknown"
                );
                None
            }
        }
    }

    /// Every member's published progress, one key each. After the first failed store call
    /// the rest are not read (its error): a store that is gone or cut off would otherwise cost
    /// its timeout once per rank, on the watchdog's thread, and a heartbeat monitor would end
    /// the process meanwhile.
    fn read_every(
        &self,
        store: &dyn Store,
        limit: Duration,
    ) -> oxccl_core::Result<Vec<(u32, Option<RankProgress>)>> {
        let mut out = Vec::with_capacity(self.ranks.len());
        for (i, &global) in self.ranks.iter().enumerate() {
            let key = desync_key(self.uid, i as u32);
            let read = match store.check(&[&key])? {
                true => store.get(&key, limit).ok(),
                false => None,
            };
            out.push((global, read.and_then(|v| RankProgress::decode(&v).ok())));
        }
        Ok(out)
    }

    /// The desync verdict of collective `seq` (`op`) that timed out here, from the progress
    /// in `store`: computed (and its report kept, see [`Desync::timeout_report`]) by the first
    /// caller, the same for the later ones. `None` for point-to-point operations (they have a
    /// sequence of their own, and a peer that skips one is not behind the group).
    pub fn verdict(&self, store: &dyn Store, seq: u64, op: OpKind) -> Option<Verdict> {
        if matches!(op, OpKind::Send | OpKind::Recv) {
            return None;
        }
        if let Some(v) = lock(&self.last).as_ref().filter(|v| v.seq == seq) {
            return Some(v.clone());
        }
        let (_, lagging) = self.timeout_report(store, seq, op, DESYNC_READ_LIMIT)?;
        let v = Verdict { seq, lagging };
        *lock(&self.last) = Some(v.clone());
        Some(v)
    }
}

/// Whether a work counts in the desync sequence: collectives (point-to-point operations have
/// a sequence of their own, and a peer that skips one is not behind the group).
pub(crate) fn counts_in_desync(info: &oxccl_core::state::work::WorkInfo) -> bool {
    !matches!(
        info.kind,
        oxccl_core::OpKind::Send | oxccl_core::OpKind::Recv
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A store that is gone: every call fails, and is counted.
    struct Gone {
        calls: AtomicUsize,
    }

    impl Store for Gone {
        fn set(&self, _: &str, _: &[u8]) -> oxccl_core::Result<()> {
            Err(self.fail())
        }
        fn get(&self, _: &str, _: Duration) -> oxccl_core::Result<Vec<u8>> {
            Err(self.fail())
        }
        fn add(&self, _: &str, _: i64) -> oxccl_core::Result<i64> {
            Err(self.fail())
        }
        fn wait(&self, _: &[&str], _: Duration) -> oxccl_core::Result<()> {
            Err(self.fail())
        }
        fn check(&self, _: &[&str]) -> oxccl_core::Result<bool> {
            Err(self.fail())
        }
        fn compare_set(&self, _: &str, _: &[u8], _: &[u8]) -> oxccl_core::Result<Vec<u8>> {
            Err(self.fail())
        }
        fn delete(&self, _: &str) -> oxccl_core::Result<bool> {
            Err(self.fail())
        }
        fn num_keys(&self) -> oxccl_core::Result<u64> {
            Err(self.fail())
        }
        fn timeout(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    impl Gone {
        fn fail(&self) -> oxccl_core::Error {
            self.calls.fetch_add(1, Ordering::Relaxed);
            oxccl_core::Error::Remote {
                detail: oxccl_core::text!("connection refused"),
            }
        }
    }

    /// Group 0's state on rank 0 of `ranks`.
    fn desync(ranks: u32) -> Desync {
        Desync::new(0, 0, 0, (0..ranks).collect())
    }

    #[test]
    fn a_gone_store_costs_one_failed_read_not_one_per_rank() {
        let gone = Arc::new(Gone {
            calls: AtomicUsize::new(0),
        });
        let d = desync(64);
        // No verdict: nobody's progress is known, so nobody is named as lagging.
        assert_eq!(
            d.timeout_report(&*gone, 5, OpKind::AllReduce, Duration::from_secs(1)),
            None
        );
        // This rank's publish, then the first check; the other 63 ranks are not asked.
        assert_eq!(gone.calls.load(Ordering::Relaxed), 2);
        assert_eq!(d.verdict(&*gone, 5, OpKind::AllReduce), None);
        assert_eq!(gone.calls.load(Ordering::Relaxed), 4);
        let kept = d.report.lock().unwrap().clone();
        assert_eq!(
            kept.as_deref(),
            Some(
                "desync report: collective #5 (all_reduce) timed out on rank 0; the store could \
                 not be read, so the other ranks' progress is unknown"
            )
        );
    }

    #[test]
    fn a_live_store_is_read_for_every_rank() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let d = desync(3);
        // Ranks 0 and 1 issued and completed seq 5; rank 2 never got to it.
        for r in [1u32, 2] {
            let p = RankProgress {
                issued: if r == 1 { 5 } else { 4 },
                completed: 4,
            };
            store.set(&desync_key(0, r), p.encode().as_bytes()).unwrap();
        }
        d.note(5, false);
        let (_, lagging) = d
            .timeout_report(&*store, 5, OpKind::AllReduce, Duration::from_secs(1))
            .unwrap();
        assert_eq!(lagging, [2]);
    }

    /// The second rank to time out on a collective reads the first one's list: every member's
    /// key gone meanwhile, its verdict is still the first one's.
    #[test]
    fn the_ranks_after_the_first_read_its_list() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let p = |issued| RankProgress {
            issued,
            completed: 4,
        };
        store
            .set(&desync_key(0, 2), p(4).encode().as_bytes())
            .unwrap();
        let first = Desync::new(0, 0, 0, vec![0, 1, 2]);
        let second = Desync::new(0, 1, 1, vec![0, 1, 2]);
        first.note(5, false);
        second.note(5, false);
        second.publish(&*store);
        let (_, lagging) = first
            .timeout_report(&*store, 5, OpKind::AllReduce, Duration::from_secs(1))
            .unwrap();
        assert_eq!(lagging, [2]);
        assert_eq!(
            store
                .get(&desync_list_key(0, 5), Duration::from_secs(1))
                .unwrap(),
            b"5,0;5,0;4,4"
        );
        for r in 0..3 {
            store.delete(&desync_key(0, r)).unwrap();
        }
        let (_, lagging) = second
            .timeout_report(&*store, 5, OpKind::AllReduce, Duration::from_secs(1))
            .unwrap();
        assert_eq!(lagging, [2]);
        let five = RankProgress {
            issued: 5,
            completed: 0,
        };
        assert_eq!(
            decode_list(b"5,0;-", &[0, 1]),
            Some(vec![(0, Some(five)), (1, None)])
        );
        assert_eq!(decode_list(b"5,0", &[0, 1]), None, "one entry per member");
        assert_eq!(decode_list(b"5,0;x", &[0, 1]), None);
    }
}

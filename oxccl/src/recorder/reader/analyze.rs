//! The diagnosis of a hang from every rank's dump: which ranks stopped and where, what the
//! others were doing, mismatched collectives, and the culprits. Pure over the parsed dumps.
//!
//! Per process group, with the collective sequence numbers (equal across ranks for the same
//! call, seed rule):
//! - a rank *stopped* at its first entry not seen completed;
//! - the group's *hang point* is the lowest collective seq at which a rank stopped;
//! - a dumped member whose last enqueued collective is below the hang point *never issued* it:
//!   the others wait for it (seed case 30's shape, and a rank that skipped an op);
//! - at one seq, ranks at a different op, size or dtype than the majority are *mismatched*;
//!   the earliest mismatch names the culprits (later ones follow from the shift);
//! - a rank stopped in a send or receive whose dumped peer has no pending counterpart: the
//!   peer never posted it;
//! - members that never dumped are suspects when the group has a stopped rank.

use super::parse::{DumpEntry, RankDump};
use oxccl_core::text::Escaped;
use std::collections::{BTreeMap, BTreeSet};

/// One operation of one rank, as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpAt {
    /// Collective seq (p2p seq for point-to-point).
    pub seq: u64,
    /// Whether it is point-to-point.
    pub is_p2p: bool,
    /// Its profiling name.
    pub op: String,
    /// Input sizes.
    pub input_sizes: Vec<Vec<u64>>,
    /// Output sizes.
    pub output_sizes: Vec<Vec<u64>>,
    /// Input dtypes.
    pub input_dtypes: Vec<String>,
    /// Output dtypes.
    pub output_dtypes: Vec<String>,
    /// "scheduled", "started" or "completed".
    pub state: String,
    /// Its record id in that rank's ring.
    pub record_id: u64,
}

impl OpAt {
    fn of(e: &DumpEntry) -> OpAt {
        OpAt {
            seq: if e.is_p2p {
                e.p2p_seq
            } else {
                e.collective_seq
            },
            is_p2p: e.is_p2p,
            op: e.profiling_name.clone(),
            input_sizes: e.input_sizes.clone(),
            output_sizes: e.output_sizes.clone(),
            input_dtypes: e.input_dtypes.clone(),
            output_dtypes: e.output_dtypes.clone(),
            state: e.state.clone(),
            record_id: e.record_id,
        }
    }

    /// "seq 2 nccl:all_reduce in [[3, 4]] Float out [[3, 4]] Float, started"; the names from
    /// the dump escaped (`oxccl_core::text`).
    pub fn describe(&self) -> String {
        format!(
            "{} {} {} in {:?} {} out {:?} {}, {}",
            if self.is_p2p { "p2p seq" } else { "seq" },
            self.seq,
            Escaped(&self.op),
            self.input_sizes,
            Escaped(&self.input_dtypes.join("/")),
            self.output_sizes,
            Escaped(&self.output_dtypes.join("/")),
            Escaped(&self.state)
        )
    }
}

/// What one rank was doing in one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankStatus {
    /// The global rank.
    pub rank: u32,
    /// Its first entry not seen completed, if any.
    pub stopped_at: Option<OpAt>,
    /// Its last collective seq enqueued (in the ring).
    pub last_enqueued: Option<u64>,
    /// Its last collective seq seen completed.
    pub last_completed: Option<u64>,
}

/// How a rank's op differs from the others' at the same seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchKind {
    /// Another operation.
    Op,
    /// The same operation with other sizes.
    Size,
    /// The same operation and sizes with other element types.
    Dtype,
}

impl MismatchKind {
    /// "op", "size", "dtype".
    pub fn name(self) -> &'static str {
        match self {
            MismatchKind::Op => "op",
            MismatchKind::Size => "size",
            MismatchKind::Dtype => "dtype",
        }
    }
}

/// A rank at a different op, size or dtype than the majority at one seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The collective seq.
    pub seq: u64,
    /// The rank that differs.
    pub rank: u32,
    /// How.
    pub kind: MismatchKind,
    /// The majority's op.
    pub expected: OpAt,
    /// This rank's.
    pub found: OpAt,
    /// Whether the majority was a tie (the lowest rank's side was taken as expected).
    pub ambiguous: bool,
}

/// Why a rank is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Its last collective is below the one the others stopped at: they wait for it.
    NeverIssued {
        /// The seq the others stopped at.
        seq: u64,
        /// The op they stopped at.
        op: String,
        /// Its last enqueued seq.
        last_enqueued: Option<u64>,
    },
    /// It issued something else at the earliest mismatched seq.
    Mismatch {
        /// The seq.
        seq: u64,
        /// How it differs.
        kind: MismatchKind,
    },
    /// A rank stopped in a send or receive with this rank, which dumped but has no
    /// pending counterpart: it never posted it.
    PeerNeverPosted {
        /// The rank left waiting.
        waiting: u32,
        /// What that rank waits in ("nccl:send 1->0").
        op: String,
    },
    /// A member of a group with stopped ranks that wrote no dump (dead, or stuck harder).
    NoDump,
}

/// A rank the analysis blames, in one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Culprit {
    /// The global rank.
    pub rank: u32,
    /// The group's name.
    pub pg: String,
    /// Why.
    pub reason: Reason,
}

/// The findings of one process group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupReport {
    /// Its name.
    pub pg: String,
    /// Its description.
    pub desc: String,
    /// Its global ranks.
    pub ranks: Vec<u32>,
    /// The lowest collective seq a rank stopped at.
    pub hang_seq: Option<u64>,
    /// Each dumped member's status, by rank.
    pub statuses: Vec<RankStatus>,
    /// Mismatches, by seq then rank.
    pub mismatches: Vec<Mismatch>,
    /// Every send and receive not seen completed: (rank, profiling name).
    pub pending_p2p: Vec<(u32, String)>,
}

/// Why the analysis thinks a rank's dump is missing, from what the other ranks' dumps noted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissingWhy {
    /// A failing rank waited for every rank's dump and this one never reported it in the
    /// store: it was stuck where its dump could not run, had no dump directory, or was gone.
    NeverReported {
        /// The rank that waited.
        waiter: u32,
        /// How long it waited, ms.
        waited_ms: u64,
    },
    /// A rank could not reach the store when it dumped: the store's host (under `env://`
    /// without an agent, rank 0's process) was likely gone, and with it the signal that
    /// tells every rank to dump.
    StoreUnreachable {
        /// The rank that saw it.
        seen_by: u32,
        /// The store's error, as it noted it.
        error: String,
    },
    /// No dump says anything that explains it.
    Unknown,
}

/// A rank that wrote no dump, and why the analysis thinks so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingDump {
    /// The global rank.
    pub rank: u32,
    /// Why.
    pub why: MissingWhy,
}

/// The whole diagnosis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// The world size the dumps state (the largest, if they disagree).
    pub world_size: Option<u32>,
    /// The ranks that dumped.
    pub dumped: Vec<u32>,
    /// The ranks below the world size that did not.
    pub missing: Vec<u32>,
    /// Each missing rank with why its dump is thought missing (same order as `missing`).
    pub missing_why: Vec<MissingDump>,
    /// Per group, by name.
    pub groups: Vec<GroupReport>,
    /// The ranks blamed: mismatches first, then ranks that never issued a collective or never
    /// posted a send/receive, then missing dumps.
    pub culprits: Vec<Culprit>,
}

impl Analysis {
    /// Whether a hang shows: a rank stopped, or a culprit was named.
    pub fn hang_found(&self) -> bool {
        !self.culprits.is_empty()
            || self
                .groups
                .iter()
                .any(|g| g.statuses.iter().any(|s| s.stopped_at.is_some()))
    }
}

/// Analyzes the dumps of one job.
pub fn analyze(dumps: &[RankDump]) -> Analysis {
    let dumped: BTreeSet<u32> = dumps.iter().map(|d| d.rank).collect();
    let world_size = dumps.iter().filter_map(|d| d.world_size).max();
    let missing: Vec<u32> = world_size
        .map(|w| (0..w).filter(|r| !dumped.contains(r)).collect())
        .unwrap_or_default();

    // Groups by name: desc and members from the first config naming them, else the ranks
    // whose entries name them.
    let mut groups: BTreeMap<String, (String, BTreeSet<u32>)> = BTreeMap::new();
    for d in dumps {
        for pg in &d.pgs {
            let g = groups
                .entry(pg.name.clone())
                .or_insert_with(|| (pg.desc.clone(), BTreeSet::new()));
            if g.1.is_empty() {
                g.1.extend(pg.ranks.iter().copied());
            }
        }
    }
    for d in dumps {
        for e in &d.entries {
            let g = groups
                .entry(e.pg_name.clone())
                .or_insert_with(|| (e.pg_desc.clone(), BTreeSet::new()));
            if !d.pgs.iter().any(|p| p.name == e.pg_name) {
                g.1.insert(d.rank);
            }
        }
    }

    let mut reports = Vec::new();
    let mut mismatch_culprits = Vec::new();
    let mut never_culprits = Vec::new();
    let mut nodump_culprits = Vec::new();
    for (name, (desc, members)) in groups {
        let report = group_report(&name, &desc, &members, dumps);
        let stopped: Vec<&RankStatus> = report
            .statuses
            .iter()
            .filter(|s| s.stopped_at.is_some())
            .collect();
        if let Some(first) = report.mismatches.first() {
            for m in report.mismatches.iter().filter(|m| m.seq == first.seq) {
                mismatch_culprits.push(Culprit {
                    rank: m.rank,
                    pg: name.clone(),
                    reason: Reason::Mismatch {
                        seq: m.seq,
                        kind: m.kind,
                    },
                });
            }
        }
        if let Some(seq) = report.hang_seq {
            let op = stopped
                .iter()
                .filter_map(|s| s.stopped_at.as_ref())
                .find(|o| !o.is_p2p && o.seq == seq)
                .map(|o| o.op.clone())
                .unwrap_or_default();
            for s in &report.statuses {
                if s.last_enqueued.is_none_or(|l| l < seq) {
                    never_culprits.push(Culprit {
                        rank: s.rank,
                        pg: name.clone(),
                        reason: Reason::NeverIssued {
                            seq,
                            op: op.clone(),
                            last_enqueued: s.last_enqueued,
                        },
                    });
                }
            }
        }
        never_culprits.extend(p2p_culprits(&name, &report, &members, &dumped));
        if !stopped.is_empty() {
            for &r in members.iter().filter(|r| !dumped.contains(r)) {
                nodump_culprits.push(Culprit {
                    rank: r,
                    pg: name.clone(),
                    reason: Reason::NoDump,
                });
            }
        }
        reports.push(report);
    }
    let mut culprits = mismatch_culprits;
    culprits.extend(never_culprits);
    culprits.extend(nodump_culprits);
    let missing_why = missing
        .iter()
        .map(|&rank| MissingDump {
            rank,
            why: missing_why(rank, dumps),
        })
        .collect();
    Analysis {
        world_size,
        dumped: dumped.into_iter().collect(),
        missing,
        missing_why,
        groups: reports,
        culprits,
    }
}

/// Why `rank` wrote no dump, by the notes of those that did: a failing rank's wait that
/// names it as never reported first (the most direct evidence), then a store found gone.
fn missing_why(rank: u32, dumps: &[RankDump]) -> MissingWhy {
    let notes = || {
        dumps
            .iter()
            .filter_map(|d| d.note.as_ref().map(|n| (d.rank, n)))
    };
    let waited = notes().find_map(|(by, n)| {
        let w = n.wait.as_ref()?;
        w.unreported
            .contains(&rank)
            .then_some(MissingWhy::NeverReported {
                waiter: by,
                waited_ms: w.waited_ms,
            })
    });
    let gone = || {
        notes().find_map(|(by, n)| {
            n.store_error
                .as_ref()
                .map(|e| MissingWhy::StoreUnreachable {
                    seen_by: by,
                    error: e.clone(),
                })
        })
    };
    waited.or_else(gone).unwrap_or(MissingWhy::Unknown)
}

/// "nccl:send 1->0" → (send, 1, 0); "nccl:recv 0<-1" → (recv, 0, 1): (kind, self, peer) in
/// group ranks.
fn p2p_parts(op: &str) -> Option<(&str, u32, u32)> {
    let body = op.rsplit(':').next()?;
    let (kind, ends) = body.split_once(' ')?;
    let (a, b) = match kind {
        "send" => ends.split_once("->")?,
        "recv" => ends.split_once("<-")?,
        _ => return None,
    };
    Some((kind, a.trim().parse().ok()?, b.trim().parse().ok()?))
}

/// Dumped peers of stopped sends/receives that have no pending counterpart.
fn p2p_culprits(
    pg: &str,
    report: &GroupReport,
    members: &BTreeSet<u32>,
    dumped: &BTreeSet<u32>,
) -> Vec<Culprit> {
    // Profiling names carry group ranks; the group's global ranks in order map them back.
    let global: Vec<u32> = members.iter().copied().collect();
    let mut out: Vec<Culprit> = Vec::new();
    for st in &report.statuses {
        let Some(at) = st.stopped_at.as_ref().filter(|a| a.is_p2p) else {
            continue;
        };
        let Some((kind, me, peer)) = p2p_parts(&at.op) else {
            continue;
        };
        let Some(&peer_global) = usize::try_from(peer).ok().and_then(|p| global.get(p)) else {
            continue;
        };
        if !dumped.contains(&peer_global) || out.iter().any(|c| c.rank == peer_global) {
            continue;
        }
        let want = if kind == "send" { "recv" } else { "send" };
        let posted = report
            .pending_p2p
            .iter()
            .filter(|(r, _)| *r == peer_global)
            .any(|(_, op)| p2p_parts(op) == Some((want, peer, me)));
        if !posted {
            out.push(Culprit {
                rank: peer_global,
                pg: pg.to_string(),
                reason: Reason::PeerNeverPosted {
                    waiting: st.rank,
                    op: at.op.clone(),
                },
            });
        }
    }
    out
}

fn group_report(
    name: &str,
    desc: &str,
    members: &BTreeSet<u32>,
    dumps: &[RankDump],
) -> GroupReport {
    let mut statuses = Vec::new();
    // seq → (rank, entry) of the collectives, for the mismatch check.
    let mut by_seq: BTreeMap<u64, Vec<(u32, &DumpEntry)>> = BTreeMap::new();
    let mut pending_p2p = Vec::new();
    for d in dumps.iter().filter(|d| members.contains(&d.rank)) {
        let mine: Vec<&DumpEntry> = d.entries.iter().filter(|e| e.pg_name == name).collect();
        let colls = mine.iter().filter(|e| !e.is_p2p);
        pending_p2p.extend(
            mine.iter()
                .filter(|e| e.is_p2p && !e.completed())
                .map(|e| (d.rank, e.profiling_name.clone())),
        );
        statuses.push(RankStatus {
            rank: d.rank,
            stopped_at: mine.iter().find(|e| !e.completed()).map(|e| OpAt::of(e)),
            last_enqueued: colls.clone().map(|e| e.collective_seq).max(),
            last_completed: colls
                .clone()
                .filter(|e| e.completed())
                .map(|e| e.collective_seq)
                .max(),
        });
        for e in colls {
            by_seq
                .entry(e.collective_seq)
                .or_default()
                .push((d.rank, e));
        }
    }
    let hang_seq = statuses
        .iter()
        .filter_map(|s| s.stopped_at.as_ref())
        .filter(|o| !o.is_p2p)
        .map(|o| o.seq)
        .min();
    let mut mismatches = Vec::new();
    for (seq, at) in by_seq {
        mismatches.extend(mismatches_at(seq, &at));
    }
    GroupReport {
        pg: name.to_string(),
        desc: desc.to_string(),
        ranks: members.iter().copied().collect(),
        hang_seq,
        statuses,
        mismatches,
        pending_p2p,
    }
}

/// Ops whose sizes legitimately differ across ranks (uneven splits, roots).
fn sizes_may_differ(op: &str) -> bool {
    let kind = op.rsplit(':').next().unwrap_or(op);
    matches!(
        kind,
        "all_to_all" | "all_to_all_v" | "all_gather_v" | "reduce_scatter_v" | "gather" | "scatter"
    )
}

fn mismatches_at(seq: u64, at: &[(u32, &DumpEntry)]) -> Vec<Mismatch> {
    // Group the ranks by what they issued; the largest group is expected (ties: the group of
    // the lowest rank, flagged ambiguous).
    let sig = |e: &DumpEntry| {
        let sized = !sizes_may_differ(&e.profiling_name);
        (
            e.profiling_name.clone(),
            if sized {
                e.input_sizes.clone()
            } else {
                Vec::new()
            },
            if sized {
                e.output_sizes.clone()
            } else {
                Vec::new()
            },
            e.input_dtypes.clone(),
            e.output_dtypes.clone(),
        )
    };
    // Classes in order of first appearance (deterministic), found through a map (thousands of
    // ranks stay linear).
    let mut index = std::collections::HashMap::new();
    let mut classes: Vec<Vec<(u32, &DumpEntry)>> = Vec::new();
    for &(r, e) in at {
        let i = *index.entry(sig(e)).or_insert_with(|| {
            classes.push(Vec::new());
            classes.len() - 1
        });
        classes[i].push((r, e));
    }
    if classes.len() < 2 {
        return Vec::new();
    }
    let most = classes.iter().map(Vec::len).max().unwrap_or(0);
    let ambiguous = classes.iter().filter(|v| v.len() == most).count() > 1;
    // `at` is in rank order, so the first class of the largest size holds the lowest rank.
    let Some(expected_idx) = classes.iter().position(|v| v.len() == most) else {
        return Vec::new();
    };
    let expected = classes[expected_idx][0].1;
    let mut out = Vec::new();
    for (i, v) in classes.iter().enumerate() {
        if i == expected_idx {
            continue;
        }
        for &(rank, e) in v {
            let sizes_equal = sizes_may_differ(&e.profiling_name)
                || (e.input_sizes == expected.input_sizes
                    && e.output_sizes == expected.output_sizes);
            let kind = if e.profiling_name != expected.profiling_name {
                MismatchKind::Op
            } else if !sizes_equal {
                MismatchKind::Size
            } else {
                MismatchKind::Dtype
            };
            out.push(Mismatch {
                seq,
                rank,
                kind,
                expected: OpAt::of(expected),
                found: OpAt::of(e),
                ambiguous,
            });
        }
    }
    out.sort_by_key(|m| m.rank);
    out
}

#[cfg(test)]
#[path = "analyze_tests.rs"]
mod tests;

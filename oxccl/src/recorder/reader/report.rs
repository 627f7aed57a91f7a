//! The analysis in words and as JSON (what `oxccl trace` prints). Names read from the dumps
//! are escaped in the words (`oxccl_core::text`); the JSON keeps them exact.

use super::analyze::{
    Analysis, Culprit, GroupReport, Mismatch, MissingWhy, OpAt, RankStatus, Reason,
};
use crate::recorder::rank_ranges;
use oxccl_core::text::Escaped;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Lines of mismatches printed per group in words (all of them are in the JSON).
const MISMATCH_LINES: usize = 10;

/// "rank 3" or "ranks 0-2, 4".
fn ranks_word(ranks: &[u32]) -> String {
    if ranks.len() == 1 {
        format!("rank {}", ranks[0])
    } else {
        format!("ranks {}", rank_ranges(ranks))
    }
}

fn culprit_line(c: &Culprit) -> String {
    match &c.reason {
        Reason::Mismatch { seq, kind } => format!(
            "rank {}: issued a different {} at collective seq {seq} of group \"{}\"",
            c.rank,
            kind.name(),
            Escaped(&c.pg)
        ),
        Reason::NeverIssued {
            seq,
            op,
            last_enqueued,
        } => format!(
            "rank {}: never issued collective seq {seq} ({}) of group \"{}\" that the others \
             wait in (its last: {})",
            c.rank,
            Escaped(op),
            Escaped(&c.pg),
            last_enqueued.map_or("none".to_string(), |l| format!("seq {l}"))
        ),
        Reason::PeerNeverPosted { waiting, op } => format!(
            "rank {}: never posted the counterpart of rank {waiting}'s {} in group \"{}\"",
            c.rank,
            Escaped(op),
            Escaped(&c.pg)
        ),
        Reason::NoDump => format!(
            "rank {}: wrote no dump, and group \"{}\" has stopped ranks (dead or stuck)",
            c.rank,
            Escaped(&c.pg)
        ),
    }
}

/// Why a dump is thought missing, in words.
fn missing_text(why: &MissingWhy) -> String {
    match why {
        MissingWhy::NeverReported { waiter, waited_ms } => format!(
            "rank {waiter} waited {waited_ms} ms for every rank's dump and this one never \
             reported (stuck where its dump could not run, no OXCCL_TRACE_DIR there, or gone)"
        ),
        MissingWhy::StoreUnreachable { seen_by, error } => format!(
            "rank {seen_by} could not reach the store when it dumped ({}): the store's \
             host was likely gone (under env:// without an agent, rank 0 hosts it), and this \
             rank with it or cut off from the signal",
            Escaped(error)
        ),
        MissingWhy::Unknown => "no dump says why (no OXCCL_TRACE_DIR there, no \
             OXCCL_DUMP_ON_TIMEOUT, or it ended before the signal)"
            .to_string(),
    }
}

/// The analysis in words, one finding a line.
pub fn render_text(a: &Analysis) -> String {
    let mut s = String::new();
    let world = a
        .world_size
        .map_or("unknown".to_string(), |w| w.to_string());
    let _ = writeln!(
        s,
        "{} rank(s) dumped (world size {world}): {}",
        a.dumped.len(),
        rank_ranges(&a.dumped)
    );
    if !a.missing.is_empty() {
        let _ = writeln!(s, "never dumped: {}", ranks_word(&a.missing));
        for m in &a.missing_why {
            let _ = writeln!(s, "  rank {}: {}", m.rank, missing_text(&m.why));
        }
    }
    for g in &a.groups {
        render_group(&mut s, g);
    }
    if a.culprits.is_empty() {
        if a.hang_found() {
            let _ = writeln!(
                s,
                "no culprit: every rank stopped at the same operation, none is missing or \
                 different (look at the network or the devices)"
            );
        } else {
            let _ = writeln!(s, "no hang found: every recorded operation completed");
        }
    } else {
        let _ = writeln!(s, "culprits:");
        for c in &a.culprits {
            let _ = writeln!(s, "  {}", culprit_line(c));
        }
    }
    s
}

fn render_group(s: &mut String, g: &GroupReport) {
    let _ = writeln!(
        s,
        "group \"{}\" ({}), ranks {}:",
        Escaped(&g.pg),
        Escaped(&g.desc),
        rank_ranges(&g.ranks)
    );
    // Ranks that stopped at the same op print as one line.
    let mut stopped: Vec<(String, Vec<u32>)> = Vec::new();
    let mut idle: Vec<(String, Vec<u32>)> = Vec::new();
    for st in &g.statuses {
        let (list, key) = match &st.stopped_at {
            Some(op) => (&mut stopped, op.describe()),
            None => (&mut idle, idle_text(st)),
        };
        match list.iter_mut().find(|(k, _)| *k == key) {
            Some((_, r)) => r.push(st.rank),
            None => list.push((key, vec![st.rank])),
        }
    }
    if let Some(seq) = g.hang_seq {
        let _ = writeln!(s, "  hang at collective seq {seq}");
    }
    for (what, ranks) in &stopped {
        let _ = writeln!(s, "  stopped: {} at {what}", ranks_word(ranks));
    }
    for (what, ranks) in &idle {
        let _ = writeln!(s, "  others: {} {what}", ranks_word(ranks));
    }
    for m in g.mismatches.iter().take(MISMATCH_LINES) {
        let _ = writeln!(s, "  mismatch: {}", mismatch_text(m));
    }
    if g.mismatches.len() > MISMATCH_LINES {
        let _ = writeln!(
            s,
            "  … {} more mismatches (see --json)",
            g.mismatches.len() - MISMATCH_LINES
        );
    }
}

fn idle_text(st: &RankStatus) -> String {
    match st.last_completed {
        Some(l) => format!("completed everything recorded (last collective seq {l})"),
        None => "completed everything recorded (no collective)".to_string(),
    }
}

fn mismatch_text(m: &Mismatch) -> String {
    format!(
        "rank {} at {} where the others are at {}{}",
        m.rank,
        m.found.describe(),
        m.expected.describe(),
        if m.ambiguous {
            " (a tie: the lowest rank's side taken as expected)"
        } else {
            ""
        }
    )
}

fn op_json(o: &OpAt) -> Value {
    json!({
        "seq": o.seq, "is_p2p": o.is_p2p, "op": o.op,
        "input_sizes": o.input_sizes, "output_sizes": o.output_sizes,
        "input_dtypes": o.input_dtypes, "output_dtypes": o.output_dtypes,
        "state": o.state, "record_id": o.record_id,
    })
}

/// The analysis as JSON: `hang_found`, `world_size`, `dumped`, `missing`, `missing_why` (each
/// with `rank`, `why`, `text` and its details), `groups` (each with
/// `statuses` and `mismatches`) and `culprits` (each with `rank`, `pg`, `reason` and its
/// details).
pub fn to_json(a: &Analysis) -> Value {
    let groups: Vec<Value> = a
        .groups
        .iter()
        .map(|g| {
            json!({
                "pg": g.pg, "desc": g.desc, "ranks": g.ranks, "hang_seq": g.hang_seq,
                "statuses": g.statuses.iter().map(|st| json!({
                    "rank": st.rank,
                    "stopped_at": st.stopped_at.as_ref().map(op_json),
                    "last_enqueued": st.last_enqueued,
                    "last_completed": st.last_completed,
                })).collect::<Vec<_>>(),
                "mismatches": g.mismatches.iter().map(|m| json!({
                    "seq": m.seq, "rank": m.rank, "kind": m.kind.name(),
                    "expected": op_json(&m.expected), "found": op_json(&m.found),
                    "ambiguous": m.ambiguous,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let culprits: Vec<Value> = a
        .culprits
        .iter()
        .map(|c| {
            let mut v = json!({ "rank": c.rank, "pg": c.pg, "text": culprit_line(c) });
            let extra = match &c.reason {
                Reason::Mismatch { seq, kind } => {
                    json!({ "reason": "mismatch", "seq": seq, "kind": kind.name() })
                }
                Reason::NeverIssued {
                    seq,
                    op,
                    last_enqueued,
                } => json!({
                    "reason": "never_issued", "seq": seq, "op": op,
                    "last_enqueued": last_enqueued,
                }),
                Reason::PeerNeverPosted { waiting, op } => json!({
                    "reason": "peer_never_posted", "waiting": waiting, "op": op,
                }),
                Reason::NoDump => json!({ "reason": "no_dump" }),
            };
            if let (Some(obj), Value::Object(more)) = (v.as_object_mut(), extra) {
                obj.extend(more);
            }
            v
        })
        .collect();
    json!({
        "hang_found": a.hang_found(),
        "world_size": a.world_size,
        "dumped": a.dumped,
        "missing": a.missing,
        "missing_why": a.missing_why.iter().map(|m| {
            let mut v = match &m.why {
                MissingWhy::NeverReported { waiter, waited_ms } => json!({
                    "why": "never_reported", "waiter": waiter, "waited_ms": waited_ms,
                }),
                MissingWhy::StoreUnreachable { seen_by, error } => json!({
                    "why": "store_unreachable", "seen_by": seen_by, "error": error,
                }),
                MissingWhy::Unknown => json!({ "why": "unknown" }),
            };
            v["rank"] = json!(m.rank);
            v["text"] = json!(missing_text(&m.why));
            v
        }).collect::<Vec<_>>(),
        "groups": groups,
        "culprits": culprits,
    })
}

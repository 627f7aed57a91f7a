//! The process group's pure texts and choices around collective creation and release, against
//! models written here: the folded rank lists (`desync::write_ranks`, read back and expanded,
//! give the ranks written), the desync verdict's note and headline, the members missing from
//! the arrival marks and the text of a creation's timeout, the release agreement's list (equal
//! texts exactly for equal lists) and its disagreement, and the tune table's choice for a send
//! or receive (never a window).

use arbitrary::{Arbitrary, Unstructured};
use oxccl_core::{DataType, OpKind};
use oxccl_rules::membership::{
    missing_arrivals, write_arrival_timeout, ArrivalStall, ArrivalTimeout,
};
use oxccl_rules::tune::release::{write_disagreement, write_release_list};
use oxccl_rules::tune::{RegMode, TuneRow, TuneTable, COLLECTIVES};
use oxccl_rules::watchdog::desync::{write_headline, write_note, write_ranks};

#[derive(Debug, Arbitrary)]
enum Case {
    /// A rank list (mostly small, near-consecutive numbers, so runs occur).
    Ranks { base: u32, steps: Vec<u8>, seq: u64 },
    /// Arrival marks and a creation's timeout.
    Arrival {
        ranks: Vec<u32>,
        marked: Vec<bool>,
        unreadable: bool,
        backend: Option<String>,
        me: u32,
        note: Option<String>,
    },
    /// Two ranks' lists of windows to release.
    Release {
        mine: Vec<u8>,
        theirs: Vec<u8>,
        big: u64,
    },
    /// A tune table and an operation.
    Choose {
        rows: Vec<Row>,
        op: u8,
        dtype: u8,
        bytes: u64,
        registrable: bool,
    },
}

/// A tune row's collective, dtype (any when `None`), its two size bounds (either order) and
/// its mode, as indices into the lists of each.
#[derive(Debug, Clone, Copy, Arbitrary)]
struct Row(Option<u8>, Option<u8>, u64, u64, u8);

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let Ok(case) = Case::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    match case {
        Case::Ranks { base, steps, seq } => ranks(base, &steps, seq),
        Case::Arrival {
            ranks,
            marked,
            unreadable,
            backend,
            me,
            note,
        } => arrival(
            &ranks,
            &marked,
            unreadable,
            backend.as_deref(),
            me,
            note.as_deref(),
        ),
        Case::Release { mine, theirs, big } => release(&mine, &theirs, big),
        Case::Choose {
            rows,
            op,
            dtype,
            bytes,
            registrable,
        } => choose(&rows, op, dtype, bytes, registrable),
    }
}

/// The ranks a folded list names, in order (`a-b`: every rank from a to b).
fn expand(text: &str) -> Vec<u32> {
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or_else(|| panic!("not bracketed: {text:?}"));
    if inner.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for part in inner.split(", ") {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().unwrap(), b.parse().unwrap());
                assert!(
                    b.checked_sub(a).is_some_and(|n| n >= 2),
                    "a run of fewer than three: {text:?}"
                );
                out.extend(a..=b);
            }
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

fn ranks(base: u32, steps: &[u8], seq: u64) {
    // Steps of 0 (a repeat), 1 (a run), more (a gap), or down (not ascending).
    let mut list = Vec::with_capacity(steps.len());
    let mut r = base;
    for &s in steps {
        list.push(r);
        r = match s % 8 {
            0 => r,
            1..=4 => r.wrapping_add(1),
            5 | 6 => r.wrapping_add(u32::from(s)),
            _ => r.wrapping_sub(u32::from(s)),
        };
    }
    let mut text = String::new();
    write_ranks(&mut text, &list).unwrap();
    // Written as given: nothing lost, reordered or invented, whatever the order.
    assert_eq!(expand(&text), list, "{text}");

    let mut note = String::new();
    write_note(&mut note, &list).unwrap();
    let mut head = String::new();
    let wrote = write_headline(&mut head, seq, &list).unwrap();
    if list.is_empty() {
        assert_eq!(note, "every rank joined it (desync debug)");
        assert!(!wrote);
        assert_eq!(head, "");
    } else {
        assert_eq!(note, format!("ranks {text} never joined it"));
        assert!(wrote);
        assert_eq!(head, format!("ranks {text} never joined collective #{seq}"));
    }
}

fn arrival(
    ranks: &[u32],
    marked: &[bool],
    unreadable: bool,
    backend: Option<&str>,
    me: u32,
    note: Option<&str>,
) {
    let missing: Vec<u32> = missing_arrivals(ranks, marked).collect();
    let model: Vec<u32> = ranks
        .iter()
        .enumerate()
        .filter(|(i, _)| i >= &marked.len() || !marked[*i])
        .map(|(_, &r)| r)
        .collect();
    assert_eq!(missing, model);

    let err: &dyn std::fmt::Display = &"store unreachable";
    let read = if unreadable {
        Err(err)
    } else {
        Ok(missing.as_slice())
    };
    let stall = ArrivalStall::of(read, backend);
    let t = ArrivalTimeout {
        what: "the init of group 1 (g)",
        me,
        prefix: "p",
        first: ranks.first().copied(),
        first_note: note,
    };
    let mut text = String::new();
    write_arrival_timeout(&mut text, &t, stall).unwrap();
    let mut list = String::new();
    write_ranks(&mut list, &missing).unwrap();
    let first_missing = ranks.first().is_some_and(|f| missing.contains(f));
    // Missing ranks first, then the backend's words, then the clock; unreadable marks say so.
    let want = match (unreadable, missing.is_empty(), backend) {
        (true, ..) => format!(
            "the init of group 1 (g) did not complete on rank {me}; the store cannot say who is missing: store unreachable"
        ),
        (false, false, _) => match note.filter(|_| first_missing) {
            Some(n) => format!("ranks {list} never arrived at the init of group 1 (g); {n}"),
            None => format!(
                "ranks {list} never arrived at the init of group 1 (g) (seen by rank {me}; store marks `p/arrived/<group rank>`)"
            ),
        },
        (false, true, Some(b)) => format!(
            "every rank arrived at the init of group 1 (g); the backend did not complete it in time on rank {me}: {b}"
        ),
        (false, true, None) => {
            format!("the init of group 1 (g): every rank arrived, but too late for rank {me}")
        }
    };
    assert_eq!(text, want);
}

fn release(mine: &[u8], theirs: &[u8], big: u64) {
    // Small numbers (so the lists often hold the same ones), one of any size.
    let to_list = |b: &[u8]| -> Vec<u64> {
        b.iter()
            .map(|&x| if x == 255 { big } else { u64::from(x % 16) })
            .collect()
    };
    let (mut a, mut b) = (to_list(mine), to_list(theirs));
    let (mut ta, mut tb) = (String::new(), String::new());
    write_release_list(&mut ta, &mut a.clone()).unwrap();
    write_release_list(&mut tb, &mut b.clone()).unwrap();
    a.sort_unstable();
    b.sort_unstable();
    // Equal texts exactly for equal lists (as multisets): ranks agree only on the same windows.
    assert_eq!(ta == tb, a == b, "{ta} / {tb}");
    let read: Vec<u64> = if ta == "none" {
        Vec::new()
    } else {
        ta.split(',').map(|n| n.parse().unwrap()).collect()
    };
    assert_eq!(read, a, "{ta}");

    let mut why = String::new();
    write_disagreement(&mut why, "windows to release", 3, &tb, 0, &ta).unwrap();
    assert_eq!(
        why,
        format!("global rank 3 has windows to release {tb} and rank 0 has {ta}")
    );
}

fn choose(rows: &[Row], op: u8, dtype: u8, bytes: u64, registrable: bool) {
    let rows: Vec<TuneRow> = rows
        .iter()
        .map(|&Row(c, d, lo, hi, m)| TuneRow {
            coll: c.map(|c| COLLECTIVES[usize::from(c) % COLLECTIVES.len()]),
            dtype: d.map(|d| DataType::ALL[usize::from(d) % DataType::ALL.len()]),
            min_bytes: lo.min(hi),
            max_bytes: lo.max(hi),
            mode: RegMode::ALL[usize::from(m) % RegMode::ALL.len()],
        })
        .collect();
    let table = TuneTable::new(rows.clone()).expect("rows valid by construction");
    let coll = OpKind::ALL[usize::from(op) % OpKind::ALL.len()];
    let d = DataType::ALL[usize::from(dtype) % DataType::ALL.len()];
    // The model: the first row covering the operation, plain where none does; plain buffers
    // plain; a send or receive never in a window (a window is collective), registered instead.
    let row = rows
        .iter()
        .find(|r| {
            r.coll.is_none_or(|c| c == coll)
                && r.dtype.is_none_or(|x| x == d)
                && (r.min_bytes..=r.max_bytes).contains(&bytes)
        })
        .map_or(RegMode::Plain, |r| r.mode);
    let want = match (registrable, row) {
        (false, _) => RegMode::Plain,
        (true, RegMode::Window) if matches!(coll, OpKind::Send | OpKind::Recv) => {
            RegMode::Registered
        }
        (true, m) => m,
    };
    assert_eq!(table.lookup(coll, d, bytes), row);
    assert_eq!(table.choose(coll, d, bytes, registrable), want);
}

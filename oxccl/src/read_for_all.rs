//! One reader for many: a value every participant needs after the same event (who never
//! arrived at an init, every member's progress after a timed-out collective), read from the
//! store by one of them and published for the rest, so that when a whole large world hits the
//! event at once the store serves one full read instead of one per participant.

use crate::store::Store;
use oxccl_core::Result;
use std::time::Duration;

/// How a value read for all is stored: written as `encode` makes it, read back by `decode`
/// (`None`: not such a value).
pub(crate) struct Form<E, D> {
    pub encode: E,
    pub decode: D,
}

/// The value at `key`: the first caller (it claims `key/claim`) computes it with `read` and
/// publishes it there; a later caller takes the published value, waiting up to `wait` for it,
/// and computes it itself only when none comes (or it cannot be read back). A failed claim is
/// the store's error; a failed publish is only logged (the claimant has its value).
pub(crate) fn read_for_all<T>(
    store: &dyn Store,
    key: &str,
    wait: Duration,
    form: Form<impl Fn(&T) -> Vec<u8>, impl Fn(&[u8]) -> Option<T>>,
    read: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let claim = store.add(&format!("{key}/claim"), 1)?;
    if claim != 1 {
        if let Some(v) = store.get(key, wait).ok().and_then(|b| (form.decode)(&b)) {
            return Ok(v);
        }
    }
    let value = read()?;
    if claim == 1 {
        if let Err(e) = store.set(key, &(form.encode)(&value)) {
            log::warn!(
                "oxccl: cannot publish `{}` for the other ranks: {e}",
                oxccl_core::text::Escaped(&store.full_key(key))
            );
        }
    }
    Ok(value)
}

/// The form of a list of ranks.
pub(crate) type RankList = Form<fn(&Vec<u32>) -> Vec<u8>, fn(&[u8]) -> Option<Vec<u32>>>;

/// The form of a list of ranks: `2,5,7` (empty: none).
pub(crate) fn rank_list() -> RankList {
    Form {
        encode: |ranks| encode_ranks(ranks),
        decode: decode_ranks,
    }
}

fn encode_ranks(ranks: &[u32]) -> Vec<u8> {
    let text: Vec<String> = ranks.iter().map(u32::to_string).collect();
    text.join(",").into_bytes()
}

fn decode_ranks(b: &[u8]) -> Option<Vec<u32>> {
    let text = std::str::from_utf8(b).ok()?;
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',').map(|r| r.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;
    use std::cell::Cell;

    #[test]
    fn the_first_caller_reads_and_the_others_take_its_value() {
        let store = MemStore::new();
        let reads = Cell::new(0);
        let read = |v: Vec<u32>| {
            reads.set(reads.get() + 1);
            Ok(v)
        };
        let t = Duration::from_millis(100);
        assert_eq!(
            read_for_all(&store, "k", t, rank_list(), || read(vec![2, 5])).unwrap(),
            [2, 5]
        );
        // Later callers get the first one's value, whatever they would have read.
        assert_eq!(
            read_for_all(&store, "k", t, rank_list(), || read(vec![9])).unwrap(),
            [2, 5]
        );
        assert_eq!(reads.get(), 1);
        // A value that cannot be read back: the caller reads for itself.
        store.set("bad", b"x").unwrap();
        store.add("bad/claim", 1).unwrap();
        assert_eq!(
            read_for_all(&store, "bad", t, rank_list(), || read(vec![7])).unwrap(),
            [7]
        );
        assert_eq!(reads.get(), 2);
    }
}

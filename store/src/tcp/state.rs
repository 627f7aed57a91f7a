//! The key space of the store server and what each query does to it, with the waits that
//! queries leave behind. Connections are named by their ids; nothing here touches a socket:
//! a query hands back its reply and the ids of the waiting connections it releases.

use super::limits::ServerLimits;
use super::wire::{self, Request};
use std::collections::{HashMap, HashSet, VecDeque};

/// A connection waiting for keys: how many are still missing, and which.
pub(super) struct WaitingClient {
    left: usize,
    keys: Vec<Vec<u8>>,
}

/// The key space.
pub(super) struct State {
    kv: HashMap<Vec<u8>, Vec<u8>>,
    queues: HashMap<Vec<u8>, VecDeque<Vec<u8>>>,
    /// Key -> connections waiting for it.
    waiting: HashMap<Vec<u8>, Vec<u64>>,
    /// Connection -> its wait.
    pending: HashMap<u64, WaitingClient>,
    /// Bytes of keys and values in `kv` and `queues`.
    stored: usize,
    /// Bytes of keys in `pending`.
    waited: usize,
    max_stored: usize,
    max_waited: usize,
}

impl Default for State {
    fn default() -> Self {
        State::new(&ServerLimits::default())
    }
}

/// The keys a query may change, and an upper bound of the bytes it may add.
fn footprint<'a>(req: &Request<'a>) -> (Vec<&'a [u8]>, usize) {
    // A counter's decimal text is at most 20 bytes.
    const COUNTER: usize = 20;
    match req {
        Request::Set(k, v) | Request::Append(k, v) | Request::QueuePush(k, v) => {
            (vec![*k], k.len() + v.len())
        }
        Request::CompareSet(k, _, v) => (vec![*k], k.len() + v.len()),
        Request::Add(k, _) | Request::Barrier(k, _) => (vec![*k], k.len() + COUNTER),
        Request::DeleteKey(k) | Request::QueuePop(k) => (vec![*k], 0),
        Request::MultiSet(pairs) => (
            pairs.iter().map(|(k, _)| *k).collect(),
            pairs.iter().map(|(k, v)| k.len() + v.len()).sum(),
        ),
        _ => (Vec::new(), 0),
    }
}

impl State {
    /// An empty key space keeping to `limits`' stored and waited bytes.
    pub(super) fn new(limits: &ServerLimits) -> State {
        State {
            kv: HashMap::new(),
            queues: HashMap::new(),
            waiting: HashMap::new(),
            pending: HashMap::new(),
            stored: 0,
            waited: 0,
            max_stored: limits.max_stored_bytes,
            max_waited: limits.max_waited_bytes,
        }
    }

    /// Bytes of keys and values held.
    pub(super) fn stored_bytes(&self) -> usize {
        self.stored
    }

    /// Bytes of keys awaited, and how many connections wait.
    pub(super) fn waits(&self) -> (usize, usize) {
        (self.waited, self.pending.len())
    }

    /// The bytes `key` holds, as `stored` counts them.
    fn size_of(&self, key: &[u8]) -> usize {
        let kv = self.kv.get(key).map_or(0, |v| key.len() + v.len());
        let q = self
            .queues
            .get(key)
            .map_or(0, |q| key.len() + q.iter().map(Vec::len).sum::<usize>());
        kv + q
    }

    fn present(&self, key: &[u8]) -> bool {
        self.kv.contains_key(key) || self.queues.get(key).is_some_and(|q| !q.is_empty())
    }

    /// Counts one arrival of `key` for the connection `id`; names it in `wake` when complete.
    fn arrive(&mut self, id: u64, wake: &mut Vec<u64>) {
        let done = match self.pending.get_mut(&id) {
            Some(p) if p.left > 1 => {
                p.left -= 1;
                false
            }
            Some(_) => true,
            None => false,
        };
        if done && self.remove_pending(id).is_some() {
            wake.push(id);
        }
    }

    /// `key` was set: every connection waiting for it counts it.
    fn wake_all(&mut self, key: &[u8], wake: &mut Vec<u64>) {
        if let Some(ids) = self.waiting.remove(key) {
            for id in ids {
                self.arrive(id, wake);
            }
        }
    }

    /// A queue got one element: only the first waiter counts it (it will pop it).
    fn wake_one(&mut self, key: &[u8], wake: &mut Vec<u64>) {
        let Some(ids) = self.waiting.get_mut(key) else {
            return;
        };
        let first = (!ids.is_empty()).then(|| ids.remove(0));
        if ids.is_empty() {
            self.waiting.remove(key);
        }
        if let Some(id) = first {
            self.arrive(id, wake);
        }
    }

    pub(super) fn remove_pending(&mut self, id: u64) -> Option<WaitingClient> {
        let p = self.pending.remove(&id)?;
        self.waited = self
            .waited
            .saturating_sub(p.keys.iter().map(Vec::len).sum());
        for k in &p.keys {
            if let Some(ids) = self.waiting.get_mut(k) {
                ids.retain(|&w| w != id);
                if ids.is_empty() {
                    self.waiting.remove(k);
                }
            }
        }
        Some(p)
    }

    fn register(&mut self, id: u64, keys: Vec<Vec<u8>>) {
        for k in &keys {
            self.waiting.entry(k.clone()).or_default().push(id);
        }
        let left = keys.len();
        self.waited += keys.iter().map(Vec::len).sum::<usize>();
        self.pending.insert(id, WaitingClient { left, keys });
    }

    fn set(&mut self, key: &[u8], value: Vec<u8>, wake: &mut Vec<u64>) {
        self.kv.insert(key.to_vec(), value);
        self.wake_all(key, wake);
    }

    /// Adds `delta` to the counter at `key`; `None` when the value there is no integer.
    fn add(&mut self, key: &[u8], delta: i64, wake: &mut Vec<u64>) -> Option<i64> {
        let old = match self.kv.get(key) {
            Some(v) => wire::parse_counter(v)?,
            None => 0,
        };
        // Wrapping, as PyTorch's C++ does in practice; a panic is not an option.
        let new = old.wrapping_add(delta);
        self.set(key, new.to_string().into_bytes(), wake);
        Some(new)
    }

    /// Applies `req` from connection `id`: its reply goes to `out`, the waiters it releases to
    /// `wake`. An error is a protocol violation or a query past the limits; the connection is
    /// then closed.
    pub(super) fn apply(
        &mut self,
        id: u64,
        req: Request<'_>,
        out: &mut Vec<u8>,
        wake: &mut Vec<u64>,
    ) -> Result<(), String> {
        let (keys, adds) = footprint(&req);
        if self.stored.saturating_add(adds) > self.max_stored {
            return Err(format!(
                "{:?} of {adds} bytes: the store holds at most {} bytes",
                req.query_type(),
                self.max_stored
            ));
        }
        let before: usize = keys.iter().map(|k| self.size_of(k)).sum();
        let r = self.apply_unbounded(id, req, out, wake);
        let after: usize = keys.iter().map(|k| self.size_of(k)).sum();
        self.stored = (self.stored + after).saturating_sub(before);
        r
    }

    /// Registers a wait on `keys` unless the awaited bytes would pass the bound.
    fn register_bounded(&mut self, id: u64, keys: Vec<Vec<u8>>) -> Result<(), String> {
        let bytes: usize = keys.iter().map(Vec::len).sum();
        if self.waited.saturating_add(bytes) > self.max_waited {
            return Err(format!(
                "a wait on {bytes} bytes of keys: pending waits await at most {} bytes",
                self.max_waited
            ));
        }
        self.register(id, keys);
        Ok(())
    }

    fn apply_unbounded(
        &mut self,
        id: u64,
        req: Request<'_>,
        out: &mut Vec<u8>,
        wake: &mut Vec<u64>,
    ) -> Result<(), String> {
        if self.pending.contains_key(&id) && req != Request::CancelWait {
            // PyTorch's client sends nothing but CANCEL_WAIT while it waits.
            return Err(format!("{:?} while waiting", req.query_type()));
        }
        match req {
            Request::Validate(m) if m == wire::VALIDATION_MAGIC => {}
            Request::Validate(m) => return Err(format!("bad magic {m:#x}")),
            Request::Ping(nonce) => wire::put_u32(out, nonce),
            Request::Set(k, v) => self.set(k, v.to_vec(), wake),
            Request::CompareSet(k, expected, desired) => {
                let swaps = match self.kv.get(k) {
                    Some(current) => current.as_slice() == expected,
                    None => expected.is_empty(),
                };
                if swaps {
                    self.set(k, desired.to_vec(), wake);
                }
                // The value after the call; for a missing key left alone PyTorch answers `expected`.
                let now = self.kv.get(k).map_or(expected, |v| v.as_slice());
                wire::put_bytes(out, now);
            }
            Request::Get(k) => wire::put_bytes(out, self.kv.get(k).map_or(&[][..], |v| v)),
            Request::Add(k, delta) => match self.add(k, delta, wake) {
                Some(n) => wire::put_i64(out, n),
                None => return Err("ADD on a value that is no integer".into()),
            },
            Request::Check(keys) => {
                let ready = keys.iter().all(|k| self.present(k));
                let r = if ready {
                    wire::CHECK_READY
                } else {
                    wire::CHECK_NOT_READY
                };
                wire::put_u8(out, r);
            }
            Request::Wait(keys) => {
                // A set, not a scan of the list: 128 Ki keys must not cost 16 G comparisons
                // under the key-space lock.
                let mut seen: HashSet<&[u8]> = HashSet::new();
                let missing: Vec<Vec<u8>> = keys
                    .into_iter()
                    .filter(|k| !self.present(k) && seen.insert(k))
                    .map(<[u8]>::to_vec)
                    .collect();
                if missing.is_empty() {
                    wire::put_u8(out, wire::WAIT_STOP_WAITING);
                } else {
                    self.register_bounded(id, missing)?;
                }
            }
            Request::GetNumKeys => wire::put_i64(out, self.kv.len() as i64),
            Request::DeleteKey(k) => wire::put_i64(out, i64::from(self.kv.remove(k).is_some())),
            Request::Append(k, v) => {
                self.kv.entry(k.to_vec()).or_default().extend_from_slice(v);
                self.wake_all(k, wake);
            }
            Request::MultiGet(keys) => {
                for k in keys {
                    wire::put_bytes(out, self.kv.get(k).map_or(&[][..], |v| v));
                }
            }
            Request::MultiSet(pairs) => {
                for (k, v) in pairs {
                    self.set(k, v.to_vec(), wake);
                }
            }
            Request::CancelWait => {
                self.remove_pending(id);
                wire::put_u8(out, wire::WAIT_CANCELED);
            }
            Request::QueuePush(k, v) => {
                self.queues
                    .entry(k.to_vec())
                    .or_default()
                    .push_back(v.to_vec());
                self.wake_one(k, wake);
            }
            Request::QueuePop(k) => {
                let q = self.queues.get_mut(k);
                let len = q.as_ref().map_or(0, |q| q.len());
                wire::put_i64(out, len as i64);
                if let Some(v) = q.and_then(|q| q.pop_front()) {
                    wire::put_bytes(out, &v);
                }
                // An emptied queue is forgotten: pushes and pops on ever new keys must not
                // leave entries behind.
                if len <= 1 {
                    self.queues.remove(k);
                }
            }
            Request::QueueLen(k) => {
                let len = self.queues.get(k).map_or(0, |q| q.len());
                wire::put_i64(out, len as i64);
            }
            Request::ListKeys => {
                wire::put_i64(out, self.kv.len() as i64);
                for k in self.kv.keys() {
                    wire::put_bytes(out, k);
                }
            }
            Request::Barrier(k, world) => {
                let count = match self.kv.get(k) {
                    Some(v) => match wire::parse_counter(v) {
                        Some(n) => n.wrapping_add(1),
                        None => return Err("BARRIER on a non-counter".into()),
                    },
                    None => 1,
                };
                self.kv.insert(k.to_vec(), count.to_string().into_bytes());
                if count >= world {
                    self.wake_all(k, wake);
                    wire::put_u8(out, wire::WAIT_STOP_WAITING);
                } else {
                    self.register_bounded(id, vec![k.to_vec()])?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies `req` as connection `id`: (reply bytes, connections woken).
    fn run(st: &mut State, id: u64, req: Request<'_>) -> (Vec<u8>, usize) {
        let (mut out, mut wake) = (Vec::new(), Vec::new());
        st.apply(id, req, &mut out, &mut wake).unwrap();
        assert!(!wake.contains(&id), "a query woke its own sender");
        (out, wake.len())
    }

    fn i64s(v: i64) -> Vec<u8> {
        v.to_ne_bytes().to_vec()
    }

    #[test]
    fn a_wait_is_released_when_its_last_key_arrives_and_only_then() {
        let mut st = State::default();
        assert_eq!(
            run(&mut st, 1, Request::Wait(vec![b"x", b"y", b"x"])).0,
            b""
        );
        assert_eq!(run(&mut st, 2, Request::Set(b"x", b"1")), (vec![], 0));
        assert_eq!(run(&mut st, 2, Request::Append(b"x", b"2")), (vec![], 0));
        assert_eq!(run(&mut st, 2, Request::Add(b"y", 3)), (i64s(3), 1));
        // Already present: answered at once.
        let (out, _) = run(&mut st, 1, Request::Wait(vec![b"x"]));
        assert_eq!(out, [wire::WAIT_STOP_WAITING]);
    }

    #[test]
    fn a_cancelled_wait_is_forgotten_and_other_queries_meanwhile_are_refused() {
        let mut st = State::default();
        run(&mut st, 1, Request::Wait(vec![b"k"]));
        let (mut out, mut wake) = (Vec::new(), Vec::new());
        assert!(st
            .apply(1, Request::Get(b"k"), &mut out, &mut wake)
            .is_err());
        let (out, _) = run(&mut st, 1, Request::CancelWait);
        assert_eq!(out, [wire::WAIT_CANCELED]);
        assert_eq!(run(&mut st, 2, Request::Set(b"k", b"v")), (vec![], 0));
    }

    #[test]
    fn queues_push_pop_and_wake_one_waiter() {
        let mut st = State::default();
        run(&mut st, 1, Request::Wait(vec![b"q"]));
        run(&mut st, 2, Request::Wait(vec![b"q"]));
        assert_eq!(run(&mut st, 3, Request::QueuePush(b"q", b"e1")).1, 1);
        assert_eq!(run(&mut st, 3, Request::QueuePush(b"q", b"e2")).1, 1);
        assert_eq!(run(&mut st, 3, Request::QueueLen(b"q")).0, i64s(2));
        let (out, _) = run(&mut st, 3, Request::Check(vec![b"q"]));
        assert_eq!(out, [wire::CHECK_READY]);
        let mut want = i64s(2);
        wire::put_bytes(&mut want, b"e1");
        assert_eq!(run(&mut st, 3, Request::QueuePop(b"q")).0, want);
        run(&mut st, 3, Request::QueuePop(b"q"));
        assert_eq!(run(&mut st, 3, Request::QueuePop(b"q")).0, i64s(0));
        let (out, _) = run(&mut st, 3, Request::Check(vec![b"q"]));
        assert_eq!(out, [wire::CHECK_NOT_READY]);
        assert_eq!(run(&mut st, 3, Request::GetNumKeys).0, i64s(0));
    }

    #[test]
    fn a_barrier_releases_everyone_when_the_last_arrives() {
        let mut st = State::default();
        assert_eq!(run(&mut st, 1, Request::Barrier(b"bar", 3)), (vec![], 0));
        assert_eq!(run(&mut st, 2, Request::Barrier(b"bar", 3)), (vec![], 0));
        let (out, woken) = run(&mut st, 3, Request::Barrier(b"bar", 3));
        assert_eq!((out, woken), (vec![wire::WAIT_STOP_WAITING], 2));
        let mut want = Vec::new();
        wire::put_bytes(&mut want, b"3");
        assert_eq!(run(&mut st, 3, Request::Get(b"bar")).0, want);
    }

    #[test]
    fn listing_multi_queries_and_bad_counters() {
        let mut st = State::default();
        run(
            &mut st,
            1,
            Request::MultiSet(vec![(b"k1", b"v1"), (b"k2", b"v2")]),
        );
        let (out, _) = run(&mut st, 1, Request::MultiGet(vec![b"k2", b"none"]));
        let mut want = Vec::new();
        wire::put_bytes(&mut want, b"v2");
        wire::put_bytes(&mut want, b"");
        assert_eq!(out, want);
        let (out, _) = run(&mut st, 1, Request::ListKeys);
        assert_eq!(out[..8], i64s(2));
        assert_eq!(out.len(), 8 + 2 * (8 + 2));
        assert_eq!(run(&mut st, 1, Request::DeleteKey(b"k1")).0, i64s(1));
        assert_eq!(run(&mut st, 1, Request::DeleteKey(b"k1")).0, i64s(0));
        let (mut out, mut wake) = (Vec::new(), Vec::new());
        assert!(st
            .apply(1, Request::Add(b"k2", 1), &mut out, &mut wake)
            .is_err());
    }

    #[test]
    fn stored_bytes_follow_every_change_and_emptied_queues_are_forgotten() {
        let mut st = State::default();
        run(&mut st, 1, Request::Set(b"k", b"abc"));
        assert_eq!(st.stored_bytes(), 4);
        run(&mut st, 1, Request::Append(b"k", b"de"));
        run(
            &mut st,
            1,
            Request::MultiSet(vec![(b"k", b"z"), (b"m", b"12")]),
        );
        assert_eq!(st.stored_bytes(), 2 + 3);
        run(&mut st, 1, Request::Add(b"n", 10));
        assert_eq!(st.stored_bytes(), 2 + 3 + 3);
        run(&mut st, 1, Request::DeleteKey(b"m"));
        run(&mut st, 1, Request::DeleteKey(b"n"));
        run(&mut st, 1, Request::DeleteKey(b"k"));
        assert_eq!(st.stored_bytes(), 0);
        // Pushes and pops on ever new keys leave nothing behind (no empty queue stays per
        // key).
        for i in 0..1000u32 {
            let k = i.to_ne_bytes();
            run(&mut st, 1, Request::QueuePush(&k, b"v"));
            assert_eq!(st.stored_bytes(), 5);
            run(&mut st, 1, Request::QueuePop(&k));
        }
        assert_eq!(st.stored_bytes(), 0);
        assert!(st.queues.is_empty());
    }

    #[test]
    fn the_stored_and_waited_bounds_refuse_the_query_that_crosses_them() {
        let limits = ServerLimits {
            max_stored_bytes: 10,
            max_waited_bytes: 4,
            ..ServerLimits::default()
        };
        let mut st = State::new(&limits);
        run(&mut st, 1, Request::Set(b"k", b"123456789"));
        let (mut out, mut wake) = (Vec::new(), Vec::new());
        let r = st.apply(1, Request::Set(b"j", b"1"), &mut out, &mut wake);
        assert!(r.unwrap_err().contains("at most 10 bytes"));
        assert_eq!(st.stored_bytes(), 10);
        let r = st.apply(2, Request::Wait(vec![b"abc", b"de"]), &mut out, &mut wake);
        assert!(r.unwrap_err().contains("at most 4 bytes"));
        assert_eq!(st.waits(), (0, 0));
        run(&mut st, 2, Request::Wait(vec![b"abc", b"abc"]));
        assert_eq!(st.waits(), (3, 1));
        run(&mut st, 2, Request::CancelWait);
        assert_eq!(st.waits(), (0, 0));
    }
}

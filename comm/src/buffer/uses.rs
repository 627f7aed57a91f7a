//! Which streams an allocation's work is on: the bookkeeping behind [`NcclBuf`](super::nccl_buf::NcclBuf)'s
//! stream order, written over any stream and event type so that its rules are tested on
//! the host.
//!
//! Each stream that used the allocation has an event recorded after its last use there. A
//! use on stream T begins by making T wait for the other streams' events (not T's own:
//! T's order already puts the use after it) and ends with an event recorded on T after its
//! work, which replaces T's entry's event (events are values: one recorded event may be
//! shared with the operation's work, and is never recorded again while held). When a use
//! ends, the entries of other streams that T waited for, and that no use has ended on
//! since, are covered by T's new event and let go, so with one use at a time the list is
//! one entry long and a use on the stream of the last one costs no wait. Overlapping uses
//! are reads (a write takes the buffer by `&mut`): an entry with a use in progress, or
//! ended after T began, is never let go.

/// Events recorded on a stream (or streams) after an allocation's uses there.
pub(crate) struct Uses<S, E> {
    list: Vec<Use<S, E>>,
    /// Counts the ends, numbering each entry's last one.
    gen: u64,
}

struct Use<S, E> {
    stream: S,
    /// Recorded after this stream's last use; `None` until a first use here has ended
    /// (until then a wait on the entry orders nothing, which is right: nothing of that use
    /// is enqueued yet).
    event: Option<E>,
    /// Number of this entry's last end (0: recorded before any use began).
    gen: u64,
    /// Uses on this stream in progress.
    active: u32,
}

impl<S, E> Uses<S, E> {
    /// Uses so far: `event`, recorded on `stream` after the allocation's first work (its
    /// zeroing).
    pub fn new(stream: S, event: E) -> Self {
        Uses {
            list: vec![Use {
                stream,
                event: Some(event),
                gen: 0,
                active: 0,
            }],
            gen: 0,
        }
    }

    /// No uses and no events (what a dropped allocation leaves behind).
    pub fn empty() -> Self {
        Uses {
            list: Vec::new(),
            gen: 0,
        }
    }

    /// Begins a use on `stream` (`same` compares streams): waits on the other streams'
    /// events and takes an entry for `stream`. Returns what [`Uses::end`] takes.
    pub fn begin<Err>(
        &mut self,
        stream: &S,
        same: impl Fn(&S, &S) -> bool,
        mut wait: impl FnMut(&E) -> Result<(), Err>,
    ) -> Result<u64, Err>
    where
        S: Clone,
    {
        let mut mine = None;
        for (i, u) in self.list.iter().enumerate() {
            if same(&u.stream, stream) {
                mine = Some(i);
            } else if let Some(ev) = &u.event {
                wait(ev)?;
            }
        }
        let i = match mine {
            Some(i) => i,
            None => {
                self.list.push(Use {
                    stream: stream.clone(),
                    event: None,
                    gen: 0,
                    active: 0,
                });
                self.list.len() - 1
            }
        };
        self.list[i].active += 1;
        Ok(self.gen)
    }

    /// Ends the use on `stream` that [`Uses::begin`] numbered `began`: `update` sets the
    /// entry's event to one recorded on `stream` after the use's work (or renews the one it
    /// holds in place; it leaves it where recording failed: the context is broken and runs
    /// nothing more), and the entries the use covers are let go.
    pub fn end(
        &mut self,
        stream: &S,
        began: u64,
        same: impl Fn(&S, &S) -> bool,
        update: impl FnOnce(&mut Option<E>),
    ) {
        self.gen += 1;
        let now = self.gen;
        let Some(u) = self.list.iter_mut().find(|u| same(&u.stream, stream)) else {
            return;
        };
        u.active = u.active.saturating_sub(1);
        u.gen = now;
        update(&mut u.event);
        // Entries this use waited for (last ended before it began), idle since: covered.
        self.list
            .retain(|u| same(&u.stream, stream) || u.active > 0 || u.gen > began);
    }

    /// The events of the uses so far (all complete: the allocation is idle).
    pub fn events(&self) -> impl Iterator<Item = &E> {
        self.list.iter().filter_map(|u| u.event.as_ref())
    }

    /// How many streams are listed.
    #[cfg(test)]
    fn streams(&self) -> usize {
        self.list.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A log of what the bookkeeping asked the streams to do: (stream, "wait"/"record", event).
    type Log = RefCell<Vec<(u32, &'static str, u32)>>;

    fn same(a: &u32, b: &u32) -> bool {
        a == b
    }

    /// Begins a use on `s`.
    fn begin(u: &mut Uses<u32, u32>, s: u32, log: &Log) -> u64 {
        let r = u.begin(&s, same, |e| {
            log.borrow_mut().push((s, "wait", *e));
            Ok::<(), ()>(())
        });
        r.unwrap()
    }

    /// Ends a use on `s` with a new event, numbered by `next` (counted up).
    fn end(u: &mut Uses<u32, u32>, s: u32, began: u64, log: &Log, next: &mut u32) {
        *next += 1;
        log.borrow_mut().push((s, "record", *next));
        u.end(&s, began, same, |e| *e = Some(*next));
    }

    #[test]
    fn the_stream_of_the_last_use_waits_for_nothing() {
        let log = Log::default();
        let mut next = 10;
        // Zeroed on stream 1 with event 1.
        let mut u = Uses::new(1, 1);
        for _ in 0..3 {
            let b = begin(&mut u, 1, &log);
            end(&mut u, 1, b, &log, &mut next);
        }
        assert_eq!(
            *log.borrow(),
            vec![(1, "record", 11), (1, "record", 12), (1, "record", 13)]
        );
        assert_eq!(u.events().copied().collect::<Vec<_>>(), vec![13]);
    }

    #[test]
    fn another_stream_waits_then_covers_the_first() {
        let log = Log::default();
        let mut next = 10;
        let mut u = Uses::new(1, 1);
        let b = begin(&mut u, 7, &log);
        end(&mut u, 7, b, &log, &mut next);
        // Stream 7 waited for stream 1's event; stream 1 is covered by 7's.
        assert_eq!(*log.borrow(), vec![(7, "wait", 1), (7, "record", 11)]);
        assert_eq!(u.streams(), 1);
        // Back on stream 1: waits for 7's event.
        log.borrow_mut().clear();
        let b = begin(&mut u, 1, &log);
        end(&mut u, 1, b, &log, &mut next);
        assert_eq!(*log.borrow(), vec![(1, "wait", 11), (1, "record", 12)]);
        assert_eq!(u.events().copied().collect::<Vec<_>>(), vec![12]);
    }

    #[test]
    fn a_failed_record_keeps_the_entry_s_event() {
        let log = Log::default();
        let mut u = Uses::new(1, 1);
        let b = begin(&mut u, 1, &log);
        u.end(&1, b, same, |_| {});
        assert_eq!(u.events().copied().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn overlapping_reads_each_keep_their_event() {
        let log = Log::default();
        let mut next = 10;
        let mut u = Uses::new(1, 1);
        // Reads on streams 7 and 8 overlap; 7 ends first.
        let b7 = begin(&mut u, 7, &log);
        let b8 = begin(&mut u, 8, &log);
        end(&mut u, 7, b7, &log, &mut next);
        // 8's use is in progress: its entry stays.
        assert_eq!(u.streams(), 2, "7 and 8 (1 is covered by 7)");
        end(&mut u, 8, b8, &log, &mut next);
        // 8 began before 7 ended: 7's entry is not covered by 8's event and stays.
        assert_eq!(u.streams(), 2);
        // A writer on stream 9 waits for both reads.
        log.borrow_mut().clear();
        let b9 = begin(&mut u, 9, &log);
        let waits: Vec<_> = log.borrow().iter().map(|x| x.2).collect();
        assert_eq!(waits, vec![11, 12], "{:?}", log.borrow());
        end(&mut u, 9, b9, &log, &mut next);
        assert_eq!(u.streams(), 1);
    }

    #[test]
    fn an_entry_re_recorded_after_a_use_began_is_kept() {
        let log = Log::default();
        let mut next = 10;
        let mut u = Uses::new(1, 1);
        // A read on 7 begins; meanwhile a read on 1 runs to its end (a new event for 1).
        let b7 = begin(&mut u, 7, &log);
        let b1 = begin(&mut u, 1, &log);
        end(&mut u, 1, b1, &log, &mut next);
        end(&mut u, 7, b7, &log, &mut next);
        // 7 waited for 1's earlier event only: 1's entry must stay.
        assert_eq!(u.streams(), 2);
        assert_eq!(u.events().count(), 2);
    }

    /// A model of what each event covers: the uses enqueued on its stream before it was
    /// recorded, and whatever that stream had waited for by then. Random interleavings of
    /// overlapping reads and exclusive writes on four streams; after every step, the listed
    /// events together cover every use that has ended (what a drop or `idle` relies on), and
    /// a write's stream, once it has waited, covers every use before it.
    #[test]
    fn the_listed_events_always_cover_every_ended_use() {
        use std::collections::{BTreeSet, HashMap};
        type Cover = BTreeSet<u32>;
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for _ in 0..200 {
            // Event id -> what it covers; stream -> what it covers so far.
            let covers: RefCell<HashMap<u32, Cover>> = RefCell::new(HashMap::new());
            let streams: RefCell<HashMap<u32, Cover>> = RefCell::new(HashMap::new());
            covers.borrow_mut().insert(1, Cover::new());
            let mut u: Uses<u32, u32> = Uses::new(0, 1);
            let mut made = 1;
            let mut record = |s: u32| {
                made += 1;
                let c = streams.borrow().get(&s).cloned().unwrap_or_default();
                covers.borrow_mut().insert(made, c);
                made
            };
            let mut ended = Cover::new();
            // Reads in progress: (use id, stream, began).
            let mut open: Vec<(u32, u32, u64)> = Vec::new();
            for id in 0..40u32 {
                let s = next(4) as u32;
                let write = next(4) == 0;
                if write || open.len() >= 3 {
                    // End the reads in progress first (a write is exclusive), in any order.
                    while !open.is_empty() {
                        let (rid, rs, rb) = open.swap_remove(next(open.len() as u64) as usize);
                        let ev = record(rs);
                        u.end(&rs, rb, same, |e| *e = Some(ev));
                        ended.insert(rid);
                    }
                }
                let began = u
                    .begin(&s, same, |e| {
                        let c = covers.borrow().get(e).cloned().unwrap_or_default();
                        streams.borrow_mut().entry(s).or_default().extend(c);
                        Ok::<(), ()>(())
                    })
                    .unwrap();
                if write {
                    let here = streams.borrow().get(&s).cloned().unwrap_or_default();
                    assert!(
                        ended.is_subset(&here),
                        "a write on {s} misses {ended:?} - {here:?}"
                    );
                }
                // The use's work, enqueued on its stream.
                streams.borrow_mut().entry(s).or_default().insert(id);
                if write {
                    let ev = record(s);
                    u.end(&s, began, same, |e| *e = Some(ev));
                    ended.insert(id);
                } else {
                    open.push((id, s, began));
                }
                let listed: Cover = u
                    .events()
                    .flat_map(|e| covers.borrow().get(e).cloned().unwrap_or_default())
                    .collect();
                assert!(
                    ended.is_subset(&listed),
                    "ended {ended:?}, listed cover {listed:?}"
                );
                assert!(u.streams() <= 4);
            }
        }
    }
}

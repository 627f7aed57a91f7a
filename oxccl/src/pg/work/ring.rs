//! A communicator's works in flight as slots of one ring: the issue path's common case (a
//! group with the watchdog, without timing). Issuing writes a slot (what the work is, its end
//! event, its recorder entry's facts) and publishes its place: nothing is allocated, the
//! watchdog takes no reference (the caller's handle takes the ring's, one count), and the
//! only lines other threads read are the slot itself, once, and the published place.
//!
//! Whoever looks (the watchdog's pass, a caller polling or waiting) takes the ring's reader
//! lock and moves it forward: records the new slots' flight-recorder entries, queries the
//! newest end event (the stream runs the works in order, so it vouches for every older one),
//! and marks what completed in the [`WorkHome`]. A slot is written again only once its work
//! is done, and since works are recorded before they are marked done, no look can still be
//! reading it. A work that needs more than that (its communicator failed, it ran past its
//! deadline, a caller's own wait limit ran out) is handed out of the ring as a
//! [`TrackedWork`] of its own, with its end event: from then on it is looked at alone, by the
//! machine every work had before, and the watchdog applies its group's plan to it.

use super::home::WorkHome;
use super::prefetch;
use super::tracked::TrackedWork;
use crate::recorder::slot::TraceSlot;
use crate::watchdog::desync::counts_in_desync;
use crate::watchdog::group_watch::{GroupWatch, Watched, WatchedRing};
use crate::watchdog::Watchdog;
use oxccl_core::state::work::{deadline_ns, is_past, WorkInfo};
use oxccl_core::{CommAbort, CommState, Event};
use oxccl_rules::watchdog::newest_done;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Slots of a new ring (it doubles when the works in flight outgrow it).
const FIRST_SLOTS: usize = 256;

/// What the ring keeps of a work until it is done: two cache lines for an end event of up
/// to 32 bytes (NCCL's), aligned so that no two slots share a line.
#[repr(align(64))]
struct Slot<E> {
    place: u64,
    info: WorkInfo,
    /// When it was issued (process clock, ns).
    created_ns: u64,
    /// `None` once handed out ([`WorkRing::detach`]).
    end: Option<E>,
    /// Its recorder entry: facts until a look records it.
    trace: TraceSlot,
}

/// The ring's slots, each written by one owner at a time (see [`WorkRing`]).
type Slots<E> = Box<[UnsafeCell<Option<Slot<E>>>]>;

/// A communicator's works in flight (see the module's documentation). What a push reads and
/// writes comes first, on one cache line: the readers only read it (they write the line of
/// `readers`, and the home's done place), so sharing it costs the issuing thread no transfer
/// it would not make for `published` alone.
#[repr(C, align(64))]
pub(crate) struct WorkRing<E, A> {
    /// The newest place written (0: none).
    published: AtomicU64,
    /// The last place given (the issuing thread's, under the group's issue lock: a load and
    /// a store, not a locked add).
    queued: AtomicU64,
    /// Places up to here have a free slot as of the issuing thread's last look at the done
    /// place (so a push reads that place, written by the readers, only past it).
    room: AtomicU64,
    pub home: Arc<WorkHome<A>>,
    /// The slots (a power of two of them; place `p` in slot `p & (len - 1)`). A slot is the
    /// issuing thread's until it publishes its place, then the readers' (under `reader`)
    /// until its work is done. The array itself is replaced only by the issuing thread,
    /// holding `reader` ([`WorkRing::make_room`]).
    slots: UnsafeCell<Slots<E>>,
    /// Whether the watchdog knows the ring.
    enrolled: AtomicBool,
    /// Whether the CPU takes the next slot for writing ahead ([`prefetch::writes_ahead`]).
    ahead: bool,
    readers: Readers<E, A>,
}

/// The readers' side, on lines of its own.
#[repr(align(64))]
struct Readers<E, A> {
    lock: Mutex<Reader<E, A>>,
    /// Whether a work handed out may still be asked for (a caller's look then asks the
    /// reader first): set by a hand-out, cleared by a look once every work handed out
    /// completed successfully and was let go.
    any_detached: AtomicBool,
}

/// The readers' side.
struct Reader<E, A> {
    /// Places whose recorder entries are made (every published place, after a look).
    recorded: u64,
    /// The recorded works not yet done, oldest first (the ones handed out leave).
    ids: VecDeque<Entry>,
    /// The works handed out, by place: a caller's handle asks them.
    detached: Vec<(u64, Arc<TrackedWork<E, A>>)>,
    /// The ones the watchdog has not taken yet.
    handoff: Vec<(Arc<dyn Watched>, Option<u64>)>,
    /// Works the ring still watches (not done, not handed out), as of the last look.
    live: usize,
}

/// What the readers keep of a recorded work until it is done (its slot may be written again
/// from then on).
#[derive(Clone, Copy)]
struct Entry {
    place: u64,
    /// Its recorder entry's id.
    id: Option<u64>,
    /// Its sequence number when it counts in desync debugging, else 0.
    desync_seq: u64,
}

// SAFETY: a slot is written by one thread at a time: the issuing thread (one at a time, under
// the group's issue lock) before it publishes the slot's place and after its work is done, a
// reader holding `reader` in between (a work is marked done only after the readers are done
// with its slot: see `advance`). The array is replaced only under `reader`, by the issuing
// thread, the only one that reads it without `reader`. So values move between threads one
// owner at a time, and `E: Send` and the other fields' own `Sync` suffice.
unsafe impl<E: Send, A: Send + Sync> Sync for WorkRing<E, A> {}
// SAFETY: as above; the ring owns its values.
unsafe impl<E: Send, A: Send> Send for WorkRing<E, A> {}

impl<E: Event + 'static, A: CommAbort + 'static> WorkRing<E, A> {
    pub fn new(home: Arc<WorkHome<A>>) -> WorkRing<E, A> {
        WorkRing {
            published: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            room: AtomicU64::new(FIRST_SLOTS as u64),
            home,
            slots: UnsafeCell::new(empty_slots(FIRST_SLOTS)),
            enrolled: AtomicBool::new(false),
            ahead: prefetch::writes_ahead(),
            readers: Readers {
                lock: Mutex::new(Reader {
                    recorded: 0,
                    ids: VecDeque::new(),
                    detached: Vec::new(),
                    handoff: Vec::new(),
                    live: 0,
                }),
                any_detached: AtomicBool::new(false),
            },
        }
    }

    fn read(&self) -> MutexGuard<'_, Reader<E, A>> {
        self.readers
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The place of the next work on the communicator (from 1, issue order), in the ring or
    /// not. Called under the group's issue lock, which orders the calls: one issuing thread
    /// at a time.
    #[inline]
    pub fn next_place(&self) -> u64 {
        let place = self.queued.load(Ordering::Relaxed) + 1;
        self.queued.store(place, Ordering::Relaxed);
        place
    }

    /// Places a work: `info`, issued at `created_ns`, ending with `end`; its place (`Work`
    /// handles name it by that). Called by the issuing thread under the group's issue lock.
    pub fn push(
        self: &Arc<Self>,
        info: WorkInfo,
        created_ns: u64,
        end: E,
        trace: TraceSlot,
    ) -> u64 {
        let place = self.write(info, created_ns, end, trace);
        if !self.enrolled.load(Ordering::Relaxed) {
            self.enrolled.store(true, Ordering::Relaxed);
            Watchdog::global().enroll_ring(self.clone());
        }
        Watchdog::ring_pushed(place);
        place
    }

    /// [`WorkRing::push`] without telling the watchdog.
    fn write(&self, info: WorkInfo, created_ns: u64, end: E, trace: TraceSlot) -> u64 {
        let place = self.next_place();
        if place > self.room.load(Ordering::Relaxed) {
            self.make_room(place, created_ns);
        }
        // SAFETY: as above; and the slot is free: its previous work (`place - len`) is done,
        // so no reader touches it, and no reader touches `place` before it is published.
        let next = unsafe {
            let slots = &*self.slots.get();
            let mask = slots.len() - 1;
            let slot = &mut *slots[(place as usize) & mask].get();
            *slot = Some(Slot {
                place,
                info,
                created_ns,
                end: Some(end),
                trace,
            });
            slots[(place as usize + 1) & mask].get()
        };
        self.published.store(place, Ordering::Release);
        // The next work's slot, read by the watchdog since it was last written: taken back
        // now, while the next operation is checked and launched, rather than at its write.
        prefetch::for_write(
            next.cast(),
            std::mem::size_of::<Option<Slot<E>>>(),
            self.ahead,
        );
        place
    }

    /// Makes the slot of `place` free and notes the room past it: the done place may have
    /// moved on; else a look (its work may be done); else the ring doubles.
    #[cold]
    fn make_room(&self, place: u64, now: u64) {
        // SAFETY: the issuing thread may read the array without `reader` (see the type).
        let len = unsafe { (&*self.slots.get()).len() } as u64;
        // Whether the done place leaves `place` a slot, noting the room it leaves.
        let fits = |len: u64| {
            let room = self.home.done_upto() + len;
            self.room.store(room, Ordering::Relaxed);
            room >= place
        };
        if fits(len) {
            return;
        }
        let mut r = self.read();
        self.advance(&mut r, now);
        if fits(len) {
            return;
        }
        // SAFETY: the issuing thread, holding `reader`: no reader holds a slot.
        let slots = unsafe { &mut *self.slots.get() };
        let done = self.home.done_upto();
        let mut grown = empty_slots(slots.len() * 2);
        let mask = grown.len() - 1;
        // The works not done move to their places in the larger ring; done ones are dropped.
        for s in slots.iter_mut().filter_map(|cell| cell.get_mut().take()) {
            if s.place > done {
                let p = s.place as usize;
                *grown[p & mask].get_mut() = Some(s);
            }
        }
        *slots = grown;
        fits(slots.len() as u64);
    }
}

fn empty_slots<E>(n: usize) -> Slots<E> {
    (0..n).map(|_| UnsafeCell::new(None)).collect()
}

impl<E: Event + 'static, A: CommAbort + 'static> WorkRing<E, A> {
    /// The slot of `place`, published and not done: the caller holds `reader`.
    ///
    /// # Safety
    /// `place` is published and not yet marked done, and the caller holds `reader` (`_r`),
    /// which makes it the slot's only user until it releases it.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot<'r>(&self, _r: &'r mut Reader<E, A>, place: u64) -> Option<&'r mut Slot<E>> {
        // SAFETY: the array is replaced only under `reader`, held by the caller; the slot is
        // the readers' (the caller's contract).
        let slots = unsafe { &*self.slots.get() };
        let cell = &slots[(place as usize) & (slots.len() - 1)];
        // SAFETY: as above.
        unsafe { (*cell.get()).as_mut() }.filter(|s| s.place == place)
    }

    /// Records the recorder entries of every published work not yet recorded.
    fn record_upto(&self, r: &mut Reader<E, A>, published: u64) {
        let watch = &self.home.watch;
        while r.recorded < published {
            let place = r.recorded + 1;
            // SAFETY: `place` is published; recorded places are ≥ the done ones, so it is not
            // done; the caller holds `reader` (`r`).
            let facts = unsafe { self.slot(r, place) }.map(|s| {
                let c = watch.trace_context(s.info, s.created_ns);
                (s.trace.settle(&watch.recorder, &c), s.info)
            });
            r.recorded = place;
            let Some((id, info)) = facts else { continue };
            let counted = watch.desync.is_some() && counts_in_desync(&info);
            r.ids.push_back(Entry {
                place,
                id,
                desync_seq: if counted { info.seq } else { 0 },
            });
            if let (Some(d), true) = (&watch.desync, counted) {
                d.note(info.seq, false);
            }
        }
    }

    /// Whether the work at `place` has ended: `None` when it was handed out (its end left
    /// with it) or the query failed (the work handed out will say why).
    fn ended(&self, r: &mut Reader<E, A>, place: u64) -> Option<bool> {
        // SAFETY: the callers pass published places not done, holding `reader`.
        let s = unsafe { self.slot(r, place) }?;
        s.end.as_ref()?.query().ok()
    }

    /// One look (the caller holds `reader`): records what is new, marks done what the
    /// stream has passed, and hands out the works that need a look of their own. Returns the
    /// earliest deadline of the works it still holds.
    fn advance(&self, r: &mut Reader<E, A>, now: u64) -> Option<u64> {
        let published = self.published.load(Ordering::Acquire);
        self.record_upto(r, published);
        let done = self.home.done_upto();
        let mut upto = done;
        let mut trouble = false;
        let handed_out_between = r
            .detached
            .iter()
            .any(|(p, _)| (done + 1..=published).contains(p));
        if published > done && !handed_out_between {
            // The newest end vouches for all: a few queries find the newest one reached.
            let mut ended = |i: usize| match self.ended(r, done + 1 + i as u64) {
                Some(e) => e,
                None => {
                    trouble = true;
                    false
                }
            };
            if let Some(i) = newest_done((published - done) as usize, &mut ended) {
                upto = done + 1 + i as u64;
            }
        } else if published > done {
            // A work handed out has no end here: the oldest ones, one by one.
            for p in done + 1..=published {
                // SAFETY: as in `ended`.
                let handed_out = unsafe { self.slot(r, p) }.is_some_and(|s| s.end.is_none());
                match self.ended(r, p) {
                    Some(true) => upto = p,
                    None if handed_out => {}
                    None => {
                        trouble = true;
                        break;
                    }
                    Some(false) => break,
                }
            }
        }
        let healthy = self
            .home
            .abort
            .as_ref()
            .is_none_or(|a| a.state() == CommState::Ready);
        if upto > done && healthy {
            // Every slot up to `upto` is recorded (above): no reader needs them any more.
            self.home.saw_done(upto);
        }
        self.complete_upto(r, now);
        let done = self.home.done_upto();
        r.detached.retain(|(p, w)| !(*p <= done && w.completed()));
        self.readers
            .any_detached
            .store(!r.detached.is_empty(), Ordering::Release);
        r.live = 0;
        if published <= done {
            return None;
        }
        // Still running: a failed communicator fails them all (each finds its error on its own
        // look), and one past its deadline is timed out on its own.
        let failed =
            trouble || !healthy || self.home.abort.as_ref().is_some_and(|a| a.poll().is_err());
        let mut earliest: Option<u64> = None;
        for p in done + 1..=published {
            // SAFETY: as in `ended`.
            let facts = unsafe { self.slot(r, p) }
                .filter(|s| s.end.is_some())
                .map(|s| (s.info, s.created_ns));
            let Some((info, created_ns)) = facts else {
                continue;
            };
            if failed || is_past(created_ns, now, info.timeout_ms) {
                self.detach(r, p);
            } else {
                let d = deadline_ns(created_ns, info.timeout_ms);
                earliest = Some(earliest.map_or(d, |e| e.min(d)));
                r.live += 1;
            }
        }
        earliest
    }

    /// Completes the recorder entries of the works done (and notes them for desync
    /// debugging).
    fn complete_upto(&self, r: &mut Reader<E, A>, now: u64) {
        let done = self.home.done_upto();
        let watch = &self.home.watch;
        let mut newest = 0;
        while let Some(&e) = r.ids.front() {
            if e.place > done {
                break;
            }
            r.ids.pop_front();
            watch.recorder.complete(e.id, now, None);
            newest = newest.max(e.desync_seq);
        }
        if let (Some(d), true) = (&watch.desync, newest > 0) {
            d.note(newest, true);
        }
    }
}

impl<E: Event + 'static, A: CommAbort + 'static> WorkRing<E, A> {
    /// Hands the work at `place` out of the ring: a [`TrackedWork`] with its end event and
    /// its place, looked at alone from now on (the caller holds `reader`).
    fn detach(&self, r: &mut Reader<E, A>, place: u64) -> Option<Arc<TrackedWork<E, A>>> {
        let recorded = place <= r.recorded;
        // SAFETY: the callers pass published places not done, holding `reader`.
        let s = unsafe { self.slot(r, place) }?;
        let end = s.end.take()?;
        // Its recorder entry goes with it: its id when recorded (the watchdog's look reports
        // to it), else its facts (the watchdog records them when it takes the work).
        let trace = match recorded {
            true => TraceSlot::Off,
            false => std::mem::replace(&mut s.trace, TraceSlot::Off),
        };
        let work = TrackedWork::new(
            s.info,
            (s.created_ns, place, false),
            (None, Some(end)),
            self.home.clone(),
            trace,
        );
        let id = match r.ids.binary_search_by_key(&place, |e| e.place) {
            Ok(k) => r.ids.remove(k).and_then(|e| e.id),
            Err(_) => None,
        };
        r.detached.push((place, work.clone()));
        r.handoff.push((work.clone(), id));
        self.readers.any_detached.store(true, Ordering::Release);
        Some(work)
    }

    /// The work at `place` if it was handed out.
    fn detached(&self, r: &Reader<E, A>, place: u64) -> Option<Arc<TrackedWork<E, A>>> {
        r.detached
            .iter()
            .find(|(p, _)| *p == place)
            .map(|(_, w)| w.clone())
    }

    /// A caller's look at the work at `place` (issued at `created_ns`): `Ok(true)` completed,
    /// `Ok(false)` still running, or its first error. `wait_limit_ms`: a waiting caller's
    /// limit (see [`TrackedWork::poll`]). A work that failed, or is past its limit or the
    /// group's timeout, is handed out and answered by its own machine. The look records
    /// nothing and marks nothing done (the watchdog's pass does, in issue order across
    /// groups): it queries the work's own end event.
    pub fn poll(
        &self,
        place: u64,
        created_ns: u64,
        now: u64,
        wait_limit_ms: Option<u64>,
    ) -> oxccl_core::Result<bool> {
        use oxccl_rules::watchdog::Hint;
        // The done place first: a look that marked `place` done after handing it out raised
        // the flag before, so it is seen raised (a work let go completed successfully).
        let done = self.home.done_upto();
        if place <= done && !self.readers.any_detached.load(Ordering::Acquire) {
            return Ok(true);
        }
        let mut r = self.read();
        let mut alone = self.detached(&r, place);
        if alone.is_none() {
            if place <= self.home.done_upto() {
                return Ok(true);
            }
            // SAFETY: handed out works were found above; `place` is published (its handle
            // exists) and not done; `reader` is held.
            let (timeout_ms, ended) = match unsafe { self.slot(&mut r, place) } {
                Some(s) => (
                    s.info.timeout_ms,
                    s.end.as_ref().and_then(|e| e.query().ok()),
                ),
                None => (0, None),
            };
            let a = self.home.abort.as_ref();
            let healthy = a.is_none_or(|a| a.state() == CommState::Ready);
            let limit = wait_limit_ms.unwrap_or(timeout_ms);
            match ended {
                Some(true) if healthy => return Ok(true),
                Some(false)
                    if healthy
                        && !is_past(created_ns, now, limit)
                        && a.is_none_or(|a| a.poll().is_ok()) =>
                {
                    return Ok(false)
                }
                _ => alone = self.detach(&mut r, place),
            }
        }
        drop(r);
        match alone {
            Some(w) => w.poll(now, wait_limit_ms, Hint::Unknown, None),
            // Its slot is gone: done meanwhile.
            None => Ok(place <= self.home.done_upto()),
        }
    }

    /// The work at `place` if it was handed out (its machine says how it ended).
    pub fn handed_out(&self, place: u64) -> Option<Arc<TrackedWork<E, A>>> {
        if !self.readers.any_detached.load(Ordering::Acquire) {
            return None;
        }
        self.detached(&self.read(), place)
    }
}

impl<E: Event + 'static, A: CommAbort + 'static> WatchedRing for WorkRing<E, A> {
    fn watch(&self) -> &GroupWatch {
        &self.home.watch
    }

    fn watch_arc(&self) -> Arc<GroupWatch> {
        self.home.watch.clone()
    }

    fn unrecorded(&self, times: &mut Vec<u64>) {
        let published = self.published.load(Ordering::Acquire);
        let mut r = self.read();
        for place in r.recorded + 1..=published {
            // SAFETY: published and not recorded, so not done; `reader` is held.
            if let Some(s) = unsafe { self.slot(&mut r, place) } {
                times.push(s.created_ns);
            }
        }
    }

    fn record_next(&self) {
        let mut r = self.read();
        let next = r.recorded + 1;
        if next <= self.published.load(Ordering::Acquire) {
            self.record_upto(&mut r, next);
        }
    }

    fn pass(
        &self,
        now: u64,
        out: &mut Vec<(Arc<dyn Watched>, Option<u64>)>,
    ) -> (usize, Option<u64>) {
        let mut r = self.read();
        let earliest = self.advance(&mut r, now);
        // A work a caller handed out before it was recorded carries its facts: recorded now.
        out.extend(r.handoff.drain(..).map(|(w, id)| {
            let id = id.or_else(|| w.record_trace());
            (w, id)
        }));
        (r.live, earliest)
    }

    fn unenroll(&self) {
        self.enrolled.store(false, Ordering::Relaxed);
    }

    fn idle(&self) -> bool {
        let r = self.read();
        r.handoff.is_empty() && r.live == 0 && self.published.load(Ordering::Acquire) == r.recorded
    }
}

#[cfg(test)]
mod tests;

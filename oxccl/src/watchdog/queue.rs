//! The hand-off from issuing threads to the watchdog: a bounded lock-free queue of fixed
//! slots allocated once (D. Vyukov's bounded MPMC queue, used here with one consumer), so
//! queuing a work is a few atomic operations on a preallocated slot: no lock shared with the
//! watchdog, no allocation, no system call. When the ring is full (a watchdog far behind) the
//! work goes to a locked overflow list instead of being lost, and so does every push after it
//! until the watchdog has taken the overflow: each producer's values keep their order (the
//! watchdog relies on a group's works arriving in issue order).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// One slot: its sequence number says whose turn it is (a producer's when it equals the
/// position, the consumer's when it equals the position + 1).
struct Slot<T> {
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// A bounded multi-producer queue with an unbounded overflow.
pub(crate) struct Queue<T> {
    slots: Box<[Slot<T>]>,
    mask: usize,
    /// Padding keeps producers' and the consumer's counters on separate cache lines.
    tail: CachePadded<AtomicUsize>,
    head: CachePadded<AtomicUsize>,
    overflow: Mutex<Vec<T>>,
    /// Set while the overflow holds values: pushes go there too, behind them.
    overflowing: AtomicBool,
}

#[repr(align(128))]
struct CachePadded<T>(T);

// SAFETY: a slot's value is written only by the producer that won its position and read only
// by the consumer after the producer published it (release/acquire on `seq`), so values move
// between threads one owner at a time: `T: Send` suffices.
unsafe impl<T: Send> Sync for Queue<T> {}
// SAFETY: as above; the queue owns its values.
unsafe impl<T: Send> Send for Queue<T> {}

impl<T> Queue<T> {
    /// A queue of `capacity` slots (rounded up to a power of two, at least 2).
    pub fn new(capacity: usize) -> Queue<T> {
        let n = capacity.max(2).next_power_of_two();
        let slots = (0..n)
            .map(|i| Slot {
                seq: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Queue {
            slots,
            mask: n - 1,
            tail: CachePadded(AtomicUsize::new(0)),
            head: CachePadded(AtomicUsize::new(0)),
            overflow: Mutex::new(Vec::new()),
            overflowing: AtomicBool::new(false),
        }
    }

    /// Queues `value` (any thread). A thread's values come out in the order it pushed them.
    /// Returns the ring position it took (counting every push from 0), or `None` when it went
    /// to the overflow: the caller wakes the consumer every so many positions.
    pub fn push(&self, value: T) -> Option<usize> {
        let mut value = value;
        if !self.overflowing.load(Ordering::Acquire) {
            match self.try_ring(value) {
                Ok(pos) => return Some(pos),
                Err(v) => value = v,
            }
        }
        let mut o = self.overflow.lock().unwrap_or_else(PoisonError::into_inner);
        // The consumer clears the flag only under this lock, after taking the overflow: clear
        // here means the overflow is empty and the ring may have room again.
        if !self.overflowing.load(Ordering::Acquire) {
            match self.try_ring(value) {
                Ok(pos) => return Some(pos),
                Err(v) => value = v,
            }
            self.overflowing.store(true, Ordering::Release);
        }
        o.push(value);
        None
    }

    /// Puts `value` in the ring (returning its position), or gives it back when the ring is
    /// full.
    fn try_ring(&self, value: T) -> Result<usize, T> {
        let mut pos = self.tail.0.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & self.mask];
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq as isize - pos as isize;
            if diff == 0 {
                match self.tail.0.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the CAS on `pos` makes this thread the slot's only
                        // writer until it publishes `seq = pos + 1`; the slot is empty (its
                        // previous value was taken by the consumer, which then set `seq = pos`).
                        unsafe { (*slot.value.get()).write(value) };
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(pos);
                    }
                    Err(now) => pos = now,
                }
            } else if diff < 0 {
                // Full: the consumer has not taken this slot's value of the last lap.
                return Err(value);
            } else {
                pos = self.tail.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest value of the ring, if any (one consumer at a time: the watchdog).
    fn pop(&self) -> Option<T> {
        let mut pos = self.head.0.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & self.mask];
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq as isize - pos.wrapping_add(1) as isize;
            if diff == 0 {
                match self.head.0.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: `seq == pos + 1` means the producer published a value here,
                        // and winning the CAS makes this thread its only reader.
                        let v = unsafe { (*slot.value.get()).assume_init_read() };
                        slot.seq
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(v);
                    }
                    Err(now) => pos = now,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = self.head.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Moves everything queued into `out`: the ring in queue order, then the overflow (filled
    /// only once the ring was full, so a producer's values there are younger than its values
    /// in the ring).
    pub fn drain_into(&self, out: &mut Vec<T>) {
        while let Some(v) = self.pop() {
            out.push(v);
        }
        if self.overflowing.load(Ordering::Acquire) {
            let mut o = self.overflow.lock().unwrap_or_else(PoisonError::into_inner);
            // Every value a producer put in the ring before its first overflowed one comes
            // first: the ring may have filled again after the pass above, and a slot claimed
            // but not yet published stops `pop` early. So take the ring up to the position
            // claimed now, waiting for slow publishers (a producer never blocks between its
            // claim and its publication). Positions claimed later are of producers with
            // nothing in the overflow: one that has sees the flag and waits for this lock.
            let until = self.tail.0.load(Ordering::Acquire);
            while (until.wrapping_sub(self.head.0.load(Ordering::Relaxed)) as isize) > 0 {
                match self.pop() {
                    Some(v) => out.push(v),
                    None => std::thread::yield_now(),
                }
            }
            out.append(&mut o);
            self.overflowing.store(false, Ordering::Release);
        }
    }

    /// Whether nothing is queued (a hint: producers may be pushing meanwhile).
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.head.0.load(Ordering::Acquire) == self.tail.0.load(Ordering::Acquire)
            && self
                .overflow
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
    }
}

impl<T> Drop for Queue<T> {
    fn drop(&mut self) {
        // Drop the values still queued (works nobody will watch now).
        while self.pop().is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn keeps_order_and_overflows_without_loss() {
        let q = Queue::new(4);
        let pushed: Vec<Option<usize>> = (0..10).map(|i| q.push(i)).collect();
        assert_eq!(&pushed[..4], &[Some(0), Some(1), Some(2), Some(3)]);
        assert!(pushed[4..].iter().all(Option::is_none), "{pushed:?}");
        let mut out = Vec::new();
        q.drain_into(&mut out);
        assert_eq!(out, (0..10).collect::<Vec<_>>());
        assert!(q.is_empty());
        q.push(10);
        out.clear();
        q.drain_into(&mut out);
        assert_eq!(out, vec![10]);
    }

    #[test]
    fn many_producers_lose_nothing_and_drop_frees_values() {
        let q = Arc::new(Queue::new(64));
        let token = Arc::new(());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (q, token) = (q.clone(), token.clone());
                std::thread::spawn(move || {
                    for i in 0..5000u32 {
                        q.push((t, i, token.clone()));
                    }
                })
            })
            .collect();
        let mut seen = Vec::new();
        while threads.iter().any(|h| !h.is_finished()) {
            q.drain_into(&mut seen);
        }
        for h in threads {
            h.join().unwrap();
        }
        q.drain_into(&mut seen);
        assert_eq!(seen.len(), 4 * 5000);
        // Each producer's values arrive in the order it pushed them, overflow or not.
        let mut next = [0u32; 4];
        for (t, i, _) in &seen {
            assert_eq!(*i, next[*t as usize], "producer {t}");
            next[*t as usize] += 1;
        }
        assert_eq!(next, [5000; 4]);
        drop(seen);
        for i in 0..3 {
            q.push((9, i, token.clone()));
        }
        drop(q);
        assert_eq!(
            Arc::strong_count(&token),
            1,
            "queued values are dropped with the queue"
        );
    }
}

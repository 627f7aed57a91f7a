//! `GroupGuard` over the mock backend: the operations issued while it is open launch together
//! when it ends (by `end`, by drop, nested, after a refused operation), the group is closed
//! exactly once, and a nonblocking group end is waited for when the guard watches a
//! communicator. One thread drives every rank, as a single-process program with several GPUs
//! does.

use oxccl_comm::buffer::{HostBuf, Memory, Operand};
use oxccl_comm::mock::{MockBackend, MockComm, MockStream, World};
use oxccl_comm::{
    Backend, CommOp, Communicator, Element, Error, GroupGuard, Progress, RawBuf, RawBufMut,
    ReduceOp, Result,
};
use std::time::{Duration, Instant};

/// A rank driven from this thread: its communicator, its stream.
struct Rank {
    comm: MockComm,
    stream: MockStream,
}

fn ranks(n: u32) -> Vec<Rank> {
    ranks_of(World::new(n).unwrap())
}

fn ranks_of(comms: Vec<MockComm>) -> Vec<Rank> {
    comms
        .into_iter()
        .map(|comm| Rank {
            stream: comm.new_stream().unwrap(),
            comm,
        })
        .collect()
}

/// The accesses of the buffers a group's operations use, held until the group has ended: the
/// operations run only then, so their uses are recorded then (as the process group's
/// coalescing does). Dropped earlier, a use would be recorded before its operation runs.
type Held<'a> = Vec<<MockBackend as Memory>::Access<'a>>;

impl Rank {
    /// Issues the operation `op` makes of `send` (read) and `recv` (written), keeping their
    /// accesses in `held`.
    fn issue<'a, T: Element>(
        &'a self,
        held: &mut Held<'a>,
        send: Option<&'a HostBuf<T>>,
        recv: Option<&'a mut HostBuf<T>>,
        op: impl FnOnce(RawBuf, RawBufMut) -> CommOp<'static>,
    ) -> Result<()> {
        let dev = self.comm.device();
        let s = match send {
            Some(b) => {
                let (s, a) = b.read("send", dev, &self.stream)?;
                held.push(a);
                s
            }
            None => RawBuf::EMPTY,
        };
        let r = match recv {
            Some(b) => {
                let (r, a) = b.write("recv", dev, &self.stream)?;
                held.push(a);
                r
            }
            None => RawBufMut::EMPTY,
        };
        // SAFETY: the buffers are host memory of their stated lengths, kept alive on the
        // stream by their accesses until the queued work has run.
        unsafe { self.comm.issue(&op(s, r), &self.stream) }
    }

    fn up<T: Element>(&self, v: &[T]) -> HostBuf<T> {
        MockBackend::new().upload(&self.stream, v).unwrap()
    }

    fn down<T: Element>(&self, b: &HostBuf<T>) -> Vec<T> {
        MockBackend::new().download(&self.stream, b).unwrap()
    }
}

fn sum_in_place<'a>(r: &'a Rank, held: &mut Held<'a>, b: &'a mut HostBuf<i64>) -> Result<()> {
    r.issue::<i64>(held, None, Some(b), |_, b| {
        CommOp::all_reduce_in_place(b, i64::DTYPE, ReduceOp::Sum)
    })
}

/// No group is open on this thread: closing one is refused.
#[track_caller]
fn no_group_open(b: &MockBackend) {
    match b.group_end() {
        Err(Error::InvalidState { .. }) => {}
        other => panic!("a group is still open: {other:?}"),
    }
}

#[test]
fn a_ring_of_sends_and_recvs_from_one_thread_runs_in_one_group() {
    let n = 4u32;
    let rs = ranks(n);
    let outs: Vec<HostBuf<u32>> = (0..n).map(|r| rs[r as usize].up(&[r * 3; 5])).collect();
    let mut ins: Vec<HostBuf<u32>> = rs.iter().map(|k| k.up(&[0u32; 5])).collect();
    let b = MockBackend::new();
    let mut held = Held::new();
    let g = GroupGuard::start(b.clone()).unwrap();
    for (r, (k, inb)) in rs.iter().zip(ins.iter_mut()).enumerate() {
        let (next, prev) = ((r as u32 + 1) % n, (r as u32 + n - 1) % n);
        let send = |s, _| CommOp::send(s, u32::DTYPE, next);
        k.issue::<u32>(&mut held, Some(&outs[r]), None, send)
            .unwrap();
        let recv = |_, b| CommOp::recv(b, u32::DTYPE, prev);
        k.issue::<u32>(&mut held, None, Some(inb), recv).unwrap();
    }
    assert_eq!(g.end().unwrap(), Progress::Done);
    drop(held);
    for (r, (k, inb)) in rs.iter().zip(&ins).enumerate() {
        let prev = (r as u32 + n - 1) % n;
        assert_eq!(k.down(inb), [prev * 3; 5], "rank {r}");
    }
    no_group_open(&b);
}

/// Collectives of every rank issued from one thread: they can only complete together, so
/// without the group the first would wait for ever for the others.
#[test]
fn collectives_of_every_rank_from_one_thread_run_at_the_group_end() {
    let rs = ranks(3);
    let mut bufs: Vec<HostBuf<i64>> = (0..3).map(|r| rs[r].up(&[r as i64 + 1; 2])).collect();
    let b = MockBackend::new();
    let mut held = Held::new();
    let g = GroupGuard::start(b.clone()).unwrap();
    for (k, buf) in rs.iter().zip(bufs.iter_mut()) {
        sum_in_place(k, &mut held, buf).unwrap();
    }
    g.end().unwrap();
    drop(held);
    for (k, buf) in rs.iter().zip(&bufs) {
        assert_eq!(k.down(buf), [6; 2]);
    }
}

#[test]
fn a_dropped_guard_closes_its_group_once() {
    let rs = ranks(2);
    let mut bufs: Vec<HostBuf<i64>> = (0..2).map(|r| rs[r].up(&[10 * r as i64; 1])).collect();
    let b = MockBackend::new();
    let mut held = Held::new();
    {
        let _g = GroupGuard::start(b.clone()).unwrap();
        for (k, buf) in rs.iter().zip(bufs.iter_mut()) {
            sum_in_place(k, &mut held, buf).unwrap();
        }
    }
    drop(held);
    no_group_open(&b);
    for (k, buf) in rs.iter().zip(&bufs) {
        assert_eq!(k.down(buf), [10]);
    }
}

#[test]
fn nested_guards_launch_at_the_outer_end() {
    let rs = ranks(2);
    let mut bufs: Vec<HostBuf<i64>> = (0..2).map(|r| rs[r].up(&[r as i64 + 2; 3])).collect();
    let b = MockBackend::new();
    let mut held = Held::new();
    let (b0, b1) = bufs.split_at_mut(1);
    let outer = GroupGuard::start(b.clone()).unwrap();
    sum_in_place(&rs[0], &mut held, &mut b0[0]).unwrap();
    let inner = GroupGuard::start(b.clone()).unwrap();
    sum_in_place(&rs[1], &mut held, &mut b1[0]).unwrap();
    assert_eq!(inner.end().unwrap(), Progress::Done);
    // Closed by the outer guard only: the inner end left it open.
    assert_eq!(outer.end().unwrap(), Progress::Done);
    drop(held);
    no_group_open(&b);
    for (k, buf) in rs.iter().zip(&bufs) {
        assert_eq!(k.down(buf), [5; 3]);
    }
}

/// An operation refused at issue is left out; the rest of the group runs and the guard still
/// closes the group, once.
#[test]
fn a_refused_operation_leaves_the_rest_of_its_group() {
    let rs = ranks(2);
    let mut bufs: Vec<HostBuf<i64>> = (0..2).map(|r| rs[r].up(&[r as i64; 2])).collect();
    let stray = rs[0].up(&[1i64; 2]);
    let b = MockBackend::new();
    let mut held = Held::new();
    let g = GroupGuard::start(b.clone()).unwrap();
    let to_nobody = |s, _| CommOp::send(s, i64::DTYPE, 2);
    match rs[0].issue::<i64>(&mut held, Some(&stray), None, to_nobody) {
        Err(Error::InvalidArgument { arg: "peer", .. }) => {}
        other => panic!("{other:?}"),
    }
    for (k, buf) in rs.iter().zip(bufs.iter_mut()) {
        sum_in_place(k, &mut held, buf).unwrap();
    }
    g.end().unwrap();
    drop(held);
    no_group_open(&b);
    for (k, buf) in rs.iter().zip(&bufs) {
        assert_eq!(k.down(buf), [1; 2]);
    }
}

/// Polls each rank's communicator until its nonblocking work has been launched.
fn settle(rs: &[Rank]) {
    let began = Instant::now();
    for k in rs {
        while k.comm.poll().unwrap() == Progress::InProgress {
            assert!(began.elapsed() < Duration::from_secs(10), "never settled");
            std::thread::yield_now();
        }
    }
}

/// On nonblocking communicators a group end may be in progress: a guard that watches a
/// communicator waits for it; one that watches none says so and leaves the polling to the
/// caller.
#[test]
fn a_watching_guard_waits_for_a_nonblocking_group_end() {
    let rs = ranks_of(World::builder(2).nonblocking(3).build().unwrap());
    for k in &rs {
        k.comm.wait_ready().unwrap();
    }
    let mut bufs: Vec<HostBuf<i64>> = (0..2).map(|r| rs[r].up(&[r as i64 + 1; 2])).collect();
    let b = MockBackend::new();
    let mut held = Held::new();
    let g = GroupGuard::start(b.clone()).unwrap();
    for (k, buf) in rs.iter().zip(bufs.iter_mut()) {
        sum_in_place(k, &mut held, buf).unwrap();
    }
    assert_eq!(g.end().unwrap(), Progress::InProgress);
    drop(held);
    settle(&rs);
    for (k, buf) in rs.iter().zip(&bufs) {
        assert_eq!(k.down(buf), [3; 2]);
    }
    // Watching rank 0: its end returns once rank 0's launch is done.
    let mut held = Held::new();
    let g = GroupGuard::watching(b.clone(), &rs[0].comm, Duration::from_secs(10)).unwrap();
    for (k, buf) in rs.iter().zip(bufs.iter_mut()) {
        sum_in_place(k, &mut held, buf).unwrap();
    }
    assert_eq!(g.end().unwrap(), Progress::Done);
    assert_eq!(rs[0].comm.poll().unwrap(), Progress::Done);
    drop(held);
    settle(&rs);
    for (k, buf) in rs.iter().zip(&bufs) {
        assert_eq!(k.down(buf), [6; 2]);
    }
    no_group_open(&b);
}

//! Point-to-point rings in groups, one thread driving every rank, group errors.

mod common;

use common::*;
use oxccl_core::{Backend, CommOp, Communicator, DataType, Error, Progress, ReduceOp, Stream};
use oxccl_mock::World;

const DT: DataType = DataType::Int32;

#[test]
fn ring_recv_before_send_inside_a_group_does_not_deadlock() {
    for n in [1u32, 2, 3, 4, 8] {
        let got = on_ranks(World::new(n).unwrap(), |c| {
            let (me, n) = (c.rank(), c.size());
            let s = stream();
            let left = (me + n - 1) % n;
            let right = (me + 1) % n;
            let send = Buf::from_bytes(&i32s(&[me as i32 * 10, me as i32 * 10 + 1, 7]));
            let mut recv = Buf::filled(12, 0);
            groups().group_start().unwrap();
            // SAFETY: buffers outlive the synchronize below.
            unsafe {
                c.issue(
                    &CommOp::Recv {
                        buf: recv.wr(DT),
                        dtype: DT,
                        peer: left,
                    },
                    &s,
                )
                .unwrap();
                c.issue(
                    &CommOp::Send {
                        buf: send.rd(DT),
                        dtype: DT,
                        peer: right,
                    },
                    &s,
                )
                .unwrap();
            }
            assert_eq!(groups().group_end(), Ok(Progress::Done));
            s.synchronize().unwrap();
            assert_eq!(c.poll(), Ok(Progress::Done));
            (left, recv.bytes().to_vec())
        });
        for (left, bytes) in got {
            assert_eq!(
                bytes,
                i32s(&[left as i32 * 10, left as i32 * 10 + 1, 7]),
                "n {n}"
            );
        }
    }
}

#[test]
fn ungrouped_p2p_pairs_in_order() {
    let got = on_ranks(World::new(2).unwrap(), |c| {
        let s = stream();
        let peer = 1 - c.rank();
        let a = Buf::from_bytes(&i32s(&[1, 2]));
        let b = Buf::from_bytes(&i32s(&[3]));
        let mut ra = Buf::filled(8, 0);
        let mut rb = Buf::filled(4, 0);
        // SAFETY: buffers outlive the synchronize below. Sends are eager, so send-then-recv on
        // both ranks completes (more lenient than NCCL for large messages).
        unsafe {
            c.issue(
                &CommOp::Send {
                    buf: a.rd(DT),
                    dtype: DT,
                    peer,
                },
                &s,
            )
            .unwrap();
            c.issue(
                &CommOp::Send {
                    buf: b.rd(DT),
                    dtype: DT,
                    peer,
                },
                &s,
            )
            .unwrap();
            c.issue(
                &CommOp::Recv {
                    buf: ra.wr(DT),
                    dtype: DT,
                    peer,
                },
                &s,
            )
            .unwrap();
            c.issue(
                &CommOp::Recv {
                    buf: rb.wr(DT),
                    dtype: DT,
                    peer,
                },
                &s,
            )
            .unwrap();
        }
        s.synchronize().unwrap();
        (ra.bytes().to_vec(), rb.bytes().to_vec())
    });
    for (a, b) in got {
        assert_eq!(a, i32s(&[1, 2]));
        assert_eq!(b, i32s(&[3]));
    }
}

#[test]
fn one_thread_drives_every_rank_in_a_group() {
    for n in [1u32, 3, 8] {
        let comms = World::new(n).unwrap();
        // One stream for all ranks: grouped ops are posted before any is waited for.
        let s = stream();
        let mut bufs: Vec<Buf> = (0..n)
            .map(|r| Buf::from_bytes(&i32s(&[r as i32 + 1, 2])))
            .collect();
        groups().group_start().unwrap();
        for (c, b) in comms.iter().zip(bufs.iter_mut()) {
            // SAFETY: buffers outlive the synchronize below.
            unsafe { all_reduce_in_place(c, &s, b, DT, ReduceOp::Sum) }.unwrap();
        }
        assert_eq!(groups().group_end(), Ok(Progress::Done));
        s.synchronize().unwrap();
        let total: i32 = (1..=n as i32).sum();
        for b in &bufs {
            assert_eq!(b.bytes(), &i32s(&[total, 2 * n as i32])[..]);
        }
        // Separate streams per rank work the same.
        let streams: Vec<_> = (0..n).map(|_| stream()).collect();
        groups().group_start().unwrap();
        groups().group_start().unwrap();
        for ((c, b), s) in comms.iter().zip(bufs.iter_mut()).zip(&streams) {
            // SAFETY: as above.
            unsafe { all_reduce_in_place(c, s, b, DT, ReduceOp::Max) }.unwrap();
        }
        assert_eq!(groups().group_end(), Ok(Progress::Done));
        assert!(
            streams.iter().all(|s| s.query()),
            "nested group must not launch before the outermost end"
        );
        assert_eq!(groups().group_end(), Ok(Progress::Done));
        for s in &streams {
            s.synchronize().unwrap();
        }
        for b in &bufs {
            assert_eq!(b.bytes(), &i32s(&[total, 2 * n as i32])[..]);
        }
    }
}

#[test]
fn group_end_without_start_is_invalid_state() {
    assert!(matches!(
        groups().group_end(),
        Err(Error::InvalidState {
            attempted: "group_end",
            ..
        })
    ));
    // And the thread's group state stays sane afterwards.
    groups().group_start().unwrap();
    assert_eq!(groups().group_end(), Ok(Progress::Done));
}

#[test]
fn a_bad_op_inside_a_group_is_refused_and_the_rest_runs() {
    let got = on_ranks(World::new(2).unwrap(), |c| {
        let s = stream();
        let mut b = Buf::from_bytes(&i32s(&[c.rank() as i32 + 1]));
        let r = b.wr(DT);
        let mut short = Buf::filled(0, 0);
        groups().group_start().unwrap();
        // SAFETY: buffers outlive the synchronize below.
        let bad = unsafe {
            c.issue(
                &CommOp::AllReduce {
                    send: r.as_read(),
                    recv: short.wr(DT),
                    dtype: DT,
                    op: ReduceOp::Sum,
                },
                &s,
            )
        };
        assert!(
            matches!(bad, Err(Error::InvalidArgument { arg: "recv", .. })),
            "{bad:?}"
        );
        // SAFETY: refused before anything is queued (the root is out of range).
        let bad_root = unsafe {
            c.issue(
                &CommOp::Broadcast {
                    send: r.as_read(),
                    recv: r,
                    dtype: DT,
                    root: 9,
                },
                &s,
            )
        };
        assert!(matches!(
            bad_root,
            Err(Error::InvalidArgument { arg: "root", .. })
        ));
        // SAFETY: `b` outlives the stream's work: the stream is synchronized below.
        unsafe { c.issue(&in_place(&mut b, DT, ReduceOp::Sum), &s) }.unwrap();
        assert_eq!(groups().group_end(), Ok(Progress::Done));
        s.synchronize().unwrap();
        assert_eq!(c.poll(), Ok(Progress::Done));
        b.bytes().to_vec()
    });
    assert!(got.iter().all(|b| *b == i32s(&[3])));
}

#[test]
fn p2p_count_mismatch_reaches_both_ends() {
    let errs = on_ranks(World::new(2).unwrap(), |c| {
        let s = stream();
        let src = Buf::from_bytes(&i32s(&[1, 2, 3, 4]));
        let mut dst = Buf::filled(20, 0);
        // SAFETY: buffers outlive the synchronize below.
        unsafe {
            if c.rank() == 0 {
                c.issue(
                    &CommOp::Send {
                        buf: src.rd(DT),
                        dtype: DT,
                        peer: 1,
                    },
                    &s,
                )
                .unwrap();
            } else {
                c.issue(
                    &CommOp::Recv {
                        buf: dst.wr(DT),
                        dtype: DT,
                        peer: 0,
                    },
                    &s,
                )
                .unwrap();
            }
        }
        s.synchronize().unwrap();
        assert!(eventually(std::time::Duration::from_secs(2), || c
            .poll()
            .is_err()));
        c.poll().unwrap_err()
    });
    for e in errs {
        match e {
            Error::Mismatch {
                what: "count",
                detail,
            } => assert_eq!(detail.as_str(), "send on rank 0: 4, recv on rank 1: 5"),
            e => panic!("{e:?}"),
        }
    }
}

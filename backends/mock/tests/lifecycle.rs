//! World and backend creation, nonblocking init, split, registration, finalize, streams and events.

mod common;

use common::*;
use oxccl_core::{
    Backend, CommConfig, CommOp, CommState, Communicator, DataType, Error, Event, Feature,
    FeatureSet, Progress, ReduceOp, Stream, Version,
};
use oxccl_mock::{MockBackend, MockComm, World};
use std::time::Duration;

const DT: DataType = DataType::Int64;

/// An in-place i64 sum all_reduce, synchronized; returns the result.
fn sum(c: &MockComm, v: i64) -> i64 {
    sum_i64(c, v).unwrap()
}

#[test]
fn world_of_zero_is_invalid() {
    assert!(matches!(World::new(0), Err(Error::InvalidArgument { .. })));
    let w = World::new(4).unwrap();
    assert_eq!(
        w.iter().map(|c| c.rank()).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(w
        .iter()
        .all(|c| c.size() == 4 && c.state() == CommState::Ready));
}

#[test]
fn barrier_needs_no_buffer() {
    on_ranks(World::new(3).unwrap(), |c| {
        let s = stream();
        // SAFETY: a barrier has no buffers.
        unsafe { c.issue(&CommOp::Barrier, &s) }.unwrap();
        s.synchronize().unwrap();
        assert_eq!(c.poll(), Ok(Progress::Done));
    });
}

#[test]
fn split_by_color_and_key_with_nocolor() {
    // 6 ranks: even ranks color 0 with reversed keys, odd ranks color 1, rank 5 NOCOLOR.
    let out = on_ranks(World::new(6).unwrap(), |c| {
        let r = c.rank();
        let color = if r == 5 { None } else { Some(r % 2) };
        let child = c.split(color, 10 - r, &CommConfig::new()).unwrap();
        let info = child
            .as_ref()
            .map(|ch| (ch.rank(), ch.size(), sum(ch, 1 << r)));
        // The parent still works after the split.
        assert_eq!(sum(&c, 1), 6);
        info
    });
    assert_eq!(out[5], None);
    // Color 0 = ranks {0, 2, 4}, keys 10, 8, 6: ordered 4, 2, 0.
    assert_eq!(out[4], Some((0, 3, 1 + 4 + 16)));
    assert_eq!(out[2], Some((1, 3, 21)));
    assert_eq!(out[0], Some((2, 3, 21)));
    // Color 1 = ranks {1, 3}.
    assert_eq!(out[3], Some((0, 2, 2 + 8)));
    assert_eq!(out[1], Some((1, 2, 10)));
}

#[test]
fn equal_keys_order_by_parent_rank_and_single_rank_child_is_identity() {
    let out = on_ranks(World::new(3).unwrap(), |c| {
        let ch = c
            .split(Some(c.rank()), 0, &CommConfig::new())
            .unwrap()
            .unwrap();
        assert_eq!((ch.rank(), ch.size()), (0, 1));
        let same = c.split(Some(7), 0, &CommConfig::new()).unwrap().unwrap();
        (sum(&ch, 42), same.rank())
    });
    assert_eq!(out, vec![(42, 0), (42, 1), (42, 2)]);
}

#[test]
fn nonblocking_split_stays_in_progress_for_the_configured_polls() {
    let out = on_ranks(World::builder(2).nonblocking(2).build().unwrap(), |c| {
        while c.poll().unwrap() == Progress::InProgress {}
        let ch = c
            .split(Some(0), 0, &CommConfig::new().blocking(false))
            .unwrap()
            .unwrap();
        assert_eq!(ch.state(), CommState::Initializing);
        // The configured polls, and more while the other rank has not called split yet.
        let mut in_progress = 0;
        while ch.poll().unwrap() == Progress::InProgress {
            in_progress += 1;
        }
        assert!(in_progress >= 2, "{in_progress}");
        assert_eq!(ch.state(), CommState::Ready);
        sum(&ch, 5)
    });
    assert_eq!(out, vec![10, 10]);
}

#[test]
fn split_needs_the_feature() {
    let comms = World::builder(1)
        .version(Version::new(2, 17, 1))
        .build()
        .unwrap();
    assert!(matches!(
        comms[0].split(Some(0), 0, &CommConfig::new()),
        Err(Error::Unsupported {
            feature: Feature::Split,
            ..
        })
    ));
}

#[test]
fn nonblocking_world_polls_in_progress_then_done() {
    let comms = World::builder(2).nonblocking(3).build().unwrap();
    for c in &comms {
        assert_eq!(c.state(), CommState::Initializing);
        for _ in 0..3 {
            assert_eq!(c.poll(), Ok(Progress::InProgress));
        }
        assert_eq!(c.poll(), Ok(Progress::Done));
        assert_eq!(c.state(), CommState::Ready);
    }
    assert!(matches!(
        World::builder(2)
            .version(Version::new(2, 13, 4))
            .nonblocking(1)
            .build(),
        Err(Error::Unsupported {
            feature: Feature::NonBlocking,
            ..
        })
    ));
}

#[test]
fn backend_init_rank_rendezvous_blocking_and_nonblocking() {
    let be = MockBackend::new();
    assert_eq!(be.version(), oxccl_mock::DEFAULT_VERSION);
    let id = be.unique_id().unwrap();
    assert_ne!(id, be.unique_id().unwrap());
    let out = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3u32)
            .map(|r| {
                let (be, id) = (&be, &id);
                s.spawn(move || {
                    let c = be
                        .init_rank(id, r, 3, oxccl_core::Device(r), &CommConfig::new())
                        .unwrap();
                    assert_eq!(c.state(), CommState::Ready);
                    sum(&c, r as i64 + 1)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(out, vec![6, 6, 6]);

    // Nonblocking: in progress until every rank joined and the polls are spent.
    let id = be.unique_id().unwrap();
    let nb = CommConfig::new().blocking(false);
    let c0 = be.init_rank(&id, 0, 2, oxccl_core::Device(0), &nb).unwrap();
    assert_eq!(c0.state(), CommState::Initializing);
    for _ in 0..5 {
        assert_eq!(c0.poll(), Ok(Progress::InProgress));
    }
    let c1 = be.init_rank(&id, 1, 2, oxccl_core::Device(1), &nb).unwrap();
    assert_eq!(c0.poll(), Ok(Progress::Done));
    assert_eq!(c1.poll(), Ok(Progress::InProgress));
    assert_eq!(c1.poll(), Ok(Progress::Done));
    assert!(matches!(
        be.init_rank(&id, 5, 2, oxccl_core::Device(0), &nb),
        Err(Error::InvalidArgument { arg: "rank", .. })
    ));
}

#[test]
fn blocking_init_times_out_when_a_rank_never_comes() {
    let be = MockBackend::with_options(
        FeatureSet::for_version(oxccl_mock::DEFAULT_VERSION),
        oxccl_mock::FaultPlan::new(),
        1,
        Duration::from_millis(100),
    );
    let id = be.unique_id().unwrap();
    assert!(matches!(
        be.init_rank(&id, 0, 2, oxccl_core::Device(0), &CommConfig::new()),
        Err(Error::Timeout { .. })
    ));
}

#[test]
fn register_twice_and_unknown_deregister_name_the_address() {
    let comms = World::new(1).unwrap();
    let c = &comms[0];
    let b = Buf::filled(64, 0);
    let h = c.register(b.addr(), 64).unwrap();
    match c.register(b.addr(), 64) {
        Err(Error::InvalidArgument {
            arg: "addr",
            expected,
        }) => assert!(expected.contains(&format!("{:#x}", b.addr()))),
        e => panic!("{e:?}"),
    }
    c.deregister(h).unwrap();
    match c.deregister(h) {
        Err(Error::InvalidArgument {
            arg: "handle",
            expected,
        }) => assert!(expected.contains(&format!("{:#x}", b.addr()))),
        e => panic!("{e:?}"),
    }
    let old = World::builder(1)
        .features(
            FeatureSet::for_version(Version::new(2, 28, 3)).without(Feature::BufferRegistration),
        )
        .build()
        .unwrap();
    assert!(matches!(
        old[0].register(b.addr(), 64),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn hidden_features_are_refused_by_the_checks() {
    let comms = World::builder(1)
        .version(Version::new(2, 19, 3))
        .build()
        .unwrap();
    let s = stream();
    let mut b = Buf::filled(8, 0);
    let r = b.wr(DataType::Float8E4M3);
    // SAFETY: refused before it runs.
    let e = unsafe {
        comms[0].issue(
            &CommOp::AllReduce {
                send: r.as_read(),
                recv: r,
                dtype: DataType::Float8E4M3,
                op: ReduceOp::Sum,
            },
            &s,
        )
    };
    assert!(matches!(
        e,
        Err(Error::Unsupported {
            feature: Feature::Float8,
            ..
        })
    ));
}

#[test]
fn finalize_flushes_then_refuses_work() {
    let out = on_ranks(World::new(2).unwrap(), |c| {
        let v = sum(&c, 2);
        assert_eq!(c.finalize(), Ok(Progress::Done));
        assert_eq!(c.state(), CommState::Finalized);
        let s = stream();
        // SAFETY: refused before it runs.
        let e = unsafe { c.issue(&CommOp::Barrier, &s) };
        assert!(matches!(
            e,
            Err(Error::InvalidState {
                state: CommState::Finalized,
                ..
            })
        ));
        v
    });
    assert_eq!(out, vec![4, 4]);
}

#[test]
fn events_complete_in_order_and_time() {
    let s = stream();
    let other = stream();
    let a = s.record(true).unwrap();
    let gate = other.record(false).unwrap();
    s.wait_event(&gate).unwrap();
    let b = s.record(true).unwrap();
    let untimed = s.record(false).unwrap();
    s.synchronize().unwrap();
    assert!(s.query());
    assert!(a.query().unwrap() && b.query().unwrap());
    let ms = a.elapsed_ms(&b).unwrap();
    assert!((0.0..1000.0).contains(&ms), "{ms}");
    assert!(matches!(
        a.elapsed_ms(&untimed),
        Err(Error::InvalidArgument { arg: "event", .. })
    ));
    b.synchronize().unwrap();
    // A stream waiting on an event of another stream waits for it.
    let slow = stream();
    let fast = stream();
    let comms = World::builder(1)
        .faults(oxccl_mock::FaultPlan::new().delay_op(0, 0, Duration::from_millis(100)))
        .build()
        .unwrap();
    // SAFETY: a barrier has no buffers.
    unsafe { comms[0].issue(&CommOp::Barrier, &slow) }.unwrap();
    let done = slow.record(true).unwrap();
    fast.wait_event(&done).unwrap();
    let after = fast.record(true).unwrap();
    fast.synchronize().unwrap();
    assert!(done.elapsed_ms(&after).unwrap() >= 0.0);
}

#[test]
fn nonblocking_group_end_and_finalize_report_in_progress_for_the_polls() {
    let comms = World::builder(2).nonblocking(2).build().unwrap();
    for c in &comms {
        while c.poll().unwrap() == Progress::InProgress {}
    }
    let streams = [stream(), stream()];
    let mut bufs: Vec<Buf> = (0..2).map(|r| Buf::from_bytes(&i64s(&[r + 1]))).collect();
    let op = |b: &mut Buf| in_place(b, DT, ReduceOp::Sum);
    // One thread drives both ranks inside one group.
    groups().group_start().unwrap();
    for (i, c) in comms.iter().enumerate() {
        let o = op(&mut bufs[i]);
        // SAFETY: the buffers outlive the synchronize below.
        unsafe { c.issue(&o, &streams[i]) }.unwrap();
    }
    assert_eq!(groups().group_end(), Ok(Progress::InProgress));
    // Using a communicator before its group end has reported Done is refused (as NCCL does).
    // SAFETY: refused before it runs.
    let e = unsafe { comms[0].issue(&CommOp::Barrier, &streams[0]) };
    assert!(
        matches!(
            e,
            Err(Error::InvalidState {
                state: CommState::Ready,
                ..
            })
        ),
        "{e:?}"
    );
    for c in &comms {
        assert_eq!(c.poll(), Ok(Progress::InProgress));
        assert_eq!(c.poll(), Ok(Progress::InProgress));
        assert_eq!(c.poll(), Ok(Progress::Done));
        assert_eq!(c.state(), CommState::Ready);
    }
    for s in &streams {
        s.synchronize().unwrap();
    }
    for b in &bufs {
        assert_eq!(b.bytes(), i64s(&[3]).as_slice());
    }
    // Finalize answers InProgress, then the configured polls, then Done.
    for c in &comms {
        assert_eq!(c.finalize(), Ok(Progress::InProgress));
        assert_eq!(c.state(), CommState::Finalizing);
        assert_eq!(c.poll(), Ok(Progress::InProgress));
        assert_eq!(c.poll(), Ok(Progress::InProgress));
        assert_eq!(c.poll(), Ok(Progress::Done));
        assert_eq!(c.state(), CommState::Finalized);
        assert_eq!(c.poll(), Ok(Progress::Done));
    }
    // A blocking world's group end and finalize are Done at once.
    let comms = World::new(1).unwrap();
    groups().group_start().unwrap();
    assert_eq!(groups().group_end(), Ok(Progress::Done));
    assert_eq!(comms[0].finalize(), Ok(Progress::Done));
}

#[test]
fn nonblocking_finalize_waits_for_queued_work() {
    // The rank's only op sleeps on its stream: finalize stays InProgress until it has run.
    let comms = World::builder(1)
        .nonblocking(0)
        .faults(oxccl_mock::FaultPlan::new().delay_op(0, 0, Duration::from_millis(200)))
        .build()
        .unwrap();
    let c = &comms[0];
    while c.poll().unwrap() == Progress::InProgress {}
    let s = stream();
    // SAFETY: a barrier has no buffers.
    unsafe { c.issue(&CommOp::Barrier, &s) }.unwrap();
    assert_eq!(c.finalize(), Ok(Progress::InProgress));
    assert_eq!(c.poll(), Ok(Progress::InProgress));
    assert!(eventually(Duration::from_secs(5), || c.poll() == Ok(Progress::Done)));
    assert_eq!(c.state(), CommState::Finalized);
    assert!(s.query());
}

#[test]
fn one_thread_splits_every_rank_of_a_nonblocking_world() {
    let comms = World::builder(4).nonblocking(2).build().unwrap();
    for c in &comms {
        while c.poll().unwrap() == Progress::InProgress {}
    }
    let cfg = CommConfig::new().blocking(false);
    // Colors: ranks 0 and 2 → 7 (keys reverse them), rank 1 → NOCOLOR, rank 3 → 9.
    let calls = [(Some(7), 5), (None, 0), (Some(7), 1), (Some(9), 0)];
    let mut kids: Vec<Option<MockComm>> = Vec::new();
    for (c, (color, key)) in comms.iter().zip(calls) {
        // Returns at once although the other ranks have not called yet.
        let k = c.split(color, key, &cfg).unwrap();
        if let Some(k) = &k {
            assert_eq!(k.state(), CommState::Initializing);
        }
        kids.push(k);
    }
    assert!(kids[1].is_none());
    for k in kids.iter().flatten() {
        assert_eq!(k.poll(), Ok(Progress::InProgress));
        assert_eq!(k.poll(), Ok(Progress::InProgress));
        assert_eq!(k.poll(), Ok(Progress::Done));
        assert_eq!(k.state(), CommState::Ready);
    }
    let k0 = kids[0].as_ref().unwrap();
    let k2 = kids[2].as_ref().unwrap();
    let k3 = kids[3].as_ref().unwrap();
    assert_eq!((k0.rank(), k0.size()), (1, 2));
    assert_eq!((k2.rank(), k2.size()), (0, 2));
    assert_eq!((k3.rank(), k3.size()), (0, 1));
    // The children work: one thread drives the pair in a group.
    let (s0, s2) = (stream(), stream());
    let mut b0 = Buf::from_bytes(&i64s(&[10]));
    let mut b2 = Buf::from_bytes(&i64s(&[32]));
    groups().group_start().unwrap();
    for (k, b, s) in [(k0, &mut b0, &s0), (k2, &mut b2, &s2)] {
        // SAFETY: the buffers outlive the synchronize below.
        unsafe { all_reduce_in_place(k, s, b, DT, ReduceOp::Sum) }.unwrap();
    }
    assert_eq!(groups().group_end(), Ok(Progress::InProgress));
    for k in [k0, k2] {
        while k.poll().unwrap() == Progress::InProgress {}
    }
    s0.synchronize().unwrap();
    s2.synchronize().unwrap();
    assert_eq!(b0.bytes(), i64s(&[42]).as_slice());
    assert_eq!(b2.bytes(), i64s(&[42]).as_slice());
}

#[test]
fn pending_nonblocking_split_child_fails_or_aborts_cleanly() {
    let cfg = CommConfig::new().blocking(false);
    // A peer that dies before calling split: the pending child reports Remote.
    let comms = World::new(2).unwrap();
    let k = comms[0].split(Some(0), 0, &cfg).unwrap().unwrap();
    assert_eq!(k.poll(), Ok(Progress::InProgress));
    comms[1].abort("gone");
    let e = k.poll().unwrap_err();
    assert!(matches!(e, Error::Remote { .. }), "{e:?}");
    assert_eq!(k.poll().unwrap_err(), e);
    assert_eq!(k.state(), CommState::Failed);
    // Aborting a pending child: its own poll says Aborted, and the peer's child, once the
    // split completes, sees its partner gone instead of hanging in a collective.
    let comms = World::new(2).unwrap();
    let k0 = comms[0].split(Some(0), 0, &cfg).unwrap().unwrap();
    k0.abort("not needed");
    assert!(matches!(k0.poll(), Err(Error::Aborted { .. })));
    let k1 = comms[1].split(Some(0), 0, &cfg).unwrap().unwrap();
    while k1.poll().unwrap() == Progress::InProgress {}
    let s = stream();
    let mut b = Buf::from_bytes(&i64s(&[1]));
    // SAFETY: `b` outlives the synchronize below.
    unsafe { all_reduce_in_place(&k1, &s, &mut b, DT, ReduceOp::Sum) }.unwrap();
    s.synchronize().unwrap();
    assert!(matches!(k1.poll(), Err(Error::Remote { .. })));
    // Dropping a pending child does the same.
    let comms = World::new(2).unwrap();
    drop(comms[0].split(Some(0), 0, &cfg).unwrap());
    let k1 = comms[1].split(Some(0), 0, &cfg).unwrap().unwrap();
    while k1.poll().unwrap() == Progress::InProgress {}
    assert!(sum_i64(&k1, 1).is_err());
}

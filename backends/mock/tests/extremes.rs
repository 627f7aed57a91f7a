//! The mock's own inputs at their extremes (world and communicator sizes, fault plans, durations,
//! poll counts, split colors and keys, device factor addresses, registration spans, buffers the
//! mock cannot copy): each gives a typed error naming the argument, or a sane outcome; none
//! panics, aborts or hangs.

mod common;

use common::*;
use oxccl_core::{
    Backend, CommConfig, CommOp, CommState, Communicator, DataType, Error, FeatureSet, Progress,
    RawBufMut, ReduceOp, ResultCode, Scalar, Stream, UniqueId,
};
use oxccl_mock::{FaultPlan, MockBackend, World, DEFAULT_VERSION, MAX_RANKS};
use std::time::{Duration, Instant};

fn invalid_arg<T: std::fmt::Debug>(r: Result<T, Error>) -> &'static str {
    match r {
        Err(Error::InvalidArgument { arg, .. }) => arg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn world_sizes_at_the_limits() {
    assert_eq!(invalid_arg(World::new(0)), "n");
    assert_eq!(invalid_arg(World::new(MAX_RANKS + 1)), "n");
    assert_eq!(invalid_arg(World::new(i32::MAX as u32 + 1)), "n");
    assert_eq!(invalid_arg(World::new(u32::MAX)), "n");
    // 100 000 ranks: built at once (no thread per rank, no size² state), dropped at once.
    let start = Instant::now();
    let comms = World::new(100_000).unwrap();
    assert_eq!(comms.len(), 100_000);
    let last = &comms[99_999];
    assert_eq!((last.rank(), last.size()), (99_999, 100_000));
    assert_eq!(last.state(), CommState::Ready);
    drop(comms);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    // The largest world allowed builds too.
    assert_eq!(World::new(MAX_RANKS).unwrap().len(), MAX_RANKS as usize);
}

#[test]
fn fault_plans_are_validated_against_the_world() {
    let build = |plan: FaultPlan| World::builder(4).faults(plan).build();
    let code = ResultCode::SYSTEM_ERROR;
    assert_eq!(
        invalid_arg(build(FaultPlan::new().fail_op(4, 0, code))),
        "plan"
    );
    assert_eq!(
        invalid_arg(build(FaultPlan::new().hang_op(u32::MAX, 0))),
        "plan"
    );
    assert_eq!(invalid_arg(build(FaultPlan::new().lose_rank(7, 1))), "plan");
    let d = Duration::from_millis(1);
    assert_eq!(
        invalid_arg(build(FaultPlan::new().delay_op(4, 0, d))),
        "plan"
    );
    assert_eq!(
        invalid_arg(build(FaultPlan::new().init_in_progress(4, 1))),
        "plan"
    );
    for bad in [
        ResultCode::SUCCESS,
        ResultCode::IN_PROGRESS,
        ResultCode(99),
        ResultCode(-1),
    ] {
        assert_eq!(
            invalid_arg(build(FaultPlan::new().fail_op(0, 0, bad))),
            "plan"
        );
        // A children's plan is checked for its codes (not its ranks: children vary in size).
        let kids = FaultPlan::new().fail_op(0, 0, bad);
        assert_eq!(
            invalid_arg(build(FaultPlan::new().in_children(kids))),
            "plan"
        );
    }
    let kids = FaultPlan::new().fail_op(1000, 0, code);
    assert!(build(FaultPlan::new().in_children(kids)).is_ok());
    // An op index no rank reaches is fine and never fires.
    let comms = build(FaultPlan::new().fail_op(0, u64::MAX, code)).unwrap();
    let got = on_ranks(comms, |c| sum_i64(&c, 1));
    assert_eq!(got, vec![Ok(4); 4]);
    // u32::MAX init polls: in progress until aborted, then Aborted, never a panic.
    let comms = build(FaultPlan::new().init_in_progress(0, u32::MAX)).unwrap();
    for _ in 0..1000 {
        assert_eq!(comms[0].poll(), Ok(Progress::InProgress));
    }
    comms[0].abort("enough");
    assert!(matches!(comms[0].poll(), Err(Error::Aborted { .. })));
}

#[test]
fn an_endless_planned_delay_ends_with_abort() {
    let plan = FaultPlan::new().delay_op(0, 0, Duration::MAX);
    let comms = World::builder(2).faults(plan).build().unwrap();
    let s0 = stream();
    let s1 = stream();
    let mut b0 = Buf::from_bytes(&f32s(&[1.0]));
    let mut b1 = Buf::from_bytes(&f32s(&[2.0]));
    // SAFETY: both buffers outlive the synchronizes below.
    unsafe {
        all_reduce_in_place(&comms[0], &s0, &mut b0, DataType::Float32, ReduceOp::Sum).unwrap();
        all_reduce_in_place(&comms[1], &s1, &mut b1, DataType::Float32, ReduceOp::Sum).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(!s0.query(), "the delay must still be running");
    let start = Instant::now();
    comms[0].abort("stop the delay");
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(matches!(comms[0].poll(), Err(Error::Aborted { .. })));
    assert!(matches!(comms[1].poll(), Err(Error::Remote { .. })));
    // Nothing was written into either buffer.
    assert_eq!(b0.bytes(), f32s(&[1.0]).as_slice());
    assert_eq!(b1.bytes(), f32s(&[2.0]).as_slice());
}

#[test]
fn split_colors_and_keys_beyond_i32_are_refused_before_the_rendezvous() {
    let cfg = CommConfig::new();
    let got = on_ranks(World::new(2).unwrap(), |c| {
        let color = c
            .split(Some(i32::MAX as u32 + 1), 0, &cfg)
            .map(|k| k.is_some());
        let color_max = c.split(Some(u32::MAX), 0, &cfg).map(|k| k.is_some());
        let key = c.split(Some(0), u32::MAX, &cfg).map(|k| k.is_some());
        // The refused calls joined nothing: the next split pairs the ranks as usual, with the
        // largest color and key NCCL takes.
        let max = i32::MAX as u32;
        let child = c.split(Some(max), max - c.rank(), &cfg).unwrap().unwrap();
        let (r, n) = (child.rank(), child.size());
        (
            invalid_arg(color),
            invalid_arg(color_max),
            invalid_arg(key),
            r,
            n,
            sum_i64(&child, 1),
        )
    });
    assert_eq!(got[0], ("color", "color", "key", 1, 2, Ok(2)));
    assert_eq!(got[1], ("color", "color", "key", 0, 2, Ok(2)));
}

#[test]
fn backend_init_rank_sizes_ranks_plans_and_timeouts_at_the_limits() {
    let be = MockBackend::new();
    let id = be.unique_id().unwrap();
    let init = |be: &MockBackend, id: &UniqueId, rank: u32, size: u32| {
        be.init_rank(id, rank, size, oxccl_core::Device(rank), &CommConfig::new())
    };
    assert_eq!(invalid_arg(init(&be, &id, 0, 0)), "size");
    assert_eq!(invalid_arg(init(&be, &id, 0, MAX_RANKS + 1)), "size");
    assert_eq!(invalid_arg(init(&be, &id, 0, i32::MAX as u32)), "size");
    assert_eq!(invalid_arg(init(&be, &id, 0, u32::MAX)), "size");
    assert_eq!(invalid_arg(init(&be, &id, 2, 2)), "rank");
    assert_eq!(invalid_arg(init(&be, &id, u32::MAX, 2)), "rank");
    let features = FeatureSet::for_version(DEFAULT_VERSION);
    // A plan failing with a code that is not an error is refused at init.
    let plan = FaultPlan::new().fail_op(0, 0, ResultCode::SUCCESS);
    let bad = MockBackend::with_options(features, plan, 1, Duration::from_secs(1));
    assert_eq!(
        invalid_arg(init(&bad, &bad.unique_id().unwrap(), 0, 1)),
        "plan"
    );
    // A zero timeout with a rank missing: a timeout error, not a hang or a panic.
    let quick = MockBackend::with_options(features, FaultPlan::new(), 0, Duration::ZERO);
    let e = init(&quick, &quick.unique_id().unwrap(), 0, 2).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    // The longest timeout and the most polls: both ranks come, so both are made.
    let patient = MockBackend::with_options(features, FaultPlan::new(), u32::MAX, Duration::MAX);
    let id = patient.unique_id().unwrap();
    let got = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let (patient, id) = (&patient, &id);
                s.spawn(move || init(patient, id, r, 2).and_then(|c| sum_i64(&c, 1)))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(got, vec![Ok(2), Ok(2)]);
}

#[test]
fn nonblocking_polls_at_the_limits() {
    let comms = World::builder(2).nonblocking(u32::MAX).build().unwrap();
    for _ in 0..1000 {
        assert_eq!(comms[1].poll(), Ok(Progress::InProgress));
    }
    comms[1].abort("enough");
    assert!(matches!(comms[1].poll(), Err(Error::Aborted { .. })));
    let comms = World::builder(2).nonblocking(0).build().unwrap();
    assert_eq!(comms[0].poll(), Ok(Progress::Done));
    assert_eq!(groups().group_start(), Ok(()));
    assert_eq!(groups().group_end(), Ok(Progress::Done));
}

#[test]
fn device_premul_factors_must_be_aligned_and_not_wrap() {
    let comms = World::new(1).unwrap();
    let s = stream();
    let mut b = Buf::from_bytes(&f32s(&[1.0, 2.0]));
    let f = Buf::from_bytes(&f32s(&[3.0]));
    let dt = DataType::Float32;
    for addr in [f.addr() + 1, f.addr() + 2, usize::MAX & !3, usize::MAX] {
        let op = ReduceOp::PreMulSum(Scalar::Device { addr });
        // SAFETY: refused at issue, before anything is read.
        let e = unsafe { all_reduce_in_place(&comms[0], &s, &mut b, dt, op) };
        assert_eq!(invalid_arg(e), "scalar", "{addr:#x}");
    }
    // An aligned factor is read when the op runs.
    let op = ReduceOp::PreMulSum(Scalar::Device { addr: f.addr() });
    // SAFETY: `b` and `f` outlive the synchronize below.
    unsafe { all_reduce_in_place(&comms[0], &s, &mut b, dt, op) }.unwrap();
    s.synchronize().unwrap();
    assert_eq!(comms[0].poll(), Ok(Progress::Done));
    assert_eq!(b.bytes(), f32s(&[3.0, 6.0]).as_slice());
}

#[test]
fn registering_a_span_that_wraps_is_refused() {
    let comms = World::new(1).unwrap();
    assert_eq!(invalid_arg(comms[0].register(usize::MAX - 7, 16)), "bytes");
    assert_eq!(invalid_arg(comms[0].register(8, usize::MAX)), "bytes");
    assert_eq!(invalid_arg(comms[0].register(0, 8)), "addr");
    assert!(comms[0].register(usize::MAX - 8, 8).is_ok());
}

#[test]
fn a_buffer_the_mock_cannot_copy_fails_the_op_instead_of_aborting() {
    // The checks accept any span up to isize::MAX bytes; the mock's copy of one that large
    // cannot be allocated, which must be an error, not an abort. The allocation fails before
    // anything is read, so the memory behind the span is never touched.
    let comms = World::new(1).unwrap();
    let s = stream();
    let b = Buf::filled(8, 0);
    let huge = RawBufMut::new(b.addr(), isize::MAX as usize);
    let op = CommOp::AllReduce {
        send: huge.as_read(),
        recv: huge,
        dtype: DataType::Int8,
        op: ReduceOp::Sum,
    };
    // SAFETY: the mock fails to allocate its copy before it reads or writes (see above).
    unsafe { comms[0].issue(&op, &s) }.unwrap();
    s.synchronize().unwrap();
    match comms[0].poll() {
        Err(Error::Backend { code, .. }) => assert_eq!(code, ResultCode::SYSTEM_ERROR),
        other => panic!("{other:?}"),
    }
    // A send of such a span (to itself) fails the same way; the recv learns of it.
    let comms = World::new(1).unwrap();
    let mut r = Buf::filled(8, 0);
    let send = CommOp::Send {
        buf: huge.as_read(),
        dtype: DataType::Int8,
        peer: 0,
    };
    let recv = CommOp::Recv {
        buf: r.wr(DataType::Int8),
        dtype: DataType::Int8,
        peer: 0,
    };
    groups().group_start().unwrap();
    // SAFETY: as above for the send; `r` outlives the synchronize below.
    unsafe {
        comms[0].issue(&send, &s).unwrap();
        comms[0].issue(&recv, &s).unwrap();
    }
    assert_eq!(groups().group_end(), Ok(Progress::Done));
    s.synchronize().unwrap();
    assert!(
        matches!(comms[0].poll(), Err(Error::Backend { code, .. }) if code == ResultCode::SYSTEM_ERROR)
    );
    assert_eq!(r.bytes(), &[0u8; 8]);
}

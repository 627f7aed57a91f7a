//! Mismatches, aborts and every fault of the plan, with what each rank sees.

mod common;

use common::*;
use oxccl_core::{
    CommOp, CommState, Communicator, DataType, Error, Progress, ReduceOp, ResultCode, Stream,
};
use oxccl_mock::{FaultPlan, MockComm, MockStream, World};
use std::time::{Duration, Instant};

const DT: DataType = DataType::Float32;

/// An in-place f32 all_reduce (sum) of `b` on `s`.
fn all_reduce(c: &MockComm, s: &MockStream, b: &mut Buf) -> oxccl_core::Result<()> {
    // SAFETY: every caller keeps `b` alive until its stream is synchronized or the comm aborted.
    unsafe { all_reduce_in_place(c, s, b, DT, ReduceOp::Sum) }
}

fn wait_err(c: &MockComm) -> Error {
    assert!(
        eventually(Duration::from_secs(2), || c.poll().is_err()),
        "rank {} saw no error",
        c.rank()
    );
    c.poll().unwrap_err()
}

fn mismatch(make: impl Fn(u32, &mut Buf, &mut Buf) -> CommOp<'static> + Sync) -> Vec<Error> {
    on_ranks(World::new(2).unwrap(), |c| {
        let s = stream();
        let mut a = Buf::from_bytes(&f32s(&[1.0; 8]));
        let mut b = Buf::filled(64, 0);
        let op = make(c.rank(), &mut a, &mut b);
        // SAFETY: buffers outlive the synchronize below.
        unsafe { c.issue(&op, &s) }.unwrap();
        s.synchronize().unwrap();
        wait_err(&c)
    })
}

fn assert_mismatch(errs: Vec<Error>, what: &str, detail: &str) {
    for e in errs {
        match e {
            Error::Mismatch { what: w, detail: d } => {
                assert_eq!(w, what);
                assert_eq!(d.as_str(), detail);
            }
            e => panic!("{e:?}"),
        }
    }
}

#[test]
fn mismatched_counts_dtypes_ops_roots_and_kinds_are_named_on_every_rank() {
    let e = mismatch(|r, a, b| CommOp::AllReduce {
        send: a.rd_at(DT, 0, 4 + r as usize),
        recv: b.wr_at(DT, 0, 4 + r as usize),
        dtype: DT,
        op: ReduceOp::Sum,
    });
    assert_mismatch(e, "count", "rank 0: 4, rank 1: 5");
    let e = mismatch(|r, a, b| {
        let dt = if r == 0 {
            DataType::Float32
        } else {
            DataType::Int32
        };
        CommOp::AllReduce {
            send: a.rd_at(dt, 0, 4),
            recv: b.wr_at(dt, 0, 4),
            dtype: dt,
            op: ReduceOp::Sum,
        }
    });
    assert_mismatch(e, "dtype", "rank 0: float32, rank 1: int32");
    let e = mismatch(|r, a, b| {
        let op = if r == 0 { ReduceOp::Sum } else { ReduceOp::Max };
        CommOp::AllReduce {
            send: a.rd_at(DT, 0, 4),
            recv: b.wr_at(DT, 0, 4),
            dtype: DT,
            op,
        }
    });
    assert_mismatch(e, "op", "rank 0: sum, rank 1: max");
    let e = mismatch(|r, a, b| CommOp::Broadcast {
        send: a.rd_at(DT, 0, 4),
        recv: b.wr_at(DT, 0, 4),
        dtype: DT,
        root: r,
    });
    assert_mismatch(e, "root", "rank 0: 0, rank 1: 1");
    let e = mismatch(|r, a, b| {
        if r == 0 {
            CommOp::AllReduce {
                send: a.rd_at(DT, 0, 4),
                recv: b.wr_at(DT, 0, 4),
                dtype: DT,
                op: ReduceOp::Sum,
            }
        } else {
            CommOp::AllGather {
                send: a.rd_at(DT, 0, 2),
                recv: b.wr_at(DT, 0, 4),
                dtype: DT,
            }
        }
    });
    assert_mismatch(e, "operation", "rank 0: all_reduce, rank 1: all_gather");
}

#[test]
fn abort_wakes_a_blocked_collective_and_peers_see_remote() {
    let comms = World::new(3).unwrap();
    let start = Instant::now();
    let errs = std::thread::scope(|sc| {
        let c2 = &comms[2];
        // Rank 2 never joins; rank 0 is aborted by another thread while blocked.
        let hs: Vec<_> = comms[..2]
            .iter()
            .map(|c| {
                sc.spawn(move || {
                    let s = stream();
                    let mut b = Buf::from_bytes(&f32s(&[1.0; 4]));
                    all_reduce(c, &s, &mut b).unwrap();
                    s.synchronize().unwrap();
                    wait_err(c)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        comms[0].abort("test abort");
        comms[0].abort("second abort is a no-op");
        let _ = c2;
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(
        errs[0],
        Error::Aborted {
            reason: oxccl_core::text!("test abort")
        }
    );
    match &errs[1] {
        Error::Remote { detail } => {
            assert!(detail.contains("rank 0 aborted: test abort"), "{detail}")
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(
        comms[2].poll(),
        Ok(Progress::Done),
        "a rank outside the collective is untouched"
    );
    // A later collective of rank 2 needs rank 0: it fails instead of hanging.
    let s = stream();
    let mut b = Buf::from_bytes(&f32s(&[1.0]));
    all_reduce(&comms[2], &s, &mut b).unwrap();
    s.synchronize().unwrap();
    assert!(matches!(wait_err(&comms[2]), Error::Remote { .. }));
}

#[test]
fn use_after_abort_fails_fast_with_the_reason() {
    let comms = World::new(2).unwrap();
    comms[1].abort("watchdog: timeout");
    let s = stream();
    let mut b = Buf::from_bytes(&f32s(&[1.0]));
    let e = all_reduce(&comms[1], &s, &mut b).unwrap_err();
    assert_eq!(
        e,
        Error::Aborted {
            reason: oxccl_core::text!("watchdog: timeout")
        }
    );
    assert_eq!(comms[1].state(), CommState::Aborted);
    assert!(matches!(comms[1].poll(), Err(Error::Aborted { .. })));
    assert!(matches!(
        comms[1].split(Some(0), 0, &Default::default()),
        Err(Error::Aborted { .. })
    ));
    assert!(matches!(
        comms[1].register(b.addr(), 4),
        Err(Error::Aborted { .. })
    ));
}

#[test]
fn fail_op_fails_at_issue_and_peers_get_remote() {
    let plan = FaultPlan::new().fail_op(1, 1, ResultCode::SYSTEM_ERROR);
    let out = on_ranks(World::builder(2).faults(plan).build().unwrap(), |c| {
        let s = stream();
        let mut b = Buf::from_bytes(&f32s(&[c.rank() as f32 + 1.0]));
        all_reduce(&c, &s, &mut b).unwrap();
        s.synchronize().unwrap();
        let first = b.bytes().to_vec();
        let second = all_reduce(&c, &s, &mut b);
        s.synchronize().unwrap();
        (first, second, wait_err(&c))
    });
    assert_eq!(out[0].0, f32s(&[3.0]));
    assert_eq!(out[1].0, f32s(&[3.0]));
    assert!(out[0].1.is_ok());
    assert!(matches!(
        &out[1].1,
        Err(Error::Backend {
            code: ResultCode::SYSTEM_ERROR,
            ..
        })
    ));
    assert_eq!(out[1].2.code(), Some(ResultCode::SYSTEM_ERROR));
    assert!(
        matches!(&out[0].2, Error::Remote { detail } if detail.contains("rank 1 failed")),
        "{:?}",
        out[0].2
    );
}

#[test]
fn hang_op_blocks_until_abort_and_peers_get_remote() {
    let plan = FaultPlan::new().hang_op(0, 0);
    let comms = World::builder(2).faults(plan).build().unwrap();
    let start = Instant::now();
    let (e0, e1) = std::thread::scope(|sc| {
        let h: Vec<_> = comms
            .iter()
            .map(|c| {
                sc.spawn(move || {
                    let s = stream();
                    let mut b = Buf::from_bytes(&f32s(&[1.0]));
                    all_reduce(c, &s, &mut b).unwrap();
                    s.synchronize().unwrap();
                    wait_err(c)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            comms[1].poll(),
            Ok(Progress::Done),
            "still blocked, no error yet"
        );
        comms[0].abort("hung");
        let mut r = h.into_iter().map(|h| h.join().unwrap());
        (r.next().unwrap(), r.next().unwrap())
    });
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(matches!(e0, Error::Aborted { .. }));
    assert!(matches!(e1, Error::Remote { .. }));
}

#[test]
fn lost_rank_leaves_peers_with_remote_within_bounded_time() {
    let plan = FaultPlan::new().lose_rank(1, 1);
    let start = Instant::now();
    let out = on_ranks(World::builder(3).faults(plan).build().unwrap(), |c| {
        let s = stream();
        let mut b = Buf::from_bytes(&f32s(&[1.0]));
        all_reduce(&c, &s, &mut b).unwrap();
        s.synchronize().unwrap();
        let first = b.bytes().to_vec();
        all_reduce(&c, &s, &mut b).unwrap();
        s.synchronize().unwrap();
        (first, wait_err(&c))
    });
    assert!(start.elapsed() < Duration::from_secs(2));
    for (r, (first, e)) in out.iter().enumerate() {
        assert_eq!(first, &f32s(&[3.0]));
        if r == 1 {
            assert_eq!(e.code(), Some(ResultCode::SYSTEM_ERROR), "{e:?}");
        } else {
            assert!(
                matches!(e, Error::Remote { detail } if detail.contains("rank 1 was lost at op 1")),
                "{e:?}"
            );
        }
    }
}

#[test]
fn delay_op_delays_and_still_computes() {
    let plan = FaultPlan::new().delay_op(0, 0, Duration::from_millis(200));
    let out = on_ranks(World::builder(2).faults(plan).build().unwrap(), |c| {
        let s = stream();
        let t0 = s.record(true).unwrap();
        let mut b = Buf::from_bytes(&f32s(&[2.0]));
        all_reduce(&c, &s, &mut b).unwrap();
        let t1 = s.record(true).unwrap();
        s.synchronize().unwrap();
        assert_eq!(c.poll(), Ok(Progress::Done));
        (
            b.bytes().to_vec(),
            oxccl_core::Event::elapsed_ms(&t0, &t1).unwrap(),
        )
    });
    for (b, ms) in out {
        assert_eq!(b, f32s(&[4.0]));
        assert!(ms >= 190.0, "{ms}");
    }
}

#[test]
fn init_in_progress_for_n_polls() {
    let plan = FaultPlan::new().init_in_progress(1, 3);
    let comms = World::builder(2).faults(plan).build().unwrap();
    assert_eq!(comms[0].state(), CommState::Ready);
    assert_eq!(comms[1].state(), CommState::Initializing);
    for _ in 0..3 {
        assert_eq!(comms[1].poll(), Ok(Progress::InProgress));
    }
    assert_eq!(comms[1].poll(), Ok(Progress::Done));
    assert_eq!(comms[1].state(), CommState::Ready);
}

#[test]
fn issue_waits_out_a_nonblocking_init() {
    let plan = FaultPlan::new().init_in_progress(1, 50);
    let got = on_ranks(World::builder(2).faults(plan).build().unwrap(), |c| {
        let s = stream();
        let mut b = Buf::from_bytes(&f32s(&[c.rank() as f32 + 1.0]));
        // Rank 1 is still initializing: issue polls it ready, then issues.
        all_reduce(&c, &s, &mut b).unwrap();
        s.synchronize().unwrap();
        assert_eq!(c.state(), CommState::Ready);
        b.bytes().to_vec()
    });
    assert!(got.iter().all(|b| *b == f32s(&[3.0])));
}

#[test]
fn an_init_past_its_time_limit_is_aborted_with_a_timeout() {
    // Rank 1 never joins: rank 0's nonblocking init cannot complete.
    let be = oxccl_mock::MockBackend::with_options(
        oxccl_core::FeatureSet::for_version(oxccl_mock::DEFAULT_VERSION),
        FaultPlan::new(),
        1,
        Duration::from_millis(50),
    );
    let id = oxccl_core::Backend::unique_id(&be).unwrap();
    let nb = oxccl_core::CommConfig::new().blocking(false);
    let c = oxccl_core::Backend::init_rank(&be, &id, 0, 2, oxccl_core::Device(0), &nb).unwrap();
    let handle = c.abort_handle();
    assert_eq!(c.state(), CommState::Initializing);
    let s = stream();
    let mut b = Buf::from_bytes(&f32s(&[1.0]));
    let e = all_reduce(&c, &s, &mut b).unwrap_err();
    assert!(
        matches!(e, Error::Timeout { ref what, after_ms } if what.contains("init") && after_ms >= 50),
        "{e:?}"
    );
    assert_eq!(c.state(), CommState::Aborted);
    assert!(c.reason().contains("timed out"), "{}", c.reason());
    assert_eq!(oxccl_core::CommAbort::state(&handle), CommState::Aborted);
    assert!(matches!(
        oxccl_core::CommAbort::poll(&handle),
        Err(Error::Aborted { .. })
    ));
    // The same through a world's own limit, with `wait_ready`.
    let plan = FaultPlan::new().init_in_progress(0, u32::MAX);
    let comms = World::builder(1)
        .faults(plan)
        .init_timeout(Duration::from_millis(20))
        .build()
        .unwrap();
    assert!(matches!(comms[0].wait_ready(), Err(Error::Timeout { .. })));
    assert_eq!(comms[0].state(), CommState::Aborted);
}

#[test]
fn ops_queued_behind_a_failure_do_not_hang_and_drop_is_prompt() {
    // Rank 1 fails its first op; rank 0 queued three collectives that all need rank 1.
    let plan = FaultPlan::new().fail_op(1, 0, ResultCode::INTERNAL_ERROR);
    let comms = World::builder(2).faults(plan).build().unwrap();
    let s = stream();
    let mut b = Buf::from_bytes(&f32s(&[1.0]));
    assert!(all_reduce(&comms[1], &s, &mut b).is_err());
    let start = Instant::now();
    for _ in 0..3 {
        // Queued while rank 1's failure has not reached rank 0 yet, refused at once after
        // (which of the two depends on the threads' timing): never a hang.
        match all_reduce(&comms[0], &s, &mut b) {
            Ok(_)
            | Err(Error::InvalidState {
                state: CommState::Failed,
                ..
            }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    s.synchronize().unwrap();
    assert!(matches!(comms[0].poll(), Err(Error::Remote { .. })));
    drop(s);
    drop(comms);
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_nonblocking_split_past_its_time_limit_is_aborted_with_a_timeout() {
    // Rank 1 never calls split: rank 0's nonblocking child can never bind.
    let comms = World::builder(2)
        .init_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let nb = oxccl_core::CommConfig::new().blocking(false);
    let child = comms[0].split(Some(0), 0, &nb).unwrap().unwrap();
    assert_eq!(child.state(), CommState::Initializing);
    let s = stream();
    let mut b = Buf::from_bytes(&f32s(&[1.0]));
    let e = all_reduce(&child, &s, &mut b).unwrap_err();
    assert!(
        matches!(e, Error::Timeout { after_ms, .. } if after_ms >= 50),
        "{e:?}"
    );
    assert_eq!(child.state(), CommState::Aborted);
    assert!(child.reason().contains("timed out"), "{}", child.reason());
    // The parent is untouched.
    assert_eq!(comms[0].state(), CommState::Ready);
}

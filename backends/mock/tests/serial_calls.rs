//! Calls on one communicator never overlap: threads sharing a `&MockComm` take turns on its
//! call lock (as on the NCCL backend), while abort and poll never wait for it.

mod common;

use common::*;
use oxccl_core::{CommAbort, CommState, Communicator, DataType, Progress, ReduceOp};
use oxccl_mock::{FaultPlan, World};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const DT: DataType = DataType::Int64;

/// Spins until `f` holds (bounded, so a broken rule fails instead of hanging).
fn until(mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "condition never held"
        );
        std::thread::yield_now();
    }
}

#[test]
fn a_call_waits_for_the_call_in_progress_on_another_thread() {
    // Rank 0 initializes for many polls: an issue waits that out inside its call.
    let plan = FaultPlan::new().init_in_progress(0, 5_000);
    let comms = World::builder(1).faults(plan).build().unwrap();
    let c = &comms[0];
    let handle = c.abort_handle();
    let reg = Buf::filled(64, 0);
    let issued = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let st = stream();
            let mut b = Buf::from_bytes(&1i64.to_ne_bytes());
            // SAFETY: `b` outlives the synchronize below.
            unsafe { all_reduce_in_place(c, &st, &mut b, DT, ReduceOp::Sum) }.unwrap();
            issued.store(true, Ordering::Release);
            oxccl_core::Stream::synchronize(&st).unwrap();
        });
        // The issue is inside its call, the communicator still initializing.
        until(|| c.calls_in_flight() == 1);
        assert_eq!(c.state(), CommState::Initializing);
        // Abort-handle calls never take the call lock: state answers at once.
        assert_eq!(handle.state(), CommState::Initializing);
        // Had register run beside the issue, it would have seen `Initializing` and been
        // refused; it waits for the issue instead, which leaves the communicator ready.
        let h = c.register(reg.addr(), 64).unwrap();
        // The issue left its call before register entered (the flag is set just after the
        // issue returns, so it may trail register by a moment: wait for it, never assume).
        assert_eq!(c.state(), CommState::Ready);
        until(|| issued.load(Ordering::Acquire));
        c.deregister(h).unwrap();
    });
    assert!(c.calls_that_waited() >= 1);
    assert_eq!(c.max_calls_in_flight(), 1);
}

#[test]
fn many_threads_on_one_communicator_never_overlap() {
    let comms = World::new(1).unwrap();
    let c = &comms[0];
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                let st = stream();
                let reg = Buf::filled(64, 0);
                for i in 0..200 {
                    let mut b = Buf::from_bytes(&(t as i64 + i).to_ne_bytes());
                    // SAFETY: `b` outlives the synchronize below.
                    unsafe { all_reduce_in_place(c, &st, &mut b, DT, ReduceOp::Max) }.unwrap();
                    oxccl_core::Stream::synchronize(&st).unwrap();
                    let h = c.register(reg.addr(), 64).unwrap_or_else(|e| panic!("{e}"));
                    c.deregister(h).unwrap();
                    assert!(c.poll().is_ok());
                }
            });
        }
    });
    assert_eq!(c.max_calls_in_flight(), 1);
    assert_eq!(c.calls_in_flight(), 0);
    assert_eq!(c.poll(), Ok(Progress::Done));
}

#[test]
fn abort_does_not_wait_for_a_call_in_progress() {
    // Rank 0 never finishes initializing: the issue waits inside its call until aborted.
    let plan = FaultPlan::new().init_in_progress(0, u32::MAX);
    let comms = World::builder(1).faults(plan).build().unwrap();
    let c = &comms[0];
    let handle = c.abort_handle();
    std::thread::scope(|s| {
        let issuing = s.spawn(|| {
            let st = stream();
            let mut b = Buf::from_bytes(&1i64.to_ne_bytes());
            // SAFETY: the op is refused or never runs: the communicator is aborted first.
            unsafe { all_reduce_in_place(c, &st, &mut b, DT, ReduceOp::Sum) }
        });
        until(|| c.calls_in_flight() == 1);
        // From the abort handle, while the issue holds the call lock.
        handle.abort("stop");
        assert_eq!(handle.state(), CommState::Aborted);
        assert!(handle.poll().is_err());
        assert!(issuing.join().unwrap().is_err());
    });
    assert_eq!(c.max_calls_in_flight(), 1);
}

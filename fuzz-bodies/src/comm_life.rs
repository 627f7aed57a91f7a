//! A mock world (1–3 ranks, blocking or nonblocking, with a fault plan: failed ops, hangs, lost
//! ranks, delays, inits that stay in progress or time out) driven by arbitrary events: issue,
//! poll (here or from another thread), abort (here or from another thread, once or twice),
//! finalize, destroy, split of every rank (of a failed parent too), polling everything.
//! After each event the world is settled (everything that can finish has, every wait bounded:
//! a hang is a finding) and each rank is compared with the model (`comm_life_model`): state,
//! reason (the first cause never lost), operations counted, what every call returned (no
//! operation accepted on a dead communicator, abort idempotent), results of the collectives
//! that succeeded.

use super::comm_life_model::{assert_refused, AsyncErr, Cause, Life, Model};
use super::comm_life_world::{all_reduce_bufs, all_reduce_op, all_reduce_sum, Slot, BOUND, LEN};
use arbitrary::{Result, Unstructured};
use oxccl_core::{CommAbort, CommState, Communicator, Error, Progress, ResultCode};
use oxccl_mock::{FaultKind, FaultPlan, MockComm, MockStream, World};
use std::mem::ManuallyDrop;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a nonblocking init may take before the first op aborts it.
const INIT_LIMIT: Duration = Duration::from_millis(250);
/// Init polls that outlast [`INIT_LIMIT`]: the init times out.
const HUGE: u32 = u32::MAX;
/// Abort reasons (never empty: an empty reason reads as "none yet").
const REASONS: [&str; 3] = ["watchdog: collective timed out", "user", "peer lost"];
/// The buffers of every collective issued, kept until the world is gone (streams read them).
type Bufs = Vec<(Box<[f32; LEN]>, Box<[f32; LEN]>)>;

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let _ = run(&mut Unstructured::new(data));
}

/// Runs `f` on its own thread and returns its result, or fails the input as a hang after
/// [`BOUND`] (the thread is left behind).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(BOUND) {
        Ok(v) => v,
        Err(_) => panic!("hang: {what} did not return within {BOUND:?}"),
    }
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let n = u.int_in_range(1..=3u32)?;
    let nonblocking = if u.ratio(1, 3)? {
        Some(u.int_in_range(0..=2u32)?)
    } else {
        None
    };
    let mut plan = FaultPlan::new();
    let mut faults: Vec<(u32, u64, FaultKind)> = Vec::new();
    for _ in 0..u.int_in_range(0..=3u8)? {
        let rank = u.int_in_range(0..=n - 1)?;
        let op = u.int_in_range(0..=5u64)?;
        let kind = match u.int_in_range(0..=3u8)? {
            0 => {
                let codes = [1, 2, 3, 4, 5, 6, 8];
                FaultKind::Fail(ResultCode(*u.choose(&codes)?))
            }
            1 => FaultKind::Hang,
            2 => FaultKind::Lose,
            _ => FaultKind::Delay(Duration::from_micros(500)),
        };
        plan = match kind {
            FaultKind::Fail(c) => plan.fail_op(rank, op, c),
            FaultKind::Hang => plan.hang_op(rank, op),
            FaultKind::Lose => plan.lose_rank(rank, op),
            FaultKind::Delay(d) => plan.delay_op(rank, op, d),
        };
        faults.push((rank, op, kind));
    }
    // One rank's init may stay in progress for a few polls, or past the limit.
    let mut init: Vec<Option<u32>> = vec![nonblocking; n as usize];
    if u.ratio(1, 4)? {
        let rank = u.int_in_range(0..=n - 1)?;
        let polls = *u.choose(&[0, 1, 2, HUGE])?;
        plan = plan.init_in_progress(rank, polls);
        init[rank as usize] = Some(polls);
    }
    let mut b = World::builder(n).faults(plan).init_timeout(INIT_LIMIT);
    if let Some(p) = nonblocking {
        b = b.nonblocking(p);
    }
    let comms = b.build().expect("a valid world");
    let mut w: Vec<Slot> = comms
        .into_iter()
        .map(|c| Slot {
            abort: c.abort_handle(),
            stream: MockStream::new().expect("a stream"),
            comm: Some(c),
        })
        .collect();
    let mut m = Model::new(&init, nonblocking);
    // Leaked if the input fails: a stream may still be using them then.
    let mut bufs = ManuallyDrop::new(Bufs::new());
    let planned = |r: usize, op: u64| {
        faults
            .iter()
            .find(|f| f.0 as usize == r && f.1 == op)
            .map(|f| f.2)
    };
    let result = (|| -> Result<()> {
        for _ in 0..24 {
            if u.is_empty() {
                break;
            }
            let r = u.int_in_range(0..=n - 1)? as usize;
            match u.int_in_range(0..=7u8)? {
                0 | 1 => {
                    let abort_meanwhile = u.arbitrary()?;
                    issue(&mut w, &mut m, &mut bufs, r, planned, abort_meanwhile)
                }
                2 => {
                    let thread = u.arbitrary()?;
                    poll(&w, &mut m, r, thread);
                }
                3 => {
                    let why = *u.choose(&REASONS)?;
                    let (thread, twice) = (u.arbitrary()?, u.arbitrary()?);
                    abort(&w, &mut m, r, why, thread);
                    if twice {
                        // Idempotent: a second abort changes nothing (the model agrees).
                        abort(&w, &mut m, r, "again", !thread);
                    }
                }
                4 => finalize(&mut w, &mut m, r),
                5 => destroy(&mut w, &mut m, r),
                6 => super::comm_life_split::split(&mut w, &mut m),
                _ => {
                    for r in 0..w.len() {
                        for _ in 0..4 {
                            poll(&w, &mut m, r, false);
                            // A poll that ends a finalize kills the rank: its peers' waiting
                            // collectives fail now, before the next poll looks at them.
                            settle(&w, &mut m, &bufs, n);
                        }
                    }
                }
            }
            settle(&w, &mut m, &bufs, n);
        }
        Ok(())
    })();
    teardown(w);
    // Every stream has drained and is gone: nothing uses the buffers any more.
    drop(ManuallyDrop::into_inner(bufs));
    result
}

/// Init polls this large outlast the init limit (polls may have spent a few).
fn huge(p: u32) -> bool {
    p >= HUGE - 1000
}

fn issue(
    w: &mut [Slot],
    m: &mut Model,
    bufs: &mut Bufs,
    r: usize,
    planned: impl Fn(usize, u64) -> Option<FaultKind>,
    abort_meanwhile: bool,
) {
    let Some(comm) = w[r].comm.as_ref() else {
        return;
    };
    let id = bufs.len();
    bufs.push(all_reduce_bufs(r));
    let op = all_reduce_op(&mut bufs[id]);
    // An op waiting for an init that outlasts its limit, aborted meanwhile from another thread.
    let why = "abort during init";
    let aborter = match m.ranks[r].life {
        Life::Init(p) if huge(p) && abort_meanwhile => {
            let h = w[r].abort.clone();
            Some(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                h.abort(why);
            }))
        }
        _ => None,
    };
    // SAFETY: the buffers stay in `bufs` until every stream has drained and is gone.
    let got = unsafe { comm.issue(&op, &w[r].stream) };
    if let Some(t) = aborter {
        let _ = t.join();
        // The abort ends the wait; only if its thread ran after the limit (a machine stalled
        // for that long) did the init time out first, and the later abort changed nothing.
        if matches!(got, Err(Error::Timeout { .. })) {
            return m.abort(r, Cause::Has("nonblocking init timed out"));
        }
        let named = matches!(&got, Err(Error::Aborted { reason }) if reason.as_str() == why);
        assert!(
            named,
            "issue waiting for an init, aborted meanwhile: {got:?}"
        );
        return m.abort(r, Cause::Exact(why.into()));
    }
    if let Life::Init(p) = m.ranks[r].life {
        if huge(p) {
            // The op waits for the init, past the limit: the rank is aborted, saying why.
            assert!(
                matches!(got, Err(Error::Timeout { .. })),
                "issue on an init that outlasts its limit: {got:?}"
            );
            m.abort(r, Cause::Has("nonblocking init timed out"));
            return;
        }
        // The op polled the init to its end.
        m.ranks[r].life = Life::Ready;
    }
    let rk = &m.ranks[r];
    if rk.life != Life::Ready {
        let e = got.expect_err("an op accepted on a communicator that is not ready");
        assert_refused(&e, rk, "issue");
        return;
    }
    let index = rk.ops;
    m.ranks[r].ops += 1;
    match planned(r, index) {
        Some(FaultKind::Fail(code)) => {
            assert!(
                got.as_ref().err().and_then(Error::code) == Some(code),
                "op {index} of rank {r} is planned to fail with {code}: {got:?}"
            );
            m.fail(r, AsyncErr::Backend(code), "failed by the fault plan");
        }
        fault => {
            if let Err(e) = got {
                panic!("op {index} of ready rank {r} refused: {e:?}");
            }
            m.queue(r, fault, id);
        }
    }
}

/// `got` is the sticky error `e`.
fn assert_async(got: &oxccl_core::Result<Progress>, e: AsyncErr, what: &str) {
    let ok = match (got, e) {
        (Err(Error::Backend { code, .. }), AsyncErr::Backend(c)) => *code == c,
        (Err(Error::Remote { .. }), AsyncErr::Remote) => true,
        _ => false,
    };
    assert!(ok, "{what}: {got:?}, the first error was {e:?}");
}

fn poll(w: &[Slot], m: &mut Model, r: usize, thread: bool) {
    let h = w[r].abort.clone();
    let got = match (&w[r].comm, thread) {
        (Some(c), false) => c.poll(),
        _ => bounded("poll from another thread", move || h.poll()),
    };
    let blocked = m.blocked(r);
    let rk = &mut m.ranks[r];
    let what = format!("poll of rank {r} ({:?})", rk.life);
    if let Some(e) = rk.error {
        return assert_async(&got, e, &what);
    }
    let expect = match rk.life {
        Life::Aborted => {
            assert!(
                matches!(&got, Err(Error::Aborted { reason }) if rk.cause.admits(reason)),
                "{what}: {got:?}, cause {:?}",
                rk.cause
            );
            return;
        }
        Life::Init(p) if p > 0 => {
            rk.life = Life::Init(p - 1);
            Progress::InProgress
        }
        Life::Init(_) => {
            rk.life = Life::Ready;
            Progress::Done
        }
        Life::Ready | Life::Finalizing if rk.op_polls > 0 => {
            rk.op_polls -= 1;
            Progress::InProgress
        }
        // A nonblocking finalize ends once its work has drained.
        Life::Finalizing if blocked => Progress::InProgress,
        Life::Finalizing => {
            m.finalized(r);
            Progress::Done
        }
        _ => Progress::Done,
    };
    assert!(
        matches!(&got, Ok(p) if *p == expect),
        "{what}: {got:?}, expected {expect:?}"
    );
}

fn abort(w: &[Slot], m: &mut Model, r: usize, why: &str, thread: bool) {
    if thread {
        let (h, why) = (w[r].abort.clone(), why.to_string());
        bounded("abort from another thread", move || h.abort(&why));
    } else {
        match &w[r].comm {
            Some(c) => c.abort(why),
            None => w[r].abort.abort(why),
        }
    }
    m.abort(r, Cause::Exact(why.into()));
}

/// Runs `f` with `comm` on another thread; once it started, aborts the rank from this one with
/// `why` (what ends `f`'s wait); returns the communicator (when `f` gives it back) and result.
fn with_abort<T: Send + 'static>(
    slot: &Slot,
    comm: MockComm,
    why: &str,
    f: impl FnOnce(MockComm) -> T + Send + 'static,
) -> T {
    let (started, go) = mpsc::channel();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = started.send(());
        let _ = tx.send(f(comm));
    });
    let _ = go.recv_timeout(BOUND);
    std::thread::sleep(Duration::from_millis(1));
    slot.abort.abort(why);
    match rx.recv_timeout(BOUND) {
        Ok(v) => v,
        Err(_) => panic!("hang: a call still waits {BOUND:?} after an abort from another thread"),
    }
}

fn finalize(w: &mut [Slot], m: &mut Model, r: usize) {
    let Some(comm) = w[r].comm.take() else {
        return;
    };
    let rk = m.ranks[r].clone();
    if rk.life != Life::Ready {
        let got = comm.finalize();
        w[r].comm = Some(comm);
        return assert_refused(&got.expect_err("finalize accepted"), &rk, "finalize");
    }
    m.ranks[r].life = Life::Finalizing;
    if let Some(polls) = m.nonblocking {
        let got = comm.finalize();
        w[r].comm = Some(comm);
        assert!(
            matches!(got, Ok(Progress::InProgress)),
            "nonblocking finalize: {got:?}"
        );
        m.ranks[r].op_polls = polls;
        return;
    }
    if !m.blocked(r) {
        let got = comm.finalize();
        w[r].comm = Some(comm);
        assert!(matches!(got, Ok(Progress::Done)), "finalize: {got:?}");
        return m.finalized(r);
    }
    // Its work waits for peers that will not come: only an abort from another thread ends it.
    let why = "abort during finalize";
    let (comm, got) = with_abort(&w[r], comm, why, |c| {
        let got = c.finalize();
        (c, got)
    });
    w[r].comm = Some(comm);
    let named = match &got {
        Err(Error::Aborted { reason }) => reason.as_str() == why,
        Err(Error::InvalidState { state, reason, .. }) => {
            *state == CommState::Aborted && reason.as_str() == why
        }
        _ => false,
    };
    assert!(named, "finalize ended by an abort: {got:?}");
    m.abort(r, Cause::Exact(why.into()));
}

fn destroy(w: &mut [Slot], m: &mut Model, r: usize) {
    let Some(comm) = w[r].comm.take() else {
        return;
    };
    if m.ranks[r].life.alive() && m.blocked(r) {
        // Dropping waits for its work, which waits for peers: an abort from another thread
        // ends the wait.
        let why = "abort during destroy";
        with_abort(&w[r], comm, why, drop);
        m.abort(r, Cause::Exact(why.into()));
    } else {
        drop(comm);
    }
    m.destroy(r);
}

/// Waits for what the model says finishes, checks what it says does not, then every rank.
fn settle(w: &[Slot], m: &mut Model, bufs: &Bufs, n: u32) {
    m.settle();
    let start = Instant::now();
    for (r, s) in w.iter().enumerate() {
        while !m.blocked(r) && !s.stream.query() {
            assert!(
                start.elapsed() < BOUND,
                "hang: rank {r}'s stream never drains"
            );
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    for (r, s) in w.iter().enumerate() {
        assert!(
            !m.blocked(r) || !s.stream.query(),
            "rank {r}: work the model holds blocked has finished ({:?})",
            m.ranks[r]
        );
    }
    let want = all_reduce_sum(n as usize);
    for id in m.succeeded.drain(..) {
        assert_eq!(*bufs[id].1, want, "all-reduce {id}");
    }
    for (r, s) in w.iter().enumerate() {
        let rk = &m.ranks[r];
        assert_eq!(s.abort.state(), rk.life.state(), "rank {r}: {rk:?}");
        if let Some(c) = &s.comm {
            let reason = c.reason();
            assert!(
                rk.cause.admits(&reason),
                "rank {r}: reason `{reason}`, model {rk:?}"
            );
            assert_eq!(c.ops_issued(), rk.ops, "rank {r}: ops issued");
        }
    }
}

/// Aborts every rank, then waits (bounded) until every stream has drained, then drops all.
fn teardown(w: Vec<Slot>) {
    for s in &w {
        s.abort.abort("teardown");
    }
    let start = Instant::now();
    for s in &w {
        while !s.stream.query() {
            assert!(
                start.elapsed() < BOUND,
                "hang: a stream still busy after every abort"
            );
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    drop(w);
}

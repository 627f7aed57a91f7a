//! Graph-capture cases of the process group, written once over the backend: each runs on one
//! rank and checks that rank's outcome. `tests/pg_capture.rs` runs them on the mock world
//! (ranks as threads); `examples/pg_capture.rs` runs them on NCCL (one GPU per rank; one rank
//! is enough) and on the mock when there is no GPU.
#![allow(dead_code)]

use oxccl::core::CaptureError;
use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, RegMode, TuneTable};
use oxccl::{CommState, Device, Error, Feature, HostScalar, ReduceOp, Scalar};
use std::sync::Arc;
use std::time::Duration;

#[macro_use]
#[path = "../case_kit/mod.rs"]
mod case_kit;
// `run` and `run_on` are for the mock suites; the GPU runners (examples) do not use it.
#[allow(unused_imports)]
pub use case_kit::{run, run_on, Body, Case, MakeGroup, Verdict};

/// The kind of a capture error, or the whole error when it is not one.
fn capture_kind<T: std::fmt::Debug>(r: oxccl::Result<T>) -> Result<CaptureError, String> {
    match r {
        Err(Error::Capture { kind, .. }) => Ok(kind),
        other => Err(format!("expected Error::Capture, got {other:?}")),
    }
}

/// A group with the device bound (made at once), a timeout that ends a broken case quickly.
pub fn opts(rank: u32) -> PgOptions {
    PgOptions {
        timeout: Duration::from_secs(60),
        bound_device: Some(Device(rank)),
        device: Device(rank),
        error_handling: oxccl::rules::env::ErrorHandling::CleanUpOnly,
        ..PgOptions::default()
    }
}

/// Every case, in order.
pub fn all<B: PgBackend>() -> Vec<Case<B>> {
    vec![
        ("values_after_launches", values_after_launches::<B>),
        ("premul_sum_doubles_per_launch", premul_doubles::<B>),
        ("coalesced_block_in_a_capture", coalesced::<B>),
        ("mixed_dtypes_bound_one_by_one", mixed_dtypes::<B>),
        ("refusals", refusals::<B>),
        ("graph_dropped_before_and_after_launch", dropped::<B>),
        ("lazy_communicator_made_before_capture", lazy_comm::<B>),
        ("launch_on_aborted_or_destroyed_group", dead_group::<B>),
        ("launch_work_timed_and_watched", timed::<B>),
        ("comm_buffers_in_their_mode", comm_buffers::<B>),
    ]
}

/// Three all-reduces (sum) captured on one buffer: nothing runs at capture; each of 4 launches
/// applies the three again, so the buffer holds S·n^11 (S the sum of the ranks' 1..=n) after
/// them. The works of the capture are captured; the launches' works complete.
pub fn values_after_launches<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(opts(rank)));
    let n = pg.size();
    let mut buf = ok!(pg.upload(&vec![(rank + 1) as f32; 1000]));
    let seq0 = pg.seq();
    let mut captured = Vec::new();
    let graph = ok!(pg.capture(|pg| {
        for _ in 0..3 {
            captured.push(pg.all_reduce(&mut buf, ReduceOp::Sum)?);
        }
        Ok(())
    }));
    ensure!(!pg.is_capturing(), "capture over");
    ensure!(graph.ops() == 3, "3 ops captured, got {}", graph.ops());
    ensure!(graph.buffers() == 1, "one buffer, got {}", graph.buffers());
    ensure!(pg.seq() == seq0 + 3, "captured ops take sequence numbers");
    for w in &captured {
        ensure!(w.is_captured(), "captured work");
        ensure!(
            w.is_completed() && !w.is_success(),
            "final at once, not successful"
        );
        let kind = capture_kind(w.wait())?;
        ensure!(kind == CaptureError::Forbidden, "wait: {kind:?}");
        ensure!(matches!(w.error(), Some(Error::Capture { .. })), "error()");
    }
    ensure!(
        ok!(pg.download(&buf)) == vec![(rank + 1) as f32; 1000],
        "nothing ran at capture"
    );
    let s = (n * (n + 1) / 2) as f32;
    for l in 1..=4u32 {
        let w = ok!(graph.replay(&mut [&mut buf]));
        ensure!(!w.is_captured(), "a launch's work is a normal one");
        ok!(w.wait());
        ensure!(w.is_success(), "launch {l} succeeded");
        let want = s * (n as f32).powi((3 * l - 1) as i32);
        let got = ok!(pg.download(&buf));
        ensure!(
            got.iter().all(|&x| x == want),
            "after launch {l}: want {want}, got {:?}",
            &got[..3]
        );
    }
    ensure!(
        pg.seq() == seq0 + 3 + 4,
        "each launch takes a sequence number"
    );
    // The group issues normally again.
    ok!(ok!(pg.all_reduce(&mut buf, ReduceOp::Sum)).wait());
    let want = s * (n as f32).powi(12);
    ensure!(
        ok!(pg.download(&buf))[0] == want,
        "plain op after the graph"
    );
    Ok(())
}

/// Premul-sum by 2 (host scalar) is the one reduction that changes a single rank's data: each
/// launch multiplies by 2n, so five launches give (2n)^5.
pub fn premul_doubles<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(opts(rank)));
    let n = pg.size() as f32;
    let mut buf = ok!(pg.upload(&[1.0f32; 16]));
    let two = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(2.0)));
    let graph = ok!(pg.capture(|pg| pg.all_reduce(&mut buf, two).map(drop)));
    for l in 1..=5 {
        ok!(ok!(graph.replay(&mut [&mut buf])).wait());
        let want = (2.0 * n).powi(l);
        ensure!(
            ok!(pg.download(&buf)) == vec![want; 16],
            "after launch {l}: want {want}"
        );
    }
    Ok(())
}

/// A coalescing block inside a capture: its work is captured; a launch given both buffers
/// runs the block.
pub fn coalesced<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(opts(rank)));
    let n = pg.size() as f32;
    let mut a = ok!(pg.upload(&[1.0f32; 8]));
    let mut b = ok!(pg.upload(&[2.0f32; 4]));
    let mut block = None;
    let graph = ok!(pg.capture(|pg| {
        block = Some(pg.coalesced(|c| {
            c.all_reduce(&mut a, ReduceOp::Sum)?;
            c.all_reduce(&mut b, ReduceOp::Sum)
        })?);
        Ok(())
    }));
    let block = block.ok_or("no block work")?;
    ensure!(block.is_captured(), "the block's work is captured");
    ensure!(graph.ops() == 2 && graph.buffers() == 2, "{graph:?}");
    for l in 1..=3 {
        ok!(ok!(graph.replay(&mut [&mut b, &mut a])).wait());
        let f = n.powi(l);
        ensure!(ok!(pg.download(&a)) == vec![f; 8], "a after launch {l}");
        ensure!(
            ok!(pg.download(&b)) == vec![2.0 * f; 4],
            "b after launch {l}"
        );
    }
    Ok(())
}

/// Buffers of two element types, bound one by one; all-gather and broadcast captured.
pub fn mixed_dtypes<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(opts(rank)));
    let n = pg.size() as usize;
    let send = ok!(pg.upload(&[rank as i32 + 10; 3]));
    let mut recv = ok!(pg.alloc_zeros::<i32>(3 * n));
    let mut f = ok!(pg.upload(&[rank as f64; 5]));
    let graph = ok!(pg.capture(|pg| {
        pg.all_gather(&send, &mut recv)?;
        pg.broadcast(&mut f, 0)?;
        Ok(())
    }));
    ensure!(
        graph.buffers() == 3,
        "three buffers, got {}",
        graph.buffers()
    );
    // All three are needed: two are refused, naming the argument.
    let mut send_b = send;
    let short = graph.bind(&mut send_b).buf(&mut recv).replay();
    ensure!(
        capture_kind(short)? == CaptureError::Mismatch,
        "a launch missing a buffer"
    );
    let w = ok!(graph.bind(&mut send_b).buf(&mut recv).buf(&mut f).replay());
    ok!(w.wait());
    let want: Vec<i32> = (0..n).flat_map(|r| [r as i32 + 10; 3]).collect();
    ensure!(ok!(pg.download(&recv)) == want, "all-gather after a launch");
    ensure!(ok!(pg.download(&f)) == vec![0.0; 5], "broadcast from 0");
    Ok(())
}

/// What a capture refuses, each with its exact variant, and the group usable after each.
pub fn refusals<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(opts(rank)));
    let mut buf = ok!(pg.upload(&[1.0f32; 4]));
    // A barrier inside: Unsupported, and the capture returns it (no graph).
    let r = pg.capture(|pg| pg.barrier().map(drop));
    ensure!(capture_kind(r)? == CaptureError::Unsupported, "barrier");
    ensure!(!pg.is_capturing(), "the failed capture ended");
    // A nested capture.
    let mut inner = None;
    let r = pg.capture(|pg| {
        inner = Some(capture_kind(pg.capture(|_| Ok(()))));
        Ok(())
    });
    ok!(r);
    ensure!(
        inner == Some(Ok(CaptureError::AlreadyCapturing)),
        "nested: {inner:?}"
    );
    // A launch inside a capture, and a launch with a buffer that is not the captured one.
    let graph = ok!(pg.capture(|pg| pg.all_reduce(&mut buf, ReduceOp::Sum).map(drop)));
    let mut other = ok!(pg.upload(&[1.0f32; 4]));
    let mut inside = None;
    ok!(pg.capture(|_| {
        inside = Some(capture_kind(graph.replay(&mut [&mut buf])));
        Ok(())
    }));
    ensure!(inside == Some(Ok(CaptureError::Forbidden)), "{inside:?}");
    ensure!(
        capture_kind(graph.replay(&mut [&mut other]))? == CaptureError::Mismatch,
        "another buffer of the same size"
    );
    // A launch while a coalescing block is open: its operations would run before the
    // block's, which were issued first.
    let block = ok!(pg.start_coalescing());
    let r = graph.replay(&mut [&mut buf]);
    ensure!(
        matches!(
            &r,
            Err(Error::InvalidState {
                attempted: "launch a graph",
                reason,
                ..
            }) if reason.contains("coalescing block is open")
        ),
        "a launch inside a coalescing block: {r:?}"
    );
    ok!(ok!(block.end()).wait());
    let mut longer = ok!(pg.upload(&[1.0f32; 5]));
    ensure!(
        capture_kind(graph.replay(&mut [&mut buf, &mut longer]))? == CaptureError::Mismatch,
        "one buffer too many"
    );
    // An error of the closure is returned as it is, and the group works after it.
    let r = pg.capture(|_| {
        Err(Error::invalid(
            "case",
            format_args!("the closure's own error"),
        ))
    });
    ensure!(
        matches!(r, Err(Error::InvalidArgument { arg: "case", .. })),
        "{r:?}"
    );
    ok!(ok!(pg.all_reduce(&mut buf, ReduceOp::Sum)).wait());
    let n = pg.size() as f32;
    ensure!(
        ok!(pg.download(&buf)) == vec![n; 4],
        "group usable after refusals"
    );
    // The NaN check synchronizes the host: a group with it on refuses to capture.
    let nan = ok!(mk(PgOptions {
        nan_check: true,
        ..opts(rank)
    }));
    let r = nan.capture(|_| Ok(()));
    ensure!(capture_kind(r)? == CaptureError::Unsupported, "nan check");
    Ok(())
}

/// A graph dropped before any launch changes nothing; one dropped right after a launch (not
/// waited) still lets the launch run to the end.
pub fn dropped<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(opts(rank)));
    let n = pg.size() as f32;
    let mut buf = ok!(pg.upload(&[1.0f32; 64]));
    let g = ok!(pg.capture(|pg| pg.all_reduce(&mut buf, ReduceOp::Sum).map(drop)));
    drop(g);
    ensure!(
        ok!(pg.download(&buf)) == vec![1.0; 64],
        "dropped unlaunched"
    );
    let g = ok!(pg.capture(|pg| pg.all_reduce(&mut buf, ReduceOp::Sum).map(drop)));
    let w = ok!(g.replay(&mut [&mut buf]));
    drop(g);
    ok!(w.wait());
    ensure!(ok!(pg.download(&buf)) == vec![n; 64], "the launch ran");
    Ok(())
}

/// A lazy group (no bound device) makes its communicator before the capture begins (its
/// creation is collective and cannot be captured).
pub fn lazy_comm<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(PgOptions {
        bound_device: None,
        ..opts(rank)
    }));
    ensure!(pg.comm_state().is_none(), "lazy: no communicator yet");
    let mut buf = ok!(pg.upload(&[3u8; 7]));
    let g = ok!(pg.capture(|pg| pg.all_reduce(&mut buf, ReduceOp::Max).map(drop)));
    ensure!(
        pg.comm_state() == Some(CommState::Ready),
        "made before the capture"
    );
    ok!(ok!(g.replay(&mut [&mut buf])).wait());
    ensure!(
        ok!(pg.download(&buf)) == vec![3u8; 7],
        "max of equal values"
    );
    // Another lazy group first used inside the capture: its communicator cannot be made there.
    let other = ok!(mk(PgOptions {
        bound_device: None,
        ..opts(rank)
    }));
    let mut b2 = ok!(other.upload(&[1u8; 3]));
    let r = pg.capture(|_| other.all_reduce(&mut b2, ReduceOp::Sum).map(drop));
    ensure!(
        capture_kind(r)? == CaptureError::Unsupported,
        "a communicator made inside a capture"
    );
    ensure!(other.comm_state().is_none(), "not made");
    // Used outside, it is made and works.
    ok!(ok!(other.all_reduce(&mut b2, ReduceOp::Sum)).wait());
    let n = pg.size() as u8;
    ensure!(
        ok!(other.download(&b2)) == vec![n; 3],
        "made outside the capture"
    );
    Ok(())
}

/// A graph of an aborted group, or of a destroyed one, refuses to launch (InvalidState).
pub fn dead_group<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(opts(rank)));
    let mut buf = ok!(pg.upload(&[1.0f32; 2]));
    let g = ok!(pg.capture(|pg| pg.all_reduce(&mut buf, ReduceOp::Sum).map(drop)));
    pg.abort("case: aborted on purpose");
    let r = g.replay(&mut [&mut buf]);
    ensure!(
        matches!(
            r,
            Err(Error::InvalidState {
                state: CommState::Aborted,
                attempted: "launch a graph",
                ..
            })
        ),
        "aborted: {r:?}"
    );
    let pg2 = ok!(mk(opts(rank)));
    let mut b2 = ok!(pg2.upload(&[1.0f32; 2]));
    let g2 = ok!(pg2.capture(|pg| pg.all_reduce(&mut b2, ReduceOp::Sum).map(drop)));
    pg2.destroy();
    let r = g2.replay(&mut [&mut b2]);
    ensure!(
        matches!(
            r,
            Err(Error::InvalidState {
                state: CommState::Destroyed,
                ..
            })
        ),
        "destroyed: {r:?}"
    );
    Ok(())
}

/// With timing on, a launch's work has a duration (its start and end events surround the
/// graph); the captured works have none. The flight recorder holds each launch as one entry
/// ("graph:" and the captured ops), not the captured operations.
pub fn timed<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let recorder = oxccl::recorder::Recorder::new(64);
    let pg = ok!(mk(PgOptions {
        timing: true,
        // Entries are recorded at issue without the watchdog: the check below sees them.
        watchdog: false,
        recorder: Some(recorder.clone()),
        ..opts(rank)
    }));
    let mut buf = ok!(pg.upload(&[1u32; 256]));
    let mut captured = None;
    let g = ok!(pg.capture(|pg| {
        captured = Some(pg.all_reduce(&mut buf, ReduceOp::Sum)?);
        Ok(())
    }));
    let captured = captured.ok_or("no captured work")?;
    ensure!(
        captured.duration().is_err(),
        "a captured work has no duration"
    );
    let w = ok!(g.replay(&mut [&mut buf]));
    ok!(w.wait());
    ensure!(w.info().timing, "timed launch");
    let d = ok!(w.duration());
    ensure!(d < Duration::from_secs(60), "a duration: {d:?}");
    ensure!(
        w.seq() == captured.seq() + 1,
        "the launch takes the next sequence number"
    );
    let names: Vec<String> = recorder
        .lock()
        .entries()
        .map(|e| e.record.profiling_name.clone())
        .collect();
    ensure!(
        names == ["graph:nccl:all_reduce"],
        "one entry, the launch's: {names:?}"
    );
    Ok(())
}

/// Buffers of the library's allocator under a table putting everything in symmetric windows
/// (local registration where the library has no windows; skipped without its allocator):
/// refused inside a capture until in their mode, put there by `register_buffer` before it;
/// two launches of (all_reduce, all_reduce, all_gather) give S·n³ (S the sum of 1..=n) and make
/// no registration; once the graph and buffers are dropped, `release_windows` frees their
/// windows.
pub fn comm_buffers<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let base = ok!(mk(opts(rank)));
    let feats = *oxccl::core::Backend::features(base.backend());
    let mode = if feats.has(Feature::WindowRegistration) {
        RegMode::Window
    } else if feats.has(Feature::BufferRegistration) {
        RegMode::Registered
    } else {
        return Ok(());
    };
    let pg = ok!(base.new_group(
        base.ranks(),
        Some(PgOptions {
            tune: Some(Arc::new(TuneTable::uniform(mode))),
            ..opts(rank)
        })
    ));
    let n = pg.size();
    let want = (n * (n + 1) / 2) as f32 * (n as f32).powi(3);
    let mut a = ok!(pg.upload_comm(&[(rank + 1) as f32; 2]));
    let mut g = ok!(pg.alloc_comm::<f32>(2 * n as usize));
    let refused = capture_kind(pg.capture(|pg| pg.all_reduce(&mut a, ReduceOp::Sum).map(drop)));
    ensure!(
        refused == Ok(CaptureError::Unsupported),
        "a buffer not yet in its mode: {refused:?}"
    );
    ok!(pg.register_buffer(&a, mode));
    ok!(pg.register_buffer(&g, mode));
    let before = ok!(pg.tuned_stats());
    let in_mode = |st: oxccl::pg::TunedStats| match mode {
        RegMode::Window => st.windows,
        _ => st.registered,
    };
    ensure!(in_mode(before) == 2, "both in {}: {before:?}", mode.name());
    let graph = ok!(pg.capture(|pg| {
        pg.all_reduce(&mut a, ReduceOp::Sum)?;
        pg.all_reduce(&mut a, ReduceOp::Sum)?;
        pg.all_gather(&a, &mut g)?;
        Ok(())
    }));
    for _ in 0..2 {
        ok!(ok!(graph.bind(&mut a).buf(&mut g).replay()).wait());
    }
    ensure!(
        ok!(pg.download_any(&a)) == vec![want; 2],
        "all_reduce twice per launch"
    );
    ensure!(
        ok!(pg.download_any(&g)) == vec![want; 2 * n as usize],
        "all_gather after them"
    );
    let after = ok!(pg.tuned_stats());
    ensure!(
        (after.registered, after.windows) == (before.registered, before.windows),
        "the capture and launches registered nothing: {before:?} then {after:?}"
    );
    ensure!(
        after.ops[usize::from(mode.level())] == 3,
        "three ops captured in {}: {after:?}",
        mode.name()
    );
    drop((graph, a, g));
    let released = ok!(pg.release_windows());
    let expect = if mode == RegMode::Window { 2 } else { 0 };
    ensure!(released == expect, "{released} windows released");
    ensure!(ok!(pg.tuned_stats()).windows == 0, "no window left");
    Ok(())
}

//! Seed cases 13, 14, 27, 28 and 29: errors and timeouts that abort, completion hooks, the
//! flight recorder's ring and states.

use super::{lazy, MakeGroup, Verdict};
use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::recorder::Recorder;
use oxccl::rules::recorder::TraceState;
use oxccl::{DataType, Error, ReduceOp};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Waits until the watchdog has recorded every operation issued so far in its recorder.
fn settle() -> Verdict {
    ensure!(
        oxccl::watchdog::Watchdog::global().flush(Duration::from_secs(10)),
        "the watchdog made no pass in 10 s"
    );
    Ok(())
}

/// Polls `cond` for up to 10 s (the watchdog works on its own thread).
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(10) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Case 13: an unmatched all_reduce on rank 1 times out in its wait; the communicator is
/// aborted, and the next operation's error says so and why.
pub fn case_13<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let mut b = ok!(pg.upload(&[1.0f32; 16]));
    ok!(ok!(pg.all_reduce(&mut b, ReduceOp::Sum)).wait());
    if rank == 1 {
        let w = ok!(pg.all_reduce(&mut b, ReduceOp::Sum));
        let r = w.wait_timeout(Duration::from_millis(500));
        ensure!(
            matches!(&r, Err(Error::Timeout { what, .. }) if what.contains("SeqNum=2") && what.contains("Timeout(ms)=500")),
            "wait gave {r:?}"
        );
        // The wait's error aborted the communicator: the next op is refused as aborted, and
        // the reason names the operation that timed out.
        ensure!(
            pg.comm_state() == Some(oxccl::CommState::Aborted),
            "state {:?}",
            pg.comm_state()
        );
        let next = pg.all_reduce(&mut b, ReduceOp::Sum).and_then(|w| w.wait());
        ensure!(
            matches!(&next, Err(Error::Aborted { reason }) if reason.contains("timing out") && reason.contains("SeqNum=2")),
            "next op: {next:?}"
        );
        ensure!(
            next.as_ref().unwrap_err().to_string().contains("aborted"),
            "{next:?}"
        );
    } else {
        std::thread::sleep(Duration::from_millis(1500));
    }
    Ok(())
}

/// Case 14: an unmatched all_reduce waited with 100 ms errors, naming the timeout; so does an
/// unmatched barrier waited with 300 ms.
pub fn case_14<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    for barrier in [false, true] {
        let pg = ok!(mk(lazy(rank)));
        let mut b = ok!(pg.upload(&[1.0f32; 4]));
        ok!(ok!(pg.all_reduce(&mut b, ReduceOp::Sum)).wait());
        if rank == 0 {
            let (w, limit) = if barrier {
                (ok!(pg.barrier()), Duration::from_millis(300))
            } else {
                (
                    ok!(pg.all_reduce(&mut b, ReduceOp::Sum)),
                    Duration::from_millis(100),
                )
            };
            let began = Instant::now();
            let r = w.wait_timeout(limit);
            let text = r.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
            ensure!(
                matches!(r, Err(Error::Timeout { .. })) && text.contains("Timeout(ms)="),
                "barrier={barrier}: {r:?}"
            );
            ensure!(began.elapsed() < limit + Duration::from_secs(2), "too late");
        } else {
            std::thread::sleep(Duration::from_millis(800));
        }
    }
    Ok(())
}

fn timed(rank: u32) -> PgOptions {
    PgOptions {
        timing: true,
        ..lazy(rank)
    }
}

/// Case 27: with timing on, completion hooks see every operation with a duration: two
/// broadcasts (2 hooks), then three operations not waited for (3 more), the last seq 5… as
/// c10d counts per group: here the second group's last seq is 3.
pub fn case_27<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(timed(rank)));
    let n = pg.size() as f32;
    let seen = Arc::new(AtomicU64::new(0));
    let last_seq = Arc::new(AtomicU64::new(0));
    let positive = Arc::new(AtomicU64::new(0));
    let (s, l, p) = (seen.clone(), last_seq.clone(), positive.clone());
    ok!(pg.on_completion(Box::new(move |w| {
        s.fetch_add(1, Ordering::SeqCst);
        l.fetch_max(w.seq, Ordering::SeqCst);
        if w.duration > Duration::ZERO {
            p.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    })));
    let mut t = ok!(pg.upload(&[rank as f32; 6]));
    for _ in 0..2 {
        ok!(ok!(pg.broadcast(&mut t, 0)).wait());
    }
    ensure!(
        ok!(pg.download(&t)) == vec![0.0; 6],
        "broadcast from rank 0"
    );
    ensure!(eventually(|| seen.load(Ordering::SeqCst) == 2), "2 hooks");
    let mut a = ok!(pg.upload(&[n; 4]));
    let x = ok!(pg.upload(&[n]));
    let mut g = ok!(pg.alloc_zeros::<f32>(pg.size() as usize));
    let mut c = ok!(pg.upload(&[1.0f32]));
    let _w1 = ok!(pg.all_reduce(&mut a, ReduceOp::Sum));
    let _w2 = ok!(pg.all_gather(&x, &mut g));
    let _w3 = ok!(pg.all_reduce(&mut c, ReduceOp::Sum));
    ensure!(ok!(pg.download(&a)) == vec![n * n; 4], "all_reduce N²");
    ensure!(
        ok!(pg.download(&g)) == vec![n; pg.size() as usize],
        "all_gather N × [N]"
    );
    ensure!(ok!(pg.download(&c)) == vec![n], "the third op");
    ensure!(
        eventually(|| seen.load(Ordering::SeqCst) == 5),
        "5 hooks in all"
    );
    ensure!(
        last_seq.load(Ordering::SeqCst) == 5,
        "last seq {}",
        last_seq.load(Ordering::SeqCst)
    );
    ensure!(positive.load(Ordering::SeqCst) == 5, "durations > 0");
    // A failing hook is reported, not lost.
    ok!(pg.on_completion(Box::new(|w| Err(format!("refused seq {}", w.seq)))));
    ok!(ok!(pg.all_reduce(&mut c, ReduceOp::Sum)).wait());
    ensure!(
        eventually(|| pg.hook_errors().iter().any(|e| e.contains("refused seq 6"))),
        "{:?}",
        pg.hook_errors()
    );
    Ok(())
}

/// Case 28: a ring of 10 after 12 operations keeps 10, the last seq minus the first is 9, and
/// the drained last entry is retired and completed; after two all_reduces of 12 floats (a 3×4
/// tensor), the second's entry: record id 1, group 0 ("default_pg"), "nccl:all_reduce",
/// collective seq 2, input and output sizes [[12]] float32, timeout 600000 ms, completed (its
/// completion seen, and with timing its start before it), a duration only with timing.
pub fn case_28<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    for timing in [false, true] {
        let recorder = Recorder::new(10);
        let pg = ok!(mk(PgOptions {
            recorder: Some(recorder.clone()),
            timing,
            timeout: Duration::from_secs(600),
            ..lazy(rank)
        }));
        let mut b = ok!(pg.upload(&[rank as f32; 12]));
        let mut last = None;
        for _ in 0..2 {
            let w = ok!(pg.all_reduce(&mut b, ReduceOp::Sum));
            ok!(w.wait());
            last = Some(w);
        }
        ensure!(
            eventually(|| recorder.lock().get(1).is_some_and(|e| e.retired)),
            "retired"
        );
        {
            let r = recorder.lock();
            ensure!(r.len() == 2, "{} entries after two ops", r.len());
            let e = r.get(1).ok_or("entry 1")?;
            ensure!(e.id == 1, "record id {}", e.id);
            ensure!(e.record.pg_id == 0, "group {}", e.record.pg_id);
            ensure!(
                r.pg_configs()
                    .iter()
                    .any(|c| c.id == 0 && c.desc == "default_pg"),
                "{:?}",
                r.pg_configs()
            );
            ensure!(
                e.record.profiling_name == "nccl:all_reduce",
                "{}",
                e.record.profiling_name
            );
            ensure!(
                e.record.collective_seq == 2,
                "seq {}",
                e.record.collective_seq
            );
            for (what, t) in [("inputs", &e.record.inputs), ("outputs", &e.record.outputs)] {
                let got: Vec<_> = t.iter().map(|m| (m.sizes.clone(), m.dtype)).collect();
                ensure!(
                    got == vec![(vec![12], DataType::Float32)],
                    "{what}: {got:?}"
                );
            }
            ensure!(e.record.timeout_ms == 600_000, "timeout");
            ensure!(!e.record.is_p2p, "not p2p");
            ensure!(e.state == TraceState::Completed, "state {:?}", e.state);
            let done = e.time_discovered_completed_ns.ok_or("completion time")?;
            if timing {
                let began = e.time_discovered_started_ns.ok_or("start time")?;
                ensure!(began <= done, "started {began} after completed {done}");
            }
            ensure!(
                e.duration_ns.is_some() == timing,
                "duration {:?} with timing={timing}",
                e.duration_ns
            );
        }
        drop(last);
        for _ in 0..10 {
            ok!(ok!(pg.all_reduce(&mut b, ReduceOp::Sum)).wait());
        }
        settle()?;
        ensure!(
            eventually(|| recorder.lock().entries().last().is_some_and(|e| e.retired)),
            "the last entry was not retired"
        );
        let r = recorder.lock();
        let entries: Vec<_> = r.entries().collect();
        ensure!(entries.len() == 10, "{} entries", entries.len());
        let first = entries[0].record.collective_seq;
        let last = entries[9].record.collective_seq;
        ensure!(first == 3 && last == 12, "{first}..{last}");
        ensure!(last - first == 9, "{first}..{last}");
        ensure!(
            entries[9].retired && entries[9].state == TraceState::Completed,
            "last entry: {:?}",
            entries[9]
        );
        ensure!(
            entries.iter().all(|e| e.duration_ns.is_some() == timing),
            "durations with timing={timing}"
        );
    }
    Ok(())
}

/// Case 29: an unmatched second operation reads "started" with timing and "scheduled"
/// without (no completion seen); an only-active dump keeps only it on the stuck rank and
/// nothing on its peer, whose last entry is its seq-1 all_reduce, completed; p2p entries are
/// named "nccl:send 1->0" / "nccl:recv 0<-1" with p2p seq and op id from 1, completed, sizes
/// in and out; a coalesced block is one entry with all its input and output sizes.
pub fn case_29<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    for timing in [true, false] {
        let recorder = Recorder::new(100);
        let pg: ProcessGroup<B> = ok!(mk(PgOptions {
            recorder: Some(recorder.clone()),
            timing,
            ..lazy(rank)
        }));
        let mut b = ok!(pg.upload(&[1.0f32; 8]));
        ok!(ok!(pg.all_reduce(&mut b, ReduceOp::Sum)).wait());
        if rank == 0 {
            let _stuck = ok!(pg.all_reduce(&mut b, ReduceOp::Sum));
            let want = if timing {
                TraceState::Started
            } else {
                TraceState::Scheduled
            };
            // The watchdog looks within its period; a scheduled one must stay so.
            std::thread::sleep(Duration::from_millis(300));
            ensure!(
                eventually(|| recorder.lock().get(1).is_some_and(|e| e.state == want)),
                "timing={timing}: {:?}",
                recorder.lock().get(1).map(|e| e.state)
            );
            settle()?;
            let all = recorder.lock().dump(false);
            let last = all.last().ok_or("no entries")?;
            ensure!(
                all.len() == 2
                    && last.id == 1
                    && last.record.collective_seq == 2
                    && last.record.profiling_name == "nccl:all_reduce"
                    && last.state == want
                    && last.time_discovered_completed_ns.is_none()
                    && !last.retired,
                "timing={timing}: {all:?}"
            );
            let active = recorder.lock().dump(true);
            ensure!(
                active.len() == 1 && active[0].id == 1,
                "only active: {active:?}"
            );
            pg.abort("end of case 29");
        } else {
            settle()?;
            ensure!(
                eventually(|| recorder.lock().get(0).is_some_and(|e| e.retired)),
                "the first all_reduce was not retired"
            );
            let all = recorder.lock().dump(false);
            ensure!(
                all.len() == 1
                    && all[0].record.collective_seq == 1
                    && all[0].record.profiling_name == "nccl:all_reduce"
                    && all[0].state == TraceState::Completed,
                "{all:?}"
            );
            let active = recorder.lock().dump(true);
            ensure!(
                active.is_empty(),
                "only active on the healthy rank: {active:?}"
            );
            std::thread::sleep(Duration::from_millis(800));
        }
    }
    // p2p names and sequence numbers, and a coalesced block as one entry.
    let recorder = Recorder::new(100);
    let pg: ProcessGroup<B> = ok!(mk(PgOptions {
        recorder: Some(recorder.clone()),
        ..lazy(rank)
    }));
    let peer = 1 - rank.min(1);
    let repeats = 3u64;
    if rank <= 1 {
        for _ in 0..repeats {
            for len in [4usize, 6] {
                let s = ok!(pg.upload(&vec![2.0f32; len]));
                let mut r = ok!(pg.alloc_zeros::<f32>(len));
                if rank == 1 {
                    ok!(ok!(pg.send(&s, peer)).wait());
                } else {
                    ok!(ok!(pg.recv(&mut r, peer)).wait());
                    ensure!(ok!(pg.download(&r)) == vec![2.0; len], "received");
                }
            }
        }
        settle()?;
        ensure!(
            eventually(|| recorder.lock().entries().all(|e| e.retired)),
            "p2p entries not retired"
        );
        let entries = recorder.lock().dump(false);
        ensure!(entries.len() == 2 * repeats as usize, "{entries:?}");
        let want = if rank == 1 {
            "nccl:send 1->0"
        } else {
            "nccl:recv 0<-1"
        };
        for (i, e) in entries.iter().enumerate() {
            let k = i as u64 + 1;
            let len = if i % 2 == 0 { 4 } else { 6 };
            ensure!(
                e.record.profiling_name == want,
                "{}",
                e.record.profiling_name
            );
            ensure!(
                e.record.is_p2p && e.record.p2p_seq == k && e.record.op_id == k,
                "entry {i}: {e:?}"
            );
            let sizes = |t: &[oxccl::rules::recorder::TensorMeta]| -> Vec<Vec<u64>> {
                t.iter().map(|m| m.sizes.clone()).collect()
            };
            // The buffer moved: the send's input, the recv's output (what torchfrtrace
            // matches: a send's input sizes against its recv's output sizes).
            let moved = if rank == 1 {
                sizes(&e.record.inputs)
            } else {
                sizes(&e.record.outputs)
            };
            ensure!(moved == vec![vec![len]], "entry {i}: {e:?}");
            ensure!(e.state == TraceState::Completed, "entry {i}: {e:?}");
            ensure!(e.duration_ns.is_none(), "a duration without timing");
        }
    }
    let before = recorder.lock().len();
    let seq_before = pg.seq();
    let mut x = ok!(pg.upload(&[1.0f32; 3]));
    let mut y = ok!(pg.upload(&[1.0f32; 5]));
    ok!(ok!(pg.coalesced(|c| {
        c.all_reduce(&mut x, ReduceOp::Sum)?;
        c.all_reduce(&mut y, ReduceOp::Sum)
    }))
    .wait());
    let n = pg.size() as f32;
    ensure!(
        ok!(pg.download(&x)) == vec![n; 3] && ok!(pg.download(&y)) == vec![n; 5],
        "coalesced values"
    );
    settle()?;
    let rec = recorder.lock();
    ensure!(rec.len() == before + 1, "one entry for the block");
    let e = rec.entries().last().cloned().ok_or("coalesced entry")?;
    ensure!(
        e.record.profiling_name == "nccl:all_reduce_coalesced",
        "{}",
        e.record.profiling_name
    );
    ensure!(
        e.record.collective_seq == seq_before + 1 && !e.record.is_p2p,
        "{e:?}"
    );
    let sizes = |t: &[oxccl::rules::recorder::TensorMeta]| -> Vec<Vec<u64>> {
        t.iter().map(|m| m.sizes.clone()).collect()
    };
    ensure!(
        sizes(&e.record.inputs) == vec![vec![3], vec![5]],
        "{:?}",
        e.record.inputs
    );
    ensure!(
        sizes(&e.record.outputs) == vec![vec![3], vec![5]],
        "{:?}",
        e.record.outputs
    );
    Ok(())
}

/// Case 12: with the NaN check on, an input of f16, bf16, f32 or f64 holding one NaN is
/// refused (naming the op, the rank and the buffer) before the collective; NaN-free inputs pass.
pub fn case_12<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(PgOptions {
        nan_check: true,
        ..lazy(rank)
    }));
    let n = pg.size() as f64;
    fn check<B: PgBackend, T: oxccl::Element>(
        pg: &ProcessGroup<B>,
        rank: u32,
        n: f64,
        of: fn(f64) -> T,
        back: fn(T) -> f64,
    ) -> Verdict {
        let clean = vec![of(f64::from(rank)); 100];
        let mut b = ok!(pg.upload(&clean));
        ok!(ok!(pg.all_reduce(&mut b, ReduceOp::Sum)).wait());
        let want = n * (n - 1.0) / 2.0;
        ensure!(
            ok!(pg.download(&b)).into_iter().all(|x| back(x) == want),
            "clean sum"
        );
        let mut dirty = clean.clone();
        dirty[37] = of(f64::NAN);
        let mut d = ok!(pg.upload(&dirty));
        let e = pg.all_reduce(&mut d, ReduceOp::Sum).map(|_| ());
        let text = e.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
        ensure!(
            matches!(e, Err(Error::InvalidArgument { arg: "buf", .. }))
                && text.contains("all_reduce")
                && text.contains(&format!("rank {rank}")),
            "{e:?}"
        );
        Ok(())
    }
    check(&pg, rank, n, half::f16::from_f64, |x| x.to_f64())?;
    check(&pg, rank, n, half::bf16::from_f64, |x| x.to_f64())?;
    check(&pg, rank, n, |x| x as f32, f64::from)?;
    check(&pg, rank, n, |x| x, |x| x)?;
    // Integers have no NaN: the check lets them through.
    let mut i = ok!(pg.upload(&[1i32; 8]));
    ok!(ok!(pg.all_reduce(&mut i, ReduceOp::Sum)).wait());
    Ok(())
}

/// Not a seed case: a rank blocked reading the result of an unmatched operation (its download
/// waits for the stream) is freed when another thread destroys the group, and so is the
/// thread blocked in `Work::wait`.
pub fn destroy_frees_blocked_threads<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let mut b = ok!(pg.upload(&[1.0f32; 8]));
    ok!(ok!(pg.all_reduce(&mut b, ReduceOp::Sum)).wait());
    if rank == 0 {
        let w = ok!(pg.all_reduce(&mut b, ReduceOp::Sum));
        let waiter = std::thread::spawn(move || w.wait());
        let destroyer = {
            let pg = pg.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                pg.destroy();
            })
        };
        let began = Instant::now();
        let _ = pg.download(&b);
        let waited = waiter.join().map_err(|_| "waiter panicked")?;
        let _ = destroyer.join();
        ensure!(
            began.elapsed() < Duration::from_secs(5),
            "blocked for {:?}",
            began.elapsed()
        );
        ensure!(waited.is_err(), "the unmatched all_reduce completed");
        ensure!(
            pg.comm_state() == Some(oxccl::CommState::Destroyed),
            "state"
        );
    } else {
        std::thread::sleep(Duration::from_millis(1500));
    }
    Ok(())
}

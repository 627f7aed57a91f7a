//! Buffer modes with graphs, batches and explicit release, on the mock world: a capture uses
//! the registrations and windows made before it (by a warm-up operation or
//! `register_buffer`) and makes none itself, refuses a buffer not yet in its mode, keeps what
//! its graph uses until the graph goes; `batch_isend_irecv` registers `CommBuf` operands
//! (never in windows); `release_windows` releases the windows of dropped buffers only, on
//! every rank alike, and is refused where it cannot run.

mod common;
mod tune_kit;

use common::capture_error;
use oxccl::buffer::Operand;
use oxccl::core::CaptureError;
use oxccl::mock::MockBackend;
use oxccl::pg::{P2pOp, ProcessGroup, RegMode, TuneTable, TunedStats};
use oxccl::{CommState, Error, ReduceOp};
use tune_kit::world;

fn both(t: TuneTable) -> [Option<TuneTable>; 2] {
    [Some(t.clone()), Some(t)]
}

/// (windows made ever, live windows, live local registrations) of this rank's communicator.
fn mock_regs(pg: &ProcessGroup<MockBackend>) -> oxccl::Result<(u64, usize, usize)> {
    pg.with_comm(|c| (c.windows_made(), c.windows().len(), c.registrations().len()))
}

/// Runs `body` on two mock ranks whose tables put every operation in `mode`.
fn in_mode<R: Send>(
    mode: RegMode,
    body: impl Fn(&ProcessGroup<MockBackend>, u32) -> oxccl::Result<R> + Sync,
) -> Vec<oxccl::Result<R>> {
    world(MockBackend::new(), &both(TuneTable::uniform(mode)), body)
}

#[test]
fn a_capture_uses_the_window_a_warm_up_made_and_makes_none() {
    let out = in_mode(RegMode::Window, |pg, r| {
        let mut buf = pg.upload_comm(&[1.0f32 + r as f32; 4])?;
        // The warm-up: the table makes the window (collective) outside the capture.
        pg.all_reduce(&mut buf, ReduceOp::Sum)?.wait()?;
        let before = mock_regs(pg)?;
        let graph = pg.capture(|pg| {
            pg.all_reduce(&mut buf, ReduceOp::Sum)?;
            pg.all_reduce(&mut buf, ReduceOp::Sum)?;
            Ok(())
        })?;
        for _ in 0..3 {
            graph.replay(&mut [&mut buf])?.wait()?;
        }
        let after = mock_regs(pg)?;
        Ok((before, after, pg.download_any(&buf)?, pg.tuned_stats()?))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (before, after, got, stats) = o.unwrap();
        assert_eq!(before, (1, 1, 0), "rank {r}");
        assert_eq!(after, (1, 1, 0), "rank {r}: the capture made nothing");
        // 1 + 2 = 3 at the warm-up, then doubled by each of 2 ops × 3 launches.
        assert_eq!(got, vec![3.0 * 64.0; 4], "rank {r}");
        assert_eq!(
            stats,
            TunedStats {
                ops: [0, 0, 3],
                registered: 0,
                windows: 1
            },
            "rank {r}: the warm-up and the two captured operations, in window mode"
        );
    }
}

#[test]
fn register_buffer_prepares_a_capture_in_either_mode() {
    let t = TuneTable::parse("oxccl-tune 1\nall_gather * 0 max window\n* * 0 max registered\n")
        .unwrap();
    let out = world(MockBackend::new(), &both(t), |pg, r| {
        let send = pg.upload_comm(&[r as i32 + 1; 2])?;
        let mut recv = pg.alloc_comm::<i32>(4)?;
        let mut red = pg.upload_comm(&[5i64; 3])?;
        pg.register_buffer(&send, RegMode::Window)?;
        pg.register_buffer(&recv, RegMode::Window)?;
        pg.register_buffer(&red, RegMode::Registered)?;
        // Already there: nothing more is made.
        pg.register_buffer(&send, RegMode::Window)?;
        pg.register_buffer(&red, RegMode::Plain)?;
        let before = mock_regs(pg)?;
        let graph = pg.capture(|pg| {
            pg.all_gather(&send, &mut recv)?;
            pg.all_reduce(&mut red, ReduceOp::Max)?;
            Ok(())
        })?;
        let mut send = send;
        graph
            .bind(&mut send)
            .buf(&mut recv)
            .buf(&mut red)
            .replay()?
            .wait()?;
        Ok((
            before,
            mock_regs(pg)?,
            pg.download_any(&recv)?,
            pg.download_any(&red)?,
            pg.tuned_stats()?.ops,
        ))
    });
    for o in out {
        let (before, after, recv, red) = {
            let (b, a, rv, rd, ops) = o.unwrap();
            assert_eq!(ops, [0, 1, 1], "one op per mode captured");
            (b, a, rv, rd)
        };
        assert_eq!(before, (2, 2, 1));
        assert_eq!(after, before);
        assert_eq!(recv, vec![1, 1, 2, 2]);
        assert_eq!(red, vec![5; 3]);
    }
}

#[test]
fn a_capture_refuses_a_buffer_not_yet_in_its_mode_and_registers_nothing() {
    let out = in_mode(RegMode::Window, |pg, _| {
        let mut buf = pg.upload_comm(&[1.0f32; 4])?;
        let refused =
            capture_error(pg.capture(|pg| pg.all_reduce(&mut buf, ReduceOp::Sum).map(drop)));
        let regs = mock_regs(pg)?;
        // A plain buffer needs nothing: captured as it is.
        let mut plain = pg.upload(&[1.0f32; 4])?;
        let g = pg.capture(|pg| pg.all_reduce(&mut plain, ReduceOp::Sum).map(drop))?;
        g.replay(&mut [&mut plain])?.wait()?;
        // A registration is not enough where the table asks for a window.
        pg.register_buffer(&buf, RegMode::Registered)?;
        let still =
            capture_error(pg.capture(|pg| pg.all_reduce(&mut buf, ReduceOp::Sum).map(drop)));
        Ok((refused, regs, pg.download(&plain)?, still.0))
    });
    for o in out {
        let ((kind, msg), regs, plain, still) = o.unwrap();
        assert_eq!(kind, CaptureError::Unsupported);
        assert!(
            msg.contains("all_reduce of 16 B needs buffer")
                && msg.contains("in a window")
                && msg.contains("register_buffer before it"),
            "{msg}"
        );
        assert_eq!(regs, (0, 0, 0), "nothing registered inside the capture");
        assert_eq!(plain, vec![2.0; 4]);
        assert_eq!(still, CaptureError::Unsupported);
    }
}

#[test]
fn register_buffer_refusals() {
    let out = in_mode(RegMode::Window, |pg, _| {
        let plain = pg.upload(&[1u8; 4])?;
        let comm = pg.upload_comm(&[1u8; 4])?;
        let plain_window = pg.register_buffer(&plain, RegMode::Window);
        pg.register_buffer(&plain, RegMode::Plain)?;
        let in_capture = pg
            .capture(|pg| pg.register_buffer(&comm, RegMode::Registered))
            .map(drop);
        let block = pg.start_coalescing()?;
        let in_block = pg.register_buffer(&comm, RegMode::Registered);
        block.end()?.wait()?;
        Ok((plain_window, in_capture, in_block, mock_regs(pg)?))
    });
    for o in out {
        let (plain_window, in_capture, in_block, regs) = o.unwrap();
        match plain_window {
            Err(Error::InvalidArgument { arg, expected }) => {
                assert_eq!(arg, "buf");
                assert!(expected.contains("got a plain buffer"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(capture_error(in_capture).0, CaptureError::Unsupported);
        assert!(
            matches!(
                in_block,
                Err(Error::InvalidState {
                    attempted: "register_buffer",
                    ..
                })
            ),
            "{in_block:?}"
        );
        assert_eq!(regs, (0, 0, 0));
    }
}

#[test]
fn a_graph_keeps_its_windows_until_it_is_dropped() {
    let out = in_mode(RegMode::Window, |pg, _| {
        let mut buf = pg.upload_comm(&[2u32; 2])?;
        pg.register_buffer(&buf, RegMode::Window)?;
        let graph = pg.capture(|pg| pg.all_reduce(&mut buf, ReduceOp::Sum).map(drop))?;
        graph.replay(&mut [&mut buf])?.wait()?;
        let got = pg.download_any(&buf)?;
        drop(buf);
        // Dropped, but the graph still uses it: kept.
        let while_graph = (pg.release_windows()?, pg.tuned_stats()?.windows);
        drop(graph);
        let after = (pg.release_windows()?, pg.tuned_stats()?.windows);
        Ok((got, while_graph, after, mock_regs(pg)?))
    });
    for o in out {
        let (got, while_graph, after, regs) = o.unwrap();
        assert_eq!(got, vec![4, 4]);
        assert_eq!(while_graph, (0, 1));
        assert_eq!(after, (1, 0));
        assert_eq!(regs, (1, 0, 0));
    }
}

#[test]
fn release_windows_releases_the_dropped_buffers_only() {
    let out = in_mode(RegMode::Window, |pg, _| {
        let mut keep = pg.upload_comm(&[1.0f64; 2])?;
        let mut gone = pg.upload_comm(&[1.0f64; 3])?;
        let mut third = pg.upload_comm(&[1.0f64; 5])?;
        pg.all_reduce(&mut keep, ReduceOp::Sum)?.wait()?;
        pg.all_reduce(&mut gone, ReduceOp::Sum)?;
        // Its work may still be queued: release waits for it.
        pg.all_reduce(&mut third, ReduceOp::Sum)?;
        drop(gone);
        drop(third);
        let before = pg.tuned_stats()?.windows;
        let released = pg.release_windows()?;
        let after = pg.tuned_stats()?.windows;
        // The kept buffer still works on its window; nothing new is made.
        pg.all_reduce(&mut keep, ReduceOp::Sum)?.wait()?;
        let again = pg.release_windows()?;
        Ok((
            before,
            released,
            after,
            again,
            mock_regs(pg)?,
            pg.download_any(&keep)?,
        ))
    });
    for o in out {
        let (before, released, after, again, regs, keep) = o.unwrap();
        assert_eq!((before, released, after, again), (3, 2, 1, 0));
        assert_eq!(regs, (3, 1, 0));
        assert_eq!(keep, vec![4.0; 2]);
    }
}

#[test]
fn release_windows_with_different_drops_is_refused_on_every_rank() {
    let out = in_mode(RegMode::Window, |pg, r| {
        let mut a = pg.upload_comm(&[1i32; 2])?;
        pg.all_reduce(&mut a, ReduceOp::Sum)?.wait()?;
        let kept = if r == 0 {
            drop(a);
            None
        } else {
            Some(a)
        };
        let res = pg.release_windows();
        Ok((res, pg.tuned_stats()?.windows, kept.is_some()))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (res, windows, _) = o.unwrap();
        match res {
            Err(Error::InvalidState {
                state: CommState::Ready,
                attempted: "release_windows",
                reason,
            }) => assert!(
                reason.contains("the same windows") && reason.contains("global rank 1"),
                "rank {r}: {reason}"
            ),
            other => panic!("rank {r}: {other:?}"),
        }
        assert_eq!(windows, 1, "rank {r}: nothing released");
    }
}

/// A rank that never calls `release_windows` is named once the group's timeout has passed on
/// rank 0, even when another rank published late: one deadline for all of rank 0's reads
/// (each read given a whole timeout kept it for about 1.5 + 2 s here).
#[test]
fn release_windows_names_a_rank_that_never_calls_it_within_one_timeout() {
    let timeout = std::time::Duration::from_secs(2);
    let out = world(
        MockBackend::new(),
        &[
            Some(TuneTable::uniform(RegMode::Window)),
            Some(TuneTable::uniform(RegMode::Window)),
            Some(TuneTable::uniform(RegMode::Window)),
        ],
        |pg, r| {
            pg.all_reduce(&mut pg.upload(&[1i32; 2])?, ReduceOp::Sum)?
                .wait()?;
            pg.set_timeout(timeout);
            let began = std::time::Instant::now();
            match r {
                0 => Ok(Some((pg.release_windows(), began.elapsed()))),
                1 => {
                    std::thread::sleep(std::time::Duration::from_millis(1_500));
                    // Its own wait for the verdict ends in a timeout too: not checked here.
                    let _ = pg.release_windows();
                    Ok(None)
                }
                _ => Ok(None),
            }
        },
    );
    let (res, took) = out.into_iter().next().unwrap().unwrap().unwrap();
    match res {
        Err(Error::Timeout { what, .. }) => assert_eq!(
            what.as_str(),
            "group rank 2 never published its windows to release (does every rank call \
             release_windows?)"
        ),
        other => panic!("rank 0: {other:?}"),
    }
    assert!(
        took >= timeout && took < timeout + std::time::Duration::from_millis(1_000),
        "rank 0 waited {took:?}"
    );
}

#[test]
fn release_windows_is_refused_in_a_capture_and_in_a_block() {
    let out = in_mode(RegMode::Window, |pg, _| {
        let in_capture = pg.capture(|pg| pg.release_windows().map(drop)).map(drop);
        let block = pg.start_coalescing()?;
        let in_block = pg.release_windows();
        block.end()?.wait()?;
        Ok((in_capture, in_block, pg.release_windows()?))
    });
    for o in out {
        let (in_capture, in_block, outside) = o.unwrap();
        let (kind, msg) = capture_error(in_capture);
        assert_eq!(kind, CaptureError::Unsupported, "{msg}");
        assert!(
            matches!(
                in_block,
                Err(Error::InvalidState {
                    attempted: "release_windows",
                    ..
                })
            ),
            "{in_block:?}"
        );
        assert_eq!(outside, 0);
    }
}

#[test]
fn batches_register_comm_buffers_locally_and_mix_kinds() {
    let out = in_mode(RegMode::Window, |pg, r| {
        let peer = 1 - r;
        let send = pg.upload_comm(&[10 + r as i64; 3])?;
        let mut recv = pg.alloc_comm::<i64>(3)?;
        let plain_send = pg.upload(&[20 + r as i64; 2])?;
        let mut plain_recv = pg.alloc_zeros::<i64>(2)?;
        pg.batch_isend_irecv(&mut [
            P2pOp::Send(&send, peer),
            P2pOp::Recv(&mut recv, peer),
            P2pOp::Send(&plain_send, peer),
            P2pOp::Recv(&mut plain_recv, peer),
        ])?
        .wait()?;
        let regs = mock_regs(pg)?;
        // Again: the cached registrations serve, nothing new is made.
        pg.batch_isend_irecv(&mut [P2pOp::Send(&send, peer), P2pOp::Recv(&mut recv, peer)])?
            .wait()?;
        let made = pg.with_comm(|c| c.registrations_made())?;
        let send_addr = Operand::<MockBackend>::comm_mem(&send).map(|m| m.addr);
        Ok((
            pg.download_any(&recv)?,
            pg.download(&plain_recv)?,
            regs,
            made,
            pg.tuned_stats()?.ops,
            send_addr,
            pg.with_comm(|c| c.registrations().iter().map(|h| h.addr).collect::<Vec<_>>())?,
        ))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (recv, plain_recv, regs, made, ops, send_addr, reg_addrs) = o.unwrap();
        let peer = 1 - r as i64;
        assert_eq!(recv, vec![10 + peer; 3], "rank {r}");
        assert_eq!(plain_recv, vec![20 + peer; 2], "rank {r}");
        // The table says window; a send or receive is registered locally instead.
        assert_eq!(regs, (0, 0, 2), "rank {r}");
        assert_eq!(made, 2, "rank {r}");
        // Plain: the two plain operands; registered: the comm ones, twice each batch.
        assert_eq!(ops, [2, 4, 0], "rank {r}");
        assert!(reg_addrs.contains(&send_addr.unwrap()), "rank {r}");
    }
}

#[test]
fn batches_in_a_capture_use_registrations_made_before() {
    let out = in_mode(RegMode::Registered, |pg, r| {
        let peer = 1 - r;
        let send = pg.upload_comm(&[1.5f32 + r as f32; 2])?;
        let mut recv = pg.alloc_comm::<f32>(2)?;
        let refused = capture_error(pg.capture(|pg| {
            pg.batch_isend_irecv(&mut [P2pOp::Send(&send, peer), P2pOp::Recv(&mut recv, peer)])
                .map(drop)
        }));
        // The warm-up registers both; the capture then takes them.
        pg.batch_isend_irecv(&mut [P2pOp::Send(&send, peer), P2pOp::Recv(&mut recv, peer)])?
            .wait()?;
        let graph = pg.capture(|pg| {
            pg.batch_isend_irecv(&mut [P2pOp::Send(&send, peer), P2pOp::Recv(&mut recv, peer)])
                .map(drop)
        })?;
        let mut send = send;
        graph.bind(&mut send).buf(&mut recv).replay()?.wait()?;
        // Single sends and receives are registered as well.
        let mut one = pg.alloc_comm::<f32>(2)?;
        if r == 0 {
            pg.send(&send, 1)?.wait()?;
        } else {
            pg.recv(&mut one, 0)?.wait()?;
        }
        Ok((refused.0, pg.download_any(&recv)?, mock_regs(pg)?))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (refused, recv, regs) = o.unwrap();
        assert_eq!(refused, CaptureError::Unsupported, "rank {r}");
        assert_eq!(recv, vec![1.5 + (1 - r) as f32; 2], "rank {r}");
        // Rank 0 sent an already registered buffer; rank 1 registered `one` to receive.
        assert_eq!(regs, (0, 0, if r == 0 { 2 } else { 3 }), "rank {r}");
    }
}

#[test]
fn a_graph_keeps_local_registrations_and_launches_check_comm_buffers() {
    let out = in_mode(RegMode::Registered, |pg, _| {
        let mut buf = pg.upload_comm(&[3i32; 4])?;
        pg.all_reduce(&mut buf, ReduceOp::Sum)?.wait()?;
        let graph = pg.capture(|pg| pg.all_reduce(&mut buf, ReduceOp::Sum).map(drop))?;
        // Another CommBuf of the same size is not the captured one.
        let mut other = pg.upload_comm(&[3i32; 4])?;
        let mismatch = capture_error(graph.replay(&mut [&mut other])).0;
        graph.replay(&mut [&mut buf])?.wait()?;
        let got = pg.download_any(&buf)?;
        drop(buf);
        // Operations sweep dropped buffers' registrations: not the graph's.
        for _ in 0..3 {
            pg.all_reduce(&mut other, ReduceOp::Sum)?.wait()?;
        }
        let kept = mock_regs(pg)?.2;
        drop(graph);
        pg.all_reduce(&mut other, ReduceOp::Sum)?.wait()?;
        Ok((mismatch, got, kept, mock_regs(pg)?.2))
    });
    for o in out {
        let (mismatch, got, kept, after) = o.unwrap();
        assert_eq!(mismatch, CaptureError::Mismatch);
        assert_eq!(got, vec![12; 4]);
        assert_eq!(kept, 2, "the graph's buffer and `other`");
        assert_eq!(after, 1, "only `other` once the graph is gone");
    }
}

//! One-sided operations on the mock: a put with a signal lands in the peer's window, and the
//! peer's wait for the signal orders it; bad puts are refused before anything runs; a wait
//! for a peer that is gone, or for a signal that never comes, fails the rank.

mod common;

use common::*;
use oxccl_core::one_sided::{PutSignal, SignalWait};
use oxccl_core::{
    CommConfig, Communicator, ConfigField, DataType, Error, Feature, Progress, RawBuf, Stream,
    Version,
};
use oxccl_core::{OneSided, Windows};
use oxccl_mock::{MockComm, World};
use std::time::Duration;

fn world(n: u32, version: Version, limit: Duration) -> Vec<MockComm> {
    World::builder(n)
        .version(version)
        .init_timeout(limit)
        .build()
        .unwrap()
}

/// A world whose communicators have `signals` signal indices and 2 contexts (the config's
/// `numRmaSig` and `numRmaCtx`).
fn world_with_signals(n: u32, signals: i32, limit: Duration) -> Vec<MockComm> {
    let cfg = CommConfig::new()
        .set(ConfigField::NumRmaSig, signals)
        .and_then(|c| c.set(ConfigField::NumRmaCtx, 2))
        .unwrap();
    World::builder(n)
        .version(Version::new(2, 32, 3))
        .init_timeout(limit)
        .config(cfg)
        .build()
        .unwrap()
}

fn floats(b: &Buf) -> Vec<f32> {
    b.bytes()
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn put(
    src: &Buf,
    len: usize,
    peer: u32,
    window: oxccl_core::RegHandle,
    offset: usize,
    signal: u32,
) -> PutSignal {
    PutSignal {
        send: RawBuf::new(src.addr(), len),
        dtype: DataType::Float32,
        peer,
        window,
        offset,
        signal,
        ctx: 0,
    }
}

#[test]
fn a_put_lands_in_the_peers_window_once_its_signal_is_waited_for() {
    let out = on_ranks(world_with_signals(2, 2, Duration::from_secs(10)), |c| {
        let s = stream();
        let win_buf = Buf::filled(64, 0);
        let win = c.register_window(win_buf.addr(), 64).unwrap();
        // A put's data lies in a window too (NCCL reads it through its window).
        let mut src = Buf::filled(16, 0);
        let src_win = c.register_window(src.addr(), 16).unwrap();
        let me = c.rank();
        let other = 1 - me;
        if me == 0 {
            src.bytes_mut()
                .copy_from_slice(&f32s(&[1.0, 2.0, 3.0, 4.0]));
            // SAFETY: `src` lives until the stream is synchronized below.
            unsafe { c.put_signal(&put(&src, 4, other, win, 16, 0), &s) }.unwrap();
            // The answer: rank 1 doubled it into this rank's window, signal 1.
            let back = [SignalWait {
                peer: other,
                signal: 1,
                count: 1,
                ctx: 0,
            }];
            c.wait_signal(&back, &s).unwrap();
            s.synchronize().unwrap();
        } else {
            let got = [SignalWait {
                peer: other,
                signal: 0,
                count: 1,
                ctx: 0,
            }];
            c.wait_signal(&got, &s).unwrap();
            s.synchronize().unwrap();
            let seen = floats(&win_buf)[4..8].to_vec();
            src.bytes_mut()
                .copy_from_slice(&f32s(&seen.iter().map(|x| x * 2.0).collect::<Vec<_>>()));
            // SAFETY: `src` lives until the stream is synchronized below.
            unsafe { c.put_signal(&put(&src, 4, other, win, 0, 1), &s) }.unwrap();
            s.synchronize().unwrap();
        }
        assert_eq!(c.poll(), Ok(Progress::Done));
        let mine = floats(&win_buf);
        c.deregister_window(src_win).unwrap();
        c.deregister_window(win).unwrap();
        mine
    });
    assert_eq!(
        &out[0][..4],
        &[2.0, 4.0, 6.0, 8.0],
        "rank 0 got the doubled answer"
    );
    assert_eq!(
        &out[1][4..8],
        &[1.0, 2.0, 3.0, 4.0],
        "rank 1 got the put at byte 16"
    );
}

#[test]
fn bad_puts_and_waits_are_refused_before_anything_runs() {
    let w = world(2, Version::new(2, 32, 3), Duration::from_secs(10));
    let s = stream();
    let c = &w[0];
    let win_buf = Buf::filled(64, 0);
    // Registered on rank 0 only: enough for the checks, which never reach a peer.
    let win = c.register_window(win_buf.addr(), 64).unwrap();
    let src = Buf::filled(64, 1);
    for (len, offset) in [(17, 0), (1, 61)] {
        // SAFETY: refused before anything is queued.
        let e = unsafe { c.put_signal(&put(&src, len, 1, win, offset, 0), &s) }.unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "offset", .. }),
            "{e}"
        );
    }
    let stranger = oxccl_core::RegHandle { raw: 99, ..win };
    // SAFETY: refused before anything is queued.
    let e = unsafe { c.put_signal(&put(&src, 1, 1, stranger, 0, 0), &s) }.unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "window", .. }),
        "{e}"
    );
    // SAFETY: refused before anything is queued.
    let e = unsafe { c.put_signal(&put(&src, 1, 2, win, 0, 0), &s) }.unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "peer", .. }),
        "{e}"
    );
    let e = c.wait_signal(&[], &s).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "waits", .. }),
        "{e}"
    );
    // Data outside every window, in an otherwise good put.
    // SAFETY: refused before anything is queued.
    let e = unsafe { c.put_signal(&put(&src, 1, 1, win, 0, 0), &s) }.unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "send", .. }),
        "{e}"
    );
    let e = c.signal(3, 0, 0, &s).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "peer", .. }),
        "{e}"
    );
    // One signal index unless the config's numRmaSig gives more (NCCL's "must be in [0, 1)").
    let e = c.signal(1, 1, 0, &s).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "signal", .. }),
        "{e}"
    );
    let e = c
        .wait_signal(
            &[SignalWait {
                peer: 1,
                signal: 1,
                count: 1,
                ctx: 0,
            }],
            &s,
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "signal", .. }),
        "{e}"
    );
    let more = world_with_signals(2, 4, Duration::from_secs(10));
    // SAFETY: refused before anything is queued.
    let e = unsafe { c.put_signal(&put(&src, 1, 1, win, 0, 3), &s) }.unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "signal", .. }),
        "{e}"
    );
    let e = more[0].signal(1, 4, 0, &s).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "signal", .. }),
        "{e}"
    );
    let e = more[0].signal(1, 3, 2, &s).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { arg: "ctx", .. }),
        "{e}"
    );
    let old = world(2, Version::new(2, 28, 9), Duration::from_secs(10));
    let e = old[0].signal(1, 0, 0, &s).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: Feature::OneSided,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("needs NCCL 2.29.2, loaded 2.28.9"),
        "{e}"
    );
}

#[test]
fn a_wait_for_a_gone_peer_or_a_signal_that_never_comes_fails_the_rank() {
    let out = on_ranks(
        world(2, Version::new(2, 32, 3), Duration::from_millis(300)),
        |c| {
            let s = stream();
            if c.rank() == 1 {
                c.abort("gone");
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
            let w = [SignalWait {
                peer: 1,
                signal: 0,
                count: 1,
                ctx: 0,
            }];
            c.wait_signal(&w, &s).unwrap();
            s.synchronize().unwrap();
            Some(c.poll())
        },
    );
    assert!(
        matches!(out[0], Some(Err(Error::Remote { .. }))),
        "{:?}",
        out[0]
    );
    let out = on_ranks(world_with_signals(2, 8, Duration::from_millis(300)), |c| {
        let s = stream();
        if c.rank() == 0 {
            let w = [SignalWait {
                peer: 1,
                signal: 7,
                count: 2,
                ctx: 0,
            }];
            c.wait_signal(&w, &s).unwrap();
            // One of the two signals comes.
            s.synchronize().unwrap();
            return Some(c.poll());
        }
        c.signal(0, 7, 0, &s).unwrap();
        s.synchronize().unwrap();
        std::thread::sleep(Duration::from_millis(600));
        None
    });
    assert!(
        matches!(out[0], Some(Err(Error::Timeout { .. }))),
        "{:?}",
        out[0]
    );
}

//! One-sided operations of `Comm` on symmetric windows of `NcclBuf`s: a ring of puts with
//! signals (values in each window afterwards), and what is refused: a window registered twice,
//! buffers in no window, a put past the window, peers and signals out of range, an empty wait,
//! any of them inside a capture, a library without signals. Needs window registration (NCCL
//! 2.27.3+) and signals (2.29.2+); says so and skips otherwise.

use super::{gpus, nccl, on_gpus, refused_arg, refused_capture, up};
use oxccl_comm::buffer::NcclBuf;
use oxccl_comm::core::one_sided::SignalFrom;
use oxccl_comm::core::CaptureError;
use oxccl_comm::{Comm, Error, Feature, NcclStream, ReduceOp};
use std::time::Duration;

/// Whether the loaded library has what one-sided operations need (a note when not).
fn has_one_sided() -> bool {
    let f = *oxccl_comm::Backend::features(&nccl());
    let need = [
        Feature::MemAlloc,
        Feature::WindowRegistration,
        Feature::OneSided,
    ];
    match need.into_iter().find(|x| !f.has(*x)) {
        None => true,
        Some(x) => {
            eprintln!("skipped: the loaded NCCL {} lacks {x}", f.version());
            false
        }
    }
}

/// `data` in NCCL's allocator on `c`'s device.
fn comm_buf(c: &Comm, data: &[f32]) -> NcclBuf<f32> {
    let st = NcclStream::new(c.stream().clone());
    NcclBuf::from_host(&c.backend().backend(), &st, data).expect("ncclMemAlloc")
}

fn contents(c: &Comm, buf: &NcclBuf<f32>) -> Vec<f32> {
    buf.to_host(&NcclStream::new(c.stream().clone())).unwrap()
}

/// Rank r puts its 4 values into part r of the next rank's window and raises signal 0 there,
/// then raises it once more without data; each rank waits for both from the previous rank.
#[test]
fn a_ring_of_puts_lands_in_each_window() {
    let Some(n) = gpus() else { return };
    if !has_one_sided() {
        return;
    }
    on_gpus(n, move |r, mut c| {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let nu = n as usize;
        let mut window = comm_buf(&c, &vec![-1.0; 4 * nu]);
        let src_vals: Vec<f32> = (0..4).map(|i| (100 * r + i) as f32).collect();
        let src = comm_buf(&c, &src_vals);
        c.register_window(&window).unwrap();
        c.register_window(&src).unwrap();
        c.put_signal(&src, next, &window, 4 * r as usize, 0)
            .unwrap();
        c.signal(next, 0).unwrap();
        let from = [SignalFrom {
            peer: prev,
            signal: 0,
            count: 2,
        }];
        c.wait_signal(&from, &mut window).unwrap();
        c.synchronize_timeout(Duration::from_secs(30)).unwrap();
        let got = contents(&c, &window);
        for q in 0..nu {
            let part = &got[4 * q..4 * q + 4];
            if q == prev as usize {
                let want: Vec<f32> = (0..4).map(|i| (100 * prev + i) as f32).collect();
                assert_eq!(part, want.as_slice(), "rank {r}: part of rank {q}");
            } else {
                assert_eq!(part, [-1.0; 4], "rank {r}: part {q} untouched");
            }
        }
        c.deregister_window(&src).unwrap();
        c.deregister_window(&window).unwrap();
        c.destroy().unwrap();
    });
}

#[test]
fn one_sided_misuse_is_refused_by_argument() {
    let Some(n) = gpus() else { return };
    if !has_one_sided() {
        return;
    }
    on_gpus(n, move |_, mut c| {
        let mut window = comm_buf(&c, &[0.0; 8]);
        let src = comm_buf(&c, &[1.0; 4]);
        let mut stray = comm_buf(&c, &[1.0; 4]);
        c.register_window(&window).unwrap();
        c.register_window(&src).unwrap();
        // Twice the same buffer; releasing one that is in no window.
        refused_arg(c.register_window(&window), "buf");
        refused_arg(c.deregister_window(&stray), "buf");
        // A source or a target in no window.
        refused_arg(c.put_signal(&stray, 0, &window, 0, 0), "src");
        refused_arg(c.put_signal(&src, 0, &stray, 0, 0), "window");
        let wait = |peer, signal, count| {
            [SignalFrom {
                peer,
                signal,
                count,
            }]
        };
        refused_arg(c.wait_signal(&wait(0, 0, 1), &mut stray), "window");
        // Past the window's end (4 elements at element 5 of 8), peers and signals out of range.
        refused_arg(c.put_signal(&src, 0, &window, 5, 0), "offset");
        refused_arg(c.put_signal(&src, n, &window, 0, 0), "peer");
        refused_arg(c.put_signal(&src, 0, &window, 0, 1), "signal");
        refused_arg(c.signal(n, 0), "peer");
        refused_arg(c.signal(0, u32::MAX), "signal");
        refused_arg(c.wait_signal(&[], &mut window), "waits");
        refused_arg(c.wait_signal(&wait(n, 0, 1), &mut window), "peer");
        refused_arg(c.wait_signal(&wait(0, 0, 0), &mut window), "count");
        // A released window takes no put.
        c.deregister_window(&window).unwrap();
        refused_arg(c.put_signal(&src, 0, &window, 0, 0), "window");
        // Nothing reached NCCL: the ranks are in step.
        let mut x = up(&c, &[1.0f32]);
        c.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
        c.synchronize().unwrap();
        c.destroy().unwrap();
    });
}

#[test]
fn one_sided_calls_are_refused_inside_a_capture() {
    let Some(n) = gpus() else { return };
    if !has_one_sided() {
        return;
    }
    on_gpus(n, move |_, mut c| {
        let mut window = comm_buf(&c, &[0.0; 4]);
        let src = comm_buf(&c, &[1.0; 4]);
        let other = comm_buf(&c, &[1.0; 4]);
        c.register_window(&window).unwrap();
        c.register_window(&src).unwrap();
        let mut x = up(&c, &[1.0f32]);
        c.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
        let from = [SignalFrom {
            peer: 0,
            signal: 0,
            count: 1,
        }];
        let g = c
            .capture(|c| {
                let unsupported = CaptureError::Unsupported;
                refused_capture(c.register_window(&other), unsupported);
                refused_capture(c.deregister_window(&src), unsupported);
                refused_capture(c.put_signal(&src, 0, &window, 0, 0), unsupported);
                refused_capture(c.signal(0, 0), unsupported);
                refused_capture(c.wait_signal(&from, &mut window), unsupported);
                Ok(())
            })
            .unwrap();
        assert_eq!(g.ops(), 0);
        // The windows are as they were: the source is still in one.
        c.deregister_window(&src).unwrap();
        c.deregister_window(&window).unwrap();
        c.destroy().unwrap();
    });
}

/// On a library without signals, a put, a signal and a wait name the feature; windows still
/// register.
#[test]
fn a_library_without_signals_refuses_them_by_feature() {
    let Some(n) = gpus() else { return };
    if !has_one_sided() {
        return;
    }
    let lib = nccl().without(Feature::OneSided);
    super::on_gpus_with(lib, n, move |_, mut c| {
        let mut window = comm_buf(&c, &[0.0; 4]);
        c.register_window(&window).unwrap();
        let lacks = |r: oxccl_comm::Result<()>| match r {
            Err(Error::Unsupported {
                feature: Feature::OneSided,
                ..
            }) => {}
            other => panic!("expected signals unsupported, got {other:?}"),
        };
        lacks(c.put_signal(&window, 0, &window, 0, 0));
        lacks(c.signal(0, 0));
        let from = [SignalFrom {
            peer: 0,
            signal: 0,
            count: 1,
        }];
        lacks(c.wait_signal(&from, &mut window));
        c.deregister_window(&window).unwrap();
        c.destroy().unwrap();
    });
}

//! Calls whose launch records their end (`Communicator::issue_ended`): on compute capability
//! 9.0 and up the kernels' calls of fewer than 8 blocks are launched late with their end event
//! as the launch's own, which orders another stream's copy after the call and has fired once
//! the copy is done; larger calls keep their early launch and leave the caller to record the
//! end (`gpu_peer_kernels`).

use crate::devbuf::Tally;
use cudarc::driver::{sys, DevicePtr};
use oxccl::{Comm, CommOp, Communicator, DataType, Event, NcclStream, RawBuf, RawBufMut};
use oxccl::{ReduceOp, Stream};

/// 30 in-place i32 sums back to back through `issue_ended`, at 5 elements (one block: every
/// call late where the device launches early) and 60,003 (8 blocks and more: none late), read
/// back on another stream after the last call's end where its launch recorded one; values are
/// the host's wrapping sums.
pub fn launch_ends(c: &mut Comm) -> Tally {
    let mut t = Tally::default();
    let (n, r) = (c.size(), c.rank());
    let ctx = c.stream().context().clone();
    let major = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .expect("compute capability");
    let st = NcclStream::new(c.stream().clone());
    let other = NcclStream::create(&ctx).expect("stream");
    let calls = 30;
    for count in [5usize, 60003] {
        let start_of = |q: u32| -> Vec<i32> {
            (0..count)
                .map(|i| q as i32 * 3 + (i % 5) as i32 + 1)
                .collect()
        };
        let mut want: Vec<i32> = (0..count)
            .map(|i| (0..n).map(|q| start_of(q)[i]).fold(0i32, i32::wrapping_add))
            .collect();
        for _ in 1..calls {
            want.iter_mut().for_each(|x| *x = x.wrapping_mul(n as i32));
        }
        let buf = c.stream().clone_htod(&start_of(r)).expect("upload");
        let addr = {
            let (p, _g) = buf.device_ptr(c.stream());
            p as usize
        };
        let op = CommOp::AllReduce {
            send: RawBuf::new(addr, count),
            recv: RawBufMut::new(addr, count),
            dtype: DataType::Int32,
            op: ReduceOp::Sum,
        };
        let b = c.backend();
        let (late0, numbered0) = (b.peer_kernel_late(), b.peer_kernel_numbered());
        let (mut ended, mut last) = (0u64, None);
        for _ in 0..calls {
            // SAFETY: `count` i32 of this device in `buf`, which lives to the end of this
            // loop's body, where the calls have run (read back after them); no capture is open.
            last = unsafe { b.issue_ended(&op, &st) }.expect("all_reduce");
            ended += u64::from(last.is_some());
        }
        let late = b.peer_kernel_late() - late0;
        let numbered = b.peer_kernel_numbered() - numbered0;
        let name = format!("launch-ended n={count}");
        if major >= 9 && count == 5 {
            // One block: never numbered, always late.
            assert_eq!(late, calls, "rank {r}, {name}: every call late");
        } else {
            // 8 blocks and more launch early, numbered or not (an event beside them is free).
            assert_eq!(late, 0, "rank {r}, {name}: none late");
        }
        assert_eq!(
            late, ended,
            "rank {r}, {name}: the late launches gave their ends"
        );
        assert!(
            late + numbered <= calls,
            "rank {r}, {name}: {late} + {numbered}"
        );
        let got = match &last {
            Some(end) => {
                other.wait_event(end).expect("wait");
                let got = other.cuda().clone_dtoh(&buf).expect("download");
                assert!(end.query().expect("query"), "rank {r}, {name}: fired");
                got
            }
            None => c.stream().clone_dtoh(&buf).expect("download"),
        };
        let f = |v: Vec<i32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
        t.check(&name, &f(got), &f(want), DataType::Int32);
    }
    t
}

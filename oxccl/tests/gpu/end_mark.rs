//! Calls that mark their end (`Communicator::issue_ended`): on compute capability 9.0 and up,
//! where the device waits for 64-bit values on streams, the kernels' calls of fewer than 8
//! blocks write an end mark as they end instead of an event recorded after them. Another stream
//! that waits for the last call's mark reads the right values, and the mark's event (made when
//! the host asks) has fired; larger calls leave the caller to record their end
//! (`gpu_peer_kernels`).

use crate::devbuf::Tally;
use cudarc::driver::{sys, DevicePtr};
use oxccl::{Comm, CommOp, Communicator, DataType, Event, NcclStream, RawBuf, RawBufMut};
use oxccl::{ReduceOp, Stream};

/// 30 in-place i32 sums back to back through `issue_ended`, at 5 elements (one block), 3,000
/// (two to six blocks: the last block to end writes the mark) and 60,003 (8 blocks and more:
/// none marked), read back on another stream after it waited for the last call's end; values
/// are the host's wrapping sums. The first call's end has fired too.
pub fn marked_ends(c: &mut Comm) -> Tally {
    let mut t = Tally::default();
    let (n, r) = (c.size(), c.rank());
    let ctx = c.stream().context().clone();
    let attr = |a| ctx.attribute(a).expect("device attribute");
    let marks = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) >= 9
        && attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) != 0;
    let st = NcclStream::new(c.stream().clone());
    let other = NcclStream::create(&ctx).expect("stream");
    let calls = 30;
    for count in [5usize, 3000, 60003] {
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
        let marked0 = b.peer_kernel_marked();
        let mut ends = Vec::new();
        for _ in 0..calls {
            // SAFETY: `count` i32 of this device in `buf`, which lives to the end of this
            // loop's body, where the calls have run (read back after them); no capture is open.
            let end = unsafe { b.issue_ended(&op, &st) }.expect("all_reduce");
            ends.extend(end);
        }
        let marked = b.peer_kernel_marked() - marked0;
        let name = format!("marked n={count}");
        let expected = if marks && count < 60003 { calls } else { 0 };
        assert_eq!(marked, expected, "rank {r}, {name}: calls marked");
        assert_eq!(ends.len() as u64, marked, "rank {r}, {name}: ends given");
        assert!(ends.iter().all(|e| e.is_mark()), "rank {r}, {name}");
        let got = match ends.last() {
            Some(end) => {
                other.wait_event(end).expect("wait");
                let got = other.cuda().clone_dtoh(&buf).expect("download");
                assert!(end.query().expect("query"), "rank {r}, {name}: last fired");
                assert!(
                    ends[0].query().expect("query"),
                    "rank {r}, {name}: first fired"
                );
                end.synchronize().expect("synchronize");
                got
            }
            None => c.stream().clone_dtoh(&buf).expect("download"),
        };
        let f = |v: Vec<i32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
        t.check(&name, &f(got), &f(want), DataType::Int32);
    }
    t
}

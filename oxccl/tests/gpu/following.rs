//! All-reduces of one shape issued back to back on oxccl's kernels, so that each call follows
//! the one before block by block, checked against the host's sums (`gpu_peer_kernels`).

use crate::devbuf::Tally;
use oxccl::core::peer_kernels::{KernelAlgo, LINES_PER_SLOT};
use oxccl::{Comm, DataType, ReduceOp};

/// `b` read back, as the checks take values.
fn read(c: &Comm, b: &cudarc::driver::CudaSlice<i32>) -> Vec<f64> {
    c.stream()
        .clone_dtoh(b)
        .expect("download")
        .into_iter()
        .map(f64::from)
        .collect()
}

/// All-reduces of one shape back to back under `algo` (i32 sums, each call's input the one
/// before's output): in place, with a copy that resets the buffer to the start values after
/// every 9th call and a 3-element call after every 7th; and to and fro between two buffers.
/// The calls of one shape follow one another block by block; the copy and the other call
/// between make the next call wait for all of the one before. Values: the host's wrapping
/// sums over every rank's start values.
pub fn back_to_back(c: &mut Comm, algo: KernelAlgo) -> Tally {
    let mut t = Tally::default();
    let (n, r) = (c.size(), c.rank());
    let calls = 40;
    let start_of = |q: u32, count: usize| -> Vec<i32> {
        (0..count)
            .map(|i| q as i32 * 7 + (i % 11) as i32 + 1)
            .collect()
    };
    let sum_of = |count: usize| -> Vec<i32> {
        let starts: Vec<Vec<i32>> = (0..n).map(|q| start_of(q, count)).collect();
        (0..count)
            .map(|i| starts.iter().fold(0i32, |a, s| a.wrapping_add(s[i])))
            .collect()
    };
    let times_n = |v: &mut Vec<i32>| v.iter_mut().for_each(|x| *x = x.wrapping_mul(n as i32));
    for count in [1000usize, 60000, 65536 + 3] {
        if algo == KernelAlgo::OneShot && count * 4 > (LINES_PER_SLOT * 8) as usize {
            continue;
        }
        let start = c.stream().clone_htod(&start_of(r, count)).expect("upload");
        let mut buf = c.stream().clone_htod(&start_of(r, count)).expect("upload");
        let mut small = c.stream().clone_htod(&[1i32, 2, 3]).expect("upload");
        // The host's value of every rank's buffer: one sum for all after a call.
        let mut want: Option<Vec<i32>> = None;
        for k in 0..calls {
            c.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                .expect("all_reduce");
            want = Some(match want.take() {
                None => sum_of(count),
                Some(mut v) => {
                    times_n(&mut v);
                    v
                }
            });
            if k % 9 == 4 {
                c.stream().memcpy_dtod(&start, &mut buf).expect("copy");
                want = None;
            }
            if k % 7 == 2 {
                c.all_reduce_in_place(&mut small, ReduceOp::Sum)
                    .expect("all_reduce");
            }
        }
        let want: Vec<f64> = want
            .unwrap_or_else(|| start_of(r, count))
            .into_iter()
            .map(f64::from)
            .collect();
        t.check(
            &format!("{} following in place n={count}", algo.name()),
            &read(c, &buf),
            &want,
            DataType::Int32,
        );
        let mut a = c.stream().clone_htod(&start_of(r, count)).expect("upload");
        let mut b = c.stream().alloc_zeros::<i32>(count).expect("alloc");
        for k in 0..calls {
            if k % 2 == 0 {
                c.all_reduce(&a, &mut b, ReduceOp::Sum).expect("all_reduce");
            } else {
                c.all_reduce(&b, &mut a, ReduceOp::Sum).expect("all_reduce");
            }
        }
        let mut v = sum_of(count);
        (1..calls).for_each(|_| times_n(&mut v));
        let want: Vec<f64> = v.into_iter().map(f64::from).collect();
        let last = if calls % 2 == 0 { &a } else { &b };
        t.check(
            &format!("{} following to and fro n={count}", algo.name()),
            &read(c, last),
            &want,
            DataType::Int32,
        );
    }
    t
}

/// All-reduces of one shape under `algo` with a broadcast of 4 bytes between every two (i32
/// sums, in place): the broadcast runs on NCCL, a grid the host does not number, so no call
/// can follow the one before; the kernels report it and the host numbers few launches once it
/// has seen their reports. Two rounds of 600 calls, the stream synchronized between them: the
/// first numbers the launches the host issued before the first report came back (as many as
/// the host runs ahead of the device: `FollowBackoff`), the second at most a quarter. Values:
/// the host's wrapping sums.
pub fn grids_between(c: &mut Comm, algo: KernelAlgo) -> Tally {
    let mut t = Tally::default();
    let (n, r) = (c.size(), c.rank());
    let (calls, count) = (
        600u64,
        if algo == KernelAlgo::OneShot {
            60000
        } else {
            65539
        },
    );
    let start =
        |q: u32| -> Vec<i32> { (0..count).map(|i| q as i32 * 5 + (i % 13) as i32).collect() };
    let mut buf = c.stream().clone_htod(&start(r)).expect("upload");
    let mut tiny = c.stream().clone_htod(&[r as i32]).expect("upload");
    let mut numbered = [0u64; 2];
    for round in &mut numbered {
        let before = c.backend().peer_kernel_numbered();
        for _ in 0..calls {
            c.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                .expect("all_reduce");
            c.broadcast_in_place(&mut tiny, 0).expect("broadcast");
        }
        *round = c.backend().peer_kernel_numbered() - before;
        c.stream().synchronize().expect("synchronize");
    }
    let mut want: Vec<i32> = (0..count)
        .map(|i| (0..n).fold(0i32, |a, q| a.wrapping_add(start(q)[i])))
        .collect();
    (1..2 * calls).for_each(|_| want.iter_mut().for_each(|x| *x = x.wrapping_mul(n as i32)));
    let want: Vec<f64> = want.into_iter().map(f64::from).collect();
    let name = format!("{} with a grid between calls", algo.name());
    t.check(&name, &read(c, &buf), &want, DataType::Int32);
    eprintln!(
        "{name}, rank {r}: {} then {} of {calls} launches numbered for following",
        numbered[0], numbered[1]
    );
    if numbered[1] > calls / 4 {
        t.failed.push(format!(
            "{name}: {} of {calls} launches numbered for following once the misses were seen \
             (at most a quarter)",
            numbered[1]
        ));
    } else {
        t.passed += 1;
    }
    t
}

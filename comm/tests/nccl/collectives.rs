//! Every collective and send/recv of `Comm`, in place and out of place, on several element
//! types, each result checked on every rank. Rank r's inputs are small integers derived from r,
//! so float results are exact and every rank can compute every other rank's contribution.

use super::{down, gpus, on_gpus, up, zeros};
use cudarc::driver::{CudaSlice, DeviceRepr};
use half::bf16;
use oxccl_comm::{Comm, Element, HostScalar, ReduceOp, Scalar};
use std::fmt::Debug;

/// Rank r's input of `len` elements: `(r + 1) * (i + 1)`.
fn input(r: u32, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| f64::from(r + 1) * (i + 1) as f64)
        .collect()
}

/// Element `i` of the reduction `op` over the inputs of `n` ranks.
fn reduced(op: &ReduceOp, n: u32, i: usize) -> f64 {
    let each = (0..n).map(|r| f64::from(r + 1) * (i + 1) as f64);
    match op {
        ReduceOp::Sum => each.sum::<f64>(),
        ReduceOp::Prod => each.product(),
        ReduceOp::Min => each.fold(f64::INFINITY, f64::min),
        ReduceOp::Max => each.fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(k))) => f64::from(*k) * each.sum::<f64>(),
        other => panic!("no reference for {other}"),
    }
}

/// All-reduce of `T` under `op`, out of place then in place, against `reduced` (`conv` makes a
/// `T` of a small exact value).
fn all_reduce_both_ways<T>(c: &mut Comm, op: ReduceOp, conv: impl Fn(f64) -> T)
where
    T: Element + DeviceRepr + Default + Clone + PartialEq + Debug,
{
    // Two elements for a product, so that n! 2^n stays exact in f32 and within i32.
    let len = if op == ReduceOp::Prod { 2 } else { 5 };
    let (r, n) = (c.rank(), c.size());
    let x: Vec<T> = input(r, len).into_iter().map(&conv).collect();
    let want: Vec<T> = (0..len).map(|i| conv(reduced(&op, n, i))).collect();
    let send = up(c, &x);
    let mut recv = zeros::<T>(c, len);
    c.all_reduce(&send, &mut recv, op).unwrap();
    assert_eq!(down(c, &recv), want, "{op} out of place, rank {r}");
    assert_eq!(down(c, &send), x, "{op}: send untouched, rank {r}");
    let mut buf = up(c, &x);
    c.all_reduce_in_place(&mut buf, op).unwrap();
    assert_eq!(down(c, &buf), want, "{op} in place, rank {r}");
}

#[test]
fn all_reduce_gives_each_operator_s_result_on_every_type() {
    let Some(n) = gpus() else { return };
    on_gpus(n, |_, mut c| {
        let ops = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];
        for op in ops {
            all_reduce_both_ways(&mut c, op, |v| v as f32);
            all_reduce_both_ways(&mut c, op, |v| v);
            all_reduce_both_ways(&mut c, op, |v| v as i32);
            all_reduce_both_ways(&mut c, op, |v| v as u64);
        }
        // bf16 holds the integers of a sum, min or max of a few ranks exactly.
        for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
            all_reduce_both_ways(&mut c, op, bf16::from_f64);
        }
        let twice = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(2.0)));
        all_reduce_both_ways(&mut c, twice, |v| v as f32);
        c.destroy().unwrap();
    });
}

/// Avg is a premul-sum by 1/n (exact for n a power of two, within an ulp otherwise).
#[test]
fn all_reduce_avg_is_the_mean_of_the_ranks() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let x = up(&c, &[f64::from(r + 1), -2.0 * f64::from(r + 1)]);
        let mut mean = zeros::<f64>(&c, 2);
        c.all_reduce(&x, &mut mean, ReduceOp::Avg).unwrap();
        let want = f64::from(n + 1) / 2.0;
        let got = down(&c, &mean);
        assert!((got[0] - want).abs() < 1e-12, "{got:?}");
        assert!((got[1] + 2.0 * want).abs() < 1e-12, "{got:?}");
        c.destroy().unwrap();
    });
}

/// bool travels as uint8 with sum as logical or and prod as logical and (the Element rules).
#[test]
fn all_reduce_of_bools_is_or_for_sum_and_and_for_prod() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        // Element 0 true on rank 0 only; element 1 true everywhere; element 2 nowhere.
        let x = [r == 0, true, false];
        let send = up(&c, &x);
        let mut or = zeros::<bool>(&c, 3);
        c.all_reduce(&send, &mut or, ReduceOp::Sum).unwrap();
        assert_eq!(down(&c, &or), [true, true, false]);
        let mut and = zeros::<bool>(&c, 3);
        c.all_reduce(&send, &mut and, ReduceOp::Prod).unwrap();
        assert_eq!(down(&c, &and), [n == 1, true, false]);
        c.destroy().unwrap();
    });
}

#[test]
fn premul_sum_reads_a_device_factor_when_it_runs() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let send = up(&c, &[r as f32 + 1.0; 4]);
        let mut factor = up(&c, &[3.0f32]);
        let mut recv = zeros::<f32>(&c, 4);
        c.all_reduce_premul_device(&send, &mut recv, &factor)
            .unwrap();
        let sum = (n * (n + 1) / 2) as f32;
        assert_eq!(down(&c, &recv), [3.0 * sum; 4]);
        // The factor is read at run time: a new value in the same buffer takes effect.
        c.stream().memcpy_htod(&[0.5f32], &mut factor).unwrap();
        c.all_reduce_premul_device(&send, &mut recv, &factor)
            .unwrap();
        assert_eq!(down(&c, &recv), [0.5 * sum; 4]);
        c.destroy().unwrap();
    });
}

#[test]
fn broadcast_and_reduce_reach_and_leave_their_root() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let root = n - 1;
        let mine: Vec<i64> = (0..6).map(|i| i64::from(r) * 100 + i).collect();
        let root_s: Vec<i64> = (0..6).map(|i| i64::from(root) * 100 + i).collect();
        let send = up(&c, &mine);
        let mut recv = zeros::<i64>(&c, 6);
        c.broadcast(&send, &mut recv, root).unwrap();
        assert_eq!(down(&c, &recv), root_s, "broadcast, rank {r}");
        let mut buf = up(&c, &mine);
        c.broadcast_in_place(&mut buf, root).unwrap();
        assert_eq!(down(&c, &buf), root_s, "broadcast in place, rank {r}");

        // Reduce to rank 0: off the root `recv` may be absent.
        let x = up(&c, &[r as f32 + 1.0, 2.0 * (r as f32 + 1.0)]);
        let sum = (n * (n + 1) / 2) as f32;
        if r == 0 {
            let mut out = zeros::<f32>(&c, 2);
            c.reduce(&x, Some(&mut out), ReduceOp::Sum, 0).unwrap();
            assert_eq!(down(&c, &out), [sum, 2.0 * sum]);
        } else {
            c.reduce::<f32, CudaSlice<f32>>(&x, None, ReduceOp::Sum, 0)
                .unwrap();
            c.synchronize().unwrap();
        }
        c.destroy().unwrap();
    });
}

#[test]
fn all_gather_and_reduce_scatter_place_each_rank_s_part() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let nu = n as usize;
        let part: Vec<u8> = vec![r as u8 + 10; 3];
        let send = up(&c, &part);
        let mut all = zeros::<u8>(&c, 3 * nu);
        c.all_gather(&send, &mut all).unwrap();
        let want: Vec<u8> = (0..n).flat_map(|q| [q as u8 + 10; 3]).collect();
        assert_eq!(down(&c, &all), want, "all_gather, rank {r}");

        // Reduce-scatter: rank r's element j of the whole is (r + 1) * (j + 1).
        let whole: Vec<f32> = (0..3 * nu)
            .map(|j| (r + 1) as f32 * (j + 1) as f32)
            .collect();
        let send = up(&c, &whole);
        let mut mine = zeros::<f32>(&c, 3);
        c.reduce_scatter(&send, &mut mine, ReduceOp::Max).unwrap();
        let want: Vec<f32> = (0..3)
            .map(|i| n as f32 * (r as usize * 3 + i + 1) as f32)
            .collect();
        assert_eq!(down(&c, &mine), want, "reduce_scatter max, rank {r}");
        c.destroy().unwrap();
    });
}

#[test]
fn all_to_all_even_and_uneven_route_part_p_to_rank_p() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let nu = n as usize;
        // Even: part p (2 elements) of rank r holds 100 r + p.
        let send: Vec<i32> = (0..n).flat_map(|p| [(100 * r + p) as i32; 2]).collect();
        let s = up(&c, &send);
        let mut recv = zeros::<i32>(&c, 2 * nu);
        c.all_to_all(&s, &mut recv).unwrap();
        let want: Vec<i32> = (0..n).flat_map(|q| [(100 * q + r) as i32; 2]).collect();
        assert_eq!(down(&c, &recv), want, "all_to_all, rank {r}");

        // Uneven: rank r sends p + 1 elements to rank p, so receives r + 1 from each.
        let send_counts: Vec<usize> = (0..nu).map(|p| p + 1).collect();
        let recv_counts = vec![r as usize + 1; nu];
        let send: Vec<i32> = (0..n)
            .flat_map(|p| vec![(100 * r + p) as i32; p as usize + 1])
            .collect();
        let s = up(&c, &send);
        let mut recv = zeros::<i32>(&c, recv_counts.iter().sum());
        c.all_to_all_v(&s, &mut recv, &send_counts, &recv_counts)
            .unwrap();
        let want: Vec<i32> = (0..n)
            .flat_map(|q| vec![(100 * q + r) as i32; r as usize + 1])
            .collect();
        assert_eq!(down(&c, &recv), want, "all_to_all_v, rank {r}");
        c.destroy().unwrap();
    });
}

#[test]
fn gather_and_scatter_go_through_the_root_only() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let (nu, root) = (n as usize, n / 2);
        let mine = up(&c, &[f64::from(r) + 0.5; 2]);
        if r == root {
            let mut all = zeros::<f64>(&c, 2 * nu);
            c.gather(&mine, Some(&mut all), root).unwrap();
            let want: Vec<f64> = (0..n).flat_map(|q| [f64::from(q) + 0.5; 2]).collect();
            assert_eq!(down(&c, &all), want);
        } else {
            c.gather::<f64, CudaSlice<f64>>(&mine, None, root).unwrap();
        }
        let mut got = zeros::<f64>(&c, 2);
        if r == root {
            let parts: Vec<f64> = (0..n).flat_map(|q| [f64::from(q) * 7.0; 2]).collect();
            let send = up(&c, &parts);
            c.scatter(Some(&send), &mut got, root).unwrap();
        } else {
            c.scatter::<f64, CudaSlice<f64>>(None, &mut got, root)
                .unwrap();
        }
        assert_eq!(down(&c, &got), [f64::from(r) * 7.0; 2], "scatter, rank {r}");
        c.destroy().unwrap();
    });
}

#[test]
fn the_v_variants_take_one_count_per_rank() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        // Rank q contributes q + 1 elements.
        let counts: Vec<usize> = (0..n as usize).map(|q| q + 1).collect();
        let total: usize = counts.iter().sum();
        let mine = up(&c, &vec![r as i64 + 1; r as usize + 1]);
        let mut all = zeros::<i64>(&c, total);
        c.all_gather_v(&mine, &mut all, &counts).unwrap();
        let want: Vec<i64> = (0..n)
            .flat_map(|q| vec![q as i64 + 1; q as usize + 1])
            .collect();
        assert_eq!(down(&c, &all), want, "all_gather_v, rank {r}");

        // Reduce-scatter-v of all ones: each rank keeps its q + 1 sums of n.
        let ones = up(&c, &vec![1i64; total]);
        let mut part = zeros::<i64>(&c, r as usize + 1);
        c.reduce_scatter_v(&ones, &mut part, ReduceOp::Sum, &counts)
            .unwrap();
        assert_eq!(down(&c, &part), vec![i64::from(n); r as usize + 1]);
        c.destroy().unwrap();
    });
}

/// A ring: each rank sends to the next and receives from the previous, in one group (with one
/// GPU the rank sends to itself, which NCCL allows inside a group).
#[test]
fn send_and_recv_in_a_group_pass_a_ring() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let out = up(&c, &[r * 11; 4]);
        let mut inb = zeros::<u32>(&c, 4);
        let mut g = c.group().unwrap();
        g.send(&out, next).unwrap();
        g.recv(&mut inb, prev).unwrap();
        g.end().unwrap();
        assert_eq!(down(&c, &inb), [prev * 11; 4], "rank {r}");
        c.barrier().unwrap();
        c.destroy().unwrap();
    });
}

/// Empty buffers are legal everywhere and change nothing.
#[test]
fn empty_operations_succeed_and_write_nothing() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let empty = zeros::<f32>(&c, 0);
        let mut out = zeros::<f32>(&c, 0);
        c.all_reduce(&empty, &mut out, ReduceOp::Sum).unwrap();
        c.all_gather(&empty, &mut out).unwrap();
        c.broadcast(&empty, &mut out, 0).unwrap();
        let mut guard = up(&c, &[9.0f32]);
        c.broadcast_in_place(&mut guard, 0).unwrap();
        assert_eq!(down(&c, &guard), [9.0]);
        c.destroy().unwrap();
    });
}

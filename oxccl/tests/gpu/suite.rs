//! Every operation × type × reduction × count, in place and out of place, checked against the
//! host reference of `values.rs`. Run by each rank, in a thread or in a process of its own.

use super::devbuf::{run, DevBuf, Tally};
use super::typed::typed;
use super::values::{input, reduced, reduces};
use oxccl::{Comm, CommOp, DataType, HostScalar, ReduceOp, Scalar};

/// Element counts every case runs with: empty, one, odd, and a few KiB.
pub const COUNTS: [usize; 4] = [0, 1, 7, 1031];

fn host_factor(dt: DataType) -> Option<HostScalar> {
    Some(match dt {
        DataType::Float16 => HostScalar::F16(half::f16::from_f64(2.0).to_bits()),
        DataType::Bfloat16 => HostScalar::Bf16(half::bf16::from_f64(2.0).to_bits()),
        DataType::Float32 => HostScalar::F32(2.0),
        DataType::Float64 => HostScalar::F64(2.0),
        _ => return None,
    })
}

/// The reductions that apply to `dt`, premul-sum with a host and a device factor included.
fn ops(c: &Comm, dt: DataType) -> (Vec<ReduceOp>, Option<DevBuf>) {
    let mut v = ReduceOp::BUILTIN.to_vec();
    if c.size() == 1 && dt.is_fp8() {
        // NCCL has no single-rank fp8 avg; the core check refuses it (tested on the mock).
        v.retain(|o| !matches!(o, ReduceOp::Avg));
    }
    let mut dev = None;
    if let Some(h) = host_factor(dt) {
        v.push(ReduceOp::PreMulSum(Scalar::Host(h)));
        let d = DevBuf::new(c, dt, &[2.0]);
        v.push(ReduceOp::PreMulSum(Scalar::Device { addr: d.addr }));
        dev = Some(d);
    }
    (v, dev)
}

fn factor(op: &ReduceOp) -> f64 {
    if matches!(op, ReduceOp::PreMulSum(_)) {
        2.0
    } else {
        1.0
    }
}

/// Runs every case on this rank; ranks must call it together.
pub fn run_all(c: &mut Comm) -> Tally {
    let mut t = Tally::default();
    let (n, r) = (c.size(), c.rank());
    let nu = n as usize;
    let fs = *oxccl::core::Communicator::features(c.backend());
    for dt in DataType::ALL {
        // Every type moves; fp8 reduces from 2.24.3 only (refused before, tested on the mock).
        let (mut reduce_ops, _factor_buf) = ops(c, dt);
        if !reduces(&fs, dt) {
            reduce_ops.clear();
        }
        for &count in &COUNTS {
            for op in &reduce_ops {
                let send_vals: Vec<f64> = (0..count).map(|i| input(Some(op), r, i)).collect();
                let want: Vec<f64> = (0..count)
                    .map(|i| reduced(dt, op, n, i, factor(op)))
                    .collect();
                for in_place in [false, true] {
                    let name = format!("all_reduce {dt} {op} n={count} in_place={in_place}");
                    let send = DevBuf::new(c, dt, &send_vals);
                    let out = if in_place {
                        None
                    } else {
                        Some(DevBuf::zeros(c, dt, count))
                    };
                    let recv = out.as_ref().unwrap_or(&send);
                    if run(
                        c,
                        &mut t,
                        &name,
                        CommOp::AllReduce {
                            send: send.r(),
                            recv: recv.w(),
                            dtype: dt,
                            op: *op,
                        },
                    ) {
                        t.check(&name, &recv.read(c, dt), &want, dt);
                    }
                }
                // reduce to the last rank
                let root = n - 1;
                let name = format!("reduce {dt} {op} n={count}");
                let send = DevBuf::new(c, dt, &send_vals);
                let recv = if r == root {
                    DevBuf::zeros(c, dt, count)
                } else {
                    DevBuf::zeros(c, dt, 0)
                };
                if run(
                    c,
                    &mut t,
                    &name,
                    CommOp::Reduce {
                        send: send.r(),
                        recv: recv.w(),
                        dtype: dt,
                        op: *op,
                        root,
                    },
                ) && r == root
                {
                    t.check(&name, &recv.read(c, dt), &want, dt);
                }
                // reduce_scatter: rank r keeps part r of the reduction of n parts
                for in_place in [false, true] {
                    let name = format!("reduce_scatter {dt} {op} n={count} in_place={in_place}");
                    let whole: Vec<f64> = (0..count * nu).map(|j| input(Some(op), r, j)).collect();
                    let want: Vec<f64> = (0..count)
                        .map(|i| reduced(dt, op, n, r as usize * count + i, factor(op)))
                        .collect();
                    let send = DevBuf::new(c, dt, &whole);
                    let out = DevBuf::zeros(c, dt, if in_place { 0 } else { count });
                    let recv = if in_place {
                        send.part(dt, r as usize * count, count)
                    } else {
                        out.w()
                    };
                    if run(
                        c,
                        &mut t,
                        &name,
                        CommOp::ReduceScatter {
                            send: send.r(),
                            recv,
                            dtype: dt,
                            op: *op,
                        },
                    ) {
                        let got = if in_place {
                            send.read(c, dt)[r as usize * count..(r as usize + 1) * count].to_vec()
                        } else {
                            out.read(c, dt)
                        };
                        t.check(&name, &got, &want, dt);
                    }
                }
            }
            moves(c, &mut t, dt, count);
        }
    }
    // point-to-point ring inside a group, and a barrier
    for &count in &COUNTS {
        let dt = DataType::Float32;
        let name = format!("send/recv ring n={count}");
        let next = (r + 1) % n;
        let prev = (r + n - 1) % n;
        let send = DevBuf::new(
            c,
            dt,
            &(0..count)
                .map(|i| (r as usize * 10 + i) as f64)
                .collect::<Vec<_>>(),
        );
        let recv = DevBuf::zeros(c, dt, count);
        let mut g = c.group().expect("group");
        // SAFETY: DevBufs of this device alive until read back.
        let a = unsafe {
            g.issue(&CommOp::Send {
                buf: send.r(),
                dtype: dt,
                peer: next,
            })
        };
        // SAFETY: as above.
        let b = unsafe {
            g.issue(&CommOp::Recv {
                buf: recv.w(),
                dtype: dt,
                peer: prev,
            })
        };
        let e = g.end();
        match a.and(b).and(e).and_then(|_| c.synchronize()) {
            Ok(()) => t.check(
                &name,
                &recv.read(c, dt),
                &(0..count)
                    .map(|i| (prev as usize * 10 + i) as f64)
                    .collect::<Vec<_>>(),
                dt,
            ),
            Err(e) => t.error(&name, e),
        }
    }
    match c.barrier() {
        Ok(()) => t.passed += 1,
        Err(e) => t.error("barrier", e),
    }
    typed(c, &mut t);
    t
}

/// Every operation once at `count` elements (64 Mi in the large test): float32 sum for the
/// reductions, every data-movement collective, send/recv.
pub fn run_large(c: &mut Comm, count: usize) -> Tally {
    let mut t = Tally::default();
    let (n, r) = (c.size(), c.rank());
    let nu = n as usize;
    let dt = DataType::Float32;
    let op = ReduceOp::Sum;
    let send_vals: Vec<f64> = (0..count).map(|i| input(Some(&op), r, i)).collect();
    let want: Vec<f64> = (0..count).map(|i| reduced(dt, &op, n, i, 1.0)).collect();
    let send = DevBuf::new(c, dt, &send_vals);
    let recv = DevBuf::zeros(c, dt, count);
    if run(
        c,
        &mut t,
        "large all_reduce",
        CommOp::AllReduce {
            send: send.r(),
            recv: recv.w(),
            dtype: dt,
            op,
        },
    ) {
        t.check("large all_reduce", &recv.read(c, dt), &want, dt);
    }
    let root = n - 1;
    let out = DevBuf::zeros(c, dt, if r == root { count } else { 0 });
    if run(
        c,
        &mut t,
        "large reduce",
        CommOp::Reduce {
            send: send.r(),
            recv: out.w(),
            dtype: dt,
            op,
            root,
        },
    ) && r == root
    {
        t.check("large reduce", &out.read(c, dt), &want, dt);
    }
    drop((send, recv, out));
    let whole = DevBuf::new(
        c,
        dt,
        &(0..count * nu)
            .map(|j| input(Some(&op), r, j))
            .collect::<Vec<_>>(),
    );
    let part = DevBuf::zeros(c, dt, count);
    if run(
        c,
        &mut t,
        "large reduce_scatter",
        CommOp::ReduceScatter {
            send: whole.r(),
            recv: part.w(),
            dtype: dt,
            op,
        },
    ) {
        let want: Vec<f64> = (0..count)
            .map(|i| reduced(dt, &op, n, r as usize * count + i, 1.0))
            .collect();
        t.check("large reduce_scatter", &part.read(c, dt), &want, dt);
    }
    drop((whole, part));
    moves(c, &mut t, dt, count);
    t
}

/// Data-movement collectives (no reduction) for one type and count.
fn moves(c: &mut Comm, t: &mut Tally, dt: DataType, count: usize) {
    let (n, r) = (c.size(), c.rank());
    let nu = n as usize;
    let v = |src: u32, dst: u32, i: usize| ((src as usize * 3 + dst as usize + i) % 5) as f64;
    // broadcast from the first and the last rank, in and out of place
    for root in [0, n - 1] {
        for in_place in [false, true] {
            let name = format!("broadcast {dt} root={root} n={count} in_place={in_place}");
            let data: Vec<f64> = (0..count).map(|i| v(root, 0, i) + 1.0).collect();
            let mine: Vec<f64> = if r == root {
                data.clone()
            } else {
                vec![0.0; count]
            };
            let send = DevBuf::new(c, dt, &mine);
            let out = if in_place {
                None
            } else {
                Some(DevBuf::zeros(c, dt, count))
            };
            let recv = out.as_ref().unwrap_or(&send);
            if run(
                c,
                t,
                &name,
                CommOp::Broadcast {
                    send: send.r(),
                    recv: recv.w(),
                    dtype: dt,
                    root,
                },
            ) {
                t.check(&name, &recv.read(c, dt), &data, dt);
            }
        }
    }
    // all_gather, in place = send is part `rank` of recv
    for in_place in [false, true] {
        let name = format!("all_gather {dt} n={count} in_place={in_place}");
        let want: Vec<f64> = (0..nu * count)
            .map(|j| v((j / count.max(1)) as u32, 0, j % count.max(1)))
            .collect();
        let mine: Vec<f64> = (0..count).map(|i| v(r, 0, i)).collect();
        let (send, recv);
        if in_place {
            let mut whole = vec![0.0; nu * count];
            whole[r as usize * count..(r as usize + 1) * count].copy_from_slice(&mine);
            recv = DevBuf::new(c, dt, &whole);
            send = recv.part(dt, r as usize * count, count).as_read();
            if run(
                c,
                t,
                &name,
                CommOp::AllGather {
                    send,
                    recv: recv.w(),
                    dtype: dt,
                },
            ) {
                t.check(&name, &recv.read(c, dt), &want, dt);
            }
        } else {
            let s = DevBuf::new(c, dt, &mine);
            let rv = DevBuf::zeros(c, dt, nu * count);
            if run(
                c,
                t,
                &name,
                CommOp::AllGather {
                    send: s.r(),
                    recv: rv.w(),
                    dtype: dt,
                },
            ) {
                t.check(&name, &rv.read(c, dt), &want, dt);
            }
        }
    }
    // all_to_all (equal parts)
    {
        let name = format!("all_to_all {dt} n={count}");
        let send = DevBuf::new(
            c,
            dt,
            &(0..nu * count)
                .map(|j| v(r, (j / count.max(1)) as u32, j % count.max(1)))
                .collect::<Vec<_>>(),
        );
        let recv = DevBuf::zeros(c, dt, nu * count);
        let want: Vec<f64> = (0..nu * count)
            .map(|j| v((j / count.max(1)) as u32, r, j % count.max(1)))
            .collect();
        if run(
            c,
            t,
            &name,
            CommOp::AllToAll {
                send: send.r(),
                recv: recv.w(),
                dtype: dt,
            },
        ) {
            t.check(&name, &recv.read(c, dt), &want, dt);
        }
    }
    // all_to_all_v (uneven parts: cnt(src, dst) elements go from src to dst)
    {
        let name = format!("all_to_all_v {dt} n={count}");
        let cnt = |src: u32, dst: u32| (src as usize + 2 * dst as usize + count) % 4;
        let send_counts: Vec<usize> = (0..n).map(|p| cnt(r, p)).collect();
        let recv_counts: Vec<usize> = (0..n).map(|q| cnt(q, r)).collect();
        let sendv: Vec<f64> = (0..n)
            .flat_map(|p| (0..cnt(r, p)).map(move |i| v(r, p, i)))
            .collect();
        let want: Vec<f64> = (0..n)
            .flat_map(|q| (0..cnt(q, r)).map(move |i| v(q, r, i)))
            .collect();
        let send = DevBuf::new(c, dt, &sendv);
        let recv = DevBuf::zeros(c, dt, want.len());
        if run(
            c,
            t,
            &name,
            CommOp::AllToAllV {
                send: send.r(),
                recv: recv.w(),
                dtype: dt,
                send_counts: &send_counts,
                recv_counts: &recv_counts,
            },
        ) {
            t.check(&name, &recv.read(c, dt), &want, dt);
        }
    }
    // gather to the last rank, scatter from the first
    {
        let root = n - 1;
        let name = format!("gather {dt} n={count}");
        let send = DevBuf::new(
            c,
            dt,
            &(0..count).map(|i| v(r, root, i)).collect::<Vec<_>>(),
        );
        let recv = DevBuf::zeros(c, dt, if r == root { nu * count } else { 0 });
        if run(
            c,
            t,
            &name,
            CommOp::Gather {
                send: send.r(),
                recv: recv.w(),
                dtype: dt,
                root,
            },
        ) && r == root
        {
            let want: Vec<f64> = (0..nu * count)
                .map(|j| v((j / count.max(1)) as u32, root, j % count.max(1)))
                .collect();
            t.check(&name, &recv.read(c, dt), &want, dt);
        }
        let root = 0;
        let name = format!("scatter {dt} n={count}");
        let whole: Vec<f64> = if r == root {
            (0..nu * count)
                .map(|j| v(root, (j / count.max(1)) as u32, j % count.max(1)))
                .collect()
        } else {
            Vec::new()
        };
        let send = DevBuf::new(c, dt, &whole);
        let recv = DevBuf::zeros(c, dt, count);
        if run(
            c,
            t,
            &name,
            CommOp::Scatter {
                send: send.r(),
                recv: recv.w(),
                dtype: dt,
                root,
            },
        ) {
            t.check(
                &name,
                &recv.read(c, dt),
                &(0..count).map(|i| v(root, r, i)).collect::<Vec<_>>(),
                dt,
            );
        }
    }
    // all_gather_v and reduce_scatter_v with uneven parts
    {
        let counts: Vec<usize> = (0..n).map(|q| (q as usize + count) % 4).collect();
        let name = format!("all_gather_v {dt} n={count}");
        let send = DevBuf::new(
            c,
            dt,
            &(0..counts[r as usize])
                .map(|i| v(r, 1, i))
                .collect::<Vec<_>>(),
        );
        let want: Vec<f64> = (0..n)
            .flat_map(|q| (0..counts[q as usize]).map(move |i| v(q, 1, i)))
            .collect();
        let recv = DevBuf::zeros(c, dt, want.len());
        if run(
            c,
            t,
            &name,
            CommOp::AllGatherV {
                send: send.r(),
                recv: recv.w(),
                dtype: dt,
                counts: &counts,
            },
        ) {
            t.check(&name, &recv.read(c, dt), &want, dt);
        }
        let name = format!("reduce_scatter_v {dt} n={count}");
        let total: usize = counts.iter().sum();
        let op = ReduceOp::Sum;
        let send = DevBuf::new(
            c,
            dt,
            &(0..total)
                .map(|j| input(Some(&op), r, j))
                .collect::<Vec<_>>(),
        );
        let off: usize = counts[..r as usize].iter().sum();
        let recv = DevBuf::zeros(c, dt, counts[r as usize]);
        if run(
            c,
            t,
            &name,
            CommOp::ReduceScatterV {
                send: send.r(),
                recv: recv.w(),
                dtype: dt,
                op,
                counts: &counts,
            },
        ) {
            let want: Vec<f64> = (0..counts[r as usize])
                .map(|i| reduced(dt, &op, n, off + i, 1.0))
                .collect();
            t.check(&name, &recv.read(c, dt), &want, dt);
        }
    }
}

//! Every collective × every dtype × every applicable reduction × world sizes 1, 2, 3, 4, 8 ×
//! lengths 0, 1, 7, 33, in place and out of place where the op allows, against a host reference;
//! and on a mock of NCCL 2.23.4, where fp8 moves but does not reduce.

mod common;

use common::*;
use half::{bf16, f16};
use oxccl_core::{
    CommOp, Communicator, DataType, Feature, HostScalar, OpKind, Progress, RawBuf, RawBufMut,
    ReduceOp, Scalar, Stream, Version,
};
use oxccl_mock::World;

const LENS: [usize; 4] = [0, 1, 7, 33];
const SENTINEL: u8 = 0xAB;

#[derive(Debug, Clone, Copy)]
enum RedCase {
    Builtin(ReduceOp),
    PreMulHost,
    PreMulDevice,
}

fn reductions(dt: DataType) -> Vec<RedCase> {
    let mut v: Vec<RedCase> = ReduceOp::BUILTIN
        .iter()
        .map(|o| RedCase::Builtin(*o))
        .collect();
    if matches!(
        dt,
        DataType::Float16 | DataType::Bfloat16 | DataType::Float32 | DataType::Float64
    ) {
        v.push(RedCase::PreMulHost);
        v.push(RedCase::PreMulDevice);
    }
    v
}

/// Rank `r`'s premul factor as a value of `dt`.
fn factor(dt: DataType, r: usize) -> f64 {
    rnd(dt, 0.5 + r as f64 * 0.25)
}

fn host_scalar(dt: DataType, v: f64) -> HostScalar {
    match dt {
        DataType::Float16 => HostScalar::F16(f16::from_f64(v).to_bits()),
        DataType::Bfloat16 => HostScalar::Bf16(bf16::from_f64(v).to_bits()),
        DataType::Float32 => HostScalar::F32(v as f32),
        _ => HostScalar::F64(v),
    }
}

fn ref_red(rc: RedCase) -> RefRed {
    match rc {
        RedCase::Builtin(ReduceOp::Sum) => RefRed::Sum,
        RedCase::Builtin(ReduceOp::Prod) => RefRed::Prod,
        RedCase::Builtin(ReduceOp::Min) => RefRed::Min,
        RedCase::Builtin(ReduceOp::Max) => RefRed::Max,
        RedCase::Builtin(ReduceOp::Avg) => RefRed::Avg,
        _ => RefRed::PreMul,
    }
}

/// Uneven part lengths for the v-collectives (zeros included).
fn vcounts(n: usize, len: usize) -> Vec<usize> {
    (0..n).map(|r| (len + 2 * r) % 5 + len / 4).collect()
}

/// Elements rank p sends rank q in all_to_all_v.
fn a2av(p: usize, q: usize, len: usize) -> usize {
    (p * 3 + q * 5 + len) % 4 + len / 4
}

fn offsets(c: &[usize]) -> Vec<usize> {
    let mut o = vec![0; c.len()];
    for i in 1..c.len() {
        o[i] = o[i - 1] + c[i - 1];
    }
    o
}

/// One rank's run of every case; the same list on every rank keeps the sequences matched.
fn run_rank(comm: oxccl_mock::MockComm) -> usize {
    let n = comm.size() as usize;
    let me = comm.rank() as usize;
    let s = stream();
    let kinds = [
        OpKind::AllReduce,
        OpKind::Reduce,
        OpKind::ReduceScatter,
        OpKind::ReduceScatterV,
        OpKind::Broadcast,
        OpKind::AllGather,
        OpKind::AllGatherV,
        OpKind::AllToAll,
        OpKind::AllToAllV,
        OpKind::Gather,
        OpKind::Scatter,
        OpKind::Barrier,
    ];
    let mut cases = 0;
    let mut salt = 0usize;
    for kind in kinds {
        for dt in DataType::ALL {
            let reducing = matches!(
                kind,
                OpKind::AllReduce | OpKind::Reduce | OpKind::ReduceScatter | OpKind::ReduceScatterV
            );
            if reducing && dt.is_fp8() && !comm.features().has(Feature::Float8) {
                // Before NCCL 2.24.3 fp8 moves (as uint8) but does not reduce.
                refused_fp8_reduction(&comm, &s, n, kind, dt);
                cases += 1;
                continue;
            }
            let reds: Vec<Option<RedCase>> = if reducing {
                reductions(dt)
                    .into_iter()
                    // One rank has no fp8 avg (NCCL's rule, refused by the core check).
                    .filter(|rc| {
                        !(n == 1 && dt.is_fp8() && matches!(rc, RedCase::Builtin(ReduceOp::Avg)))
                    })
                    .map(Some)
                    .collect()
            } else {
                vec![None]
            };
            for rc in reds {
                for len in LENS {
                    let places: &[bool] = match kind {
                        OpKind::AllReduce
                        | OpKind::Reduce
                        | OpKind::ReduceScatter
                        | OpKind::Broadcast
                        | OpKind::AllGather => &[false, true],
                        _ => &[false],
                    };
                    for &in_place in places {
                        salt += 1;
                        one_case(&comm, &s, n, me, kind, dt, rc, len, in_place, salt);
                        cases += 1;
                    }
                }
            }
            if kind == OpKind::Barrier {
                break;
            }
        }
    }
    cases
}

/// A reduction of fp8 on a library without fp8: refused as Unsupported naming Float8 and
/// 2.24.3, before anything is written.
fn refused_fp8_reduction(
    comm: &oxccl_mock::MockComm,
    s: &oxccl_mock::MockStream,
    n: usize,
    kind: OpKind,
    dt: DataType,
) {
    let mut send = Buf::filled(2 * n, 0x38);
    let mut recv = Buf::filled(2 * n, SENTINEL);
    let counts = vec![2; n];
    let (sb, op) = (send.rd(dt), ReduceOp::Sum);
    let cop = match kind {
        OpKind::AllReduce => CommOp::AllReduce {
            send: sb,
            recv: recv.wr(dt),
            dtype: dt,
            op,
        },
        OpKind::Reduce => CommOp::Reduce {
            send: sb,
            recv: recv.wr(dt),
            dtype: dt,
            op,
            root: 0,
        },
        OpKind::ReduceScatter => CommOp::ReduceScatter {
            send: sb,
            recv: recv.wr_at(dt, 0, 2),
            dtype: dt,
            op,
        },
        _ => CommOp::ReduceScatterV {
            send: sb,
            recv: recv.wr_at(dt, 0, 2),
            dtype: dt,
            op,
            counts: &counts,
        },
    };
    // SAFETY: refused before it runs (and the buffers outlive the call).
    let e = unsafe { comm.issue(&cop, s) }.expect_err("fp8 reduction before 2.24.3");
    assert!(
        matches!(
            e,
            oxccl_core::Error::Unsupported {
                feature: Feature::Float8,
                ..
            }
        ) && e.to_string().contains("2.24.3"),
        "{kind} {dt}: {e:?}"
    );
    assert!(recv.bytes().iter().all(|b| *b == SENTINEL), "{kind} {dt}");
    let _ = send.bytes_mut();
}

#[allow(clippy::too_many_arguments)]
fn one_case(
    comm: &oxccl_mock::MockComm,
    s: &oxccl_mock::MockStream,
    n: usize,
    me: usize,
    kind: OpKind,
    dt: DataType,
    rc: Option<RedCase>,
    len: usize,
    in_place: bool,
    salt: usize,
) {
    let es = dt.size();
    let root = salt % n;
    let ctx =
        format!("{kind} {dt} {rc:?} len {len} in_place {in_place} n {n} rank {me} root {root}");
    // Each rank's input length by kind.
    let counts = vcounts(n, len);
    let in_len = |r: usize| match kind {
        OpKind::ReduceScatter | OpKind::AllToAll => n * len,
        OpKind::ReduceScatterV => counts.iter().sum(),
        OpKind::AllGatherV => counts[r],
        OpKind::AllToAllV => (0..n).map(|q| a2av(r, q, len)).sum(),
        OpKind::Scatter => n * len,
        _ => len,
    };
    let ins: Vec<Vec<u8>> = (0..n).map(|r| input(dt, r, in_len(r), salt)).collect();
    let mine = &ins[me];
    let mut dev_factor = Buf::from_bytes(&enc_f_or_empty(dt, rc, me));
    let op = match rc {
        Some(RedCase::Builtin(o)) => o,
        Some(RedCase::PreMulHost) => {
            ReduceOp::PreMulSum(Scalar::Host(host_scalar(dt, factor(dt, me))))
        }
        Some(RedCase::PreMulDevice) => ReduceOp::PreMulSum(Scalar::Device {
            addr: dev_factor.addr(),
        }),
        None => ReduceOp::Sum,
    };
    let _ = dev_factor.bytes_mut();
    let out_len = match kind {
        OpKind::AllGather => n * len,
        OpKind::AllGatherV => counts.iter().sum(),
        OpKind::ReduceScatterV => counts[me],
        OpKind::AllToAll => n * len,
        OpKind::AllToAllV => (0..n).map(|p| a2av(p, me, len)).sum(),
        OpKind::Gather if me == root => n * len,
        OpKind::Gather => 0,
        _ => len,
    };
    let mut send = Buf::from_bytes(mine);
    let mut recv = Buf::filled(out_len * es, SENTINEL);
    // In place: the input lives inside the output (or the output inside the input).
    if in_place {
        match kind {
            OpKind::AllGather => {
                recv.bytes_mut()[me * len * es..(me + 1) * len * es].copy_from_slice(mine)
            }
            OpKind::ReduceScatter => {}
            _ => recv.bytes_mut().copy_from_slice(mine),
        }
    }
    let send_counts: Vec<usize> = (0..n).map(|q| a2av(me, q, len)).collect();
    let recv_counts: Vec<usize> = (0..n).map(|p| a2av(p, me, len)).collect();
    let (sb, rb): (RawBuf, RawBufMut) = match (kind, in_place) {
        (OpKind::AllGather, true) => {
            let r = recv.wr(dt);
            (recv.rd_at(dt, me * len, len), r)
        }
        (OpKind::ReduceScatter, true) => (send.rd(dt), send.wr_at(dt, me * len, len)),
        (_, true) => {
            let r = recv.wr(dt);
            (r.as_read(), r)
        }
        (OpKind::Broadcast, false) if me != root => (RawBuf::EMPTY, recv.wr(dt)),
        (OpKind::Scatter, false) if me != root => (RawBuf::EMPTY, recv.wr(dt)),
        _ => (send.rd(dt), recv.wr(dt)),
    };
    let cop = match kind {
        OpKind::AllReduce => CommOp::AllReduce {
            send: sb,
            recv: rb,
            dtype: dt,
            op,
        },
        OpKind::Reduce => CommOp::Reduce {
            send: sb,
            recv: rb,
            dtype: dt,
            op,
            root: root as u32,
        },
        OpKind::ReduceScatter => CommOp::ReduceScatter {
            send: sb,
            recv: rb,
            dtype: dt,
            op,
        },
        OpKind::ReduceScatterV => CommOp::ReduceScatterV {
            send: sb,
            recv: rb,
            dtype: dt,
            op,
            counts: &counts,
        },
        OpKind::Broadcast => CommOp::Broadcast {
            send: sb,
            recv: rb,
            dtype: dt,
            root: root as u32,
        },
        OpKind::AllGather => CommOp::AllGather {
            send: sb,
            recv: rb,
            dtype: dt,
        },
        OpKind::AllGatherV => CommOp::AllGatherV {
            send: sb,
            recv: rb,
            dtype: dt,
            counts: &counts,
        },
        OpKind::AllToAll => CommOp::AllToAll {
            send: sb,
            recv: rb,
            dtype: dt,
        },
        OpKind::AllToAllV => CommOp::AllToAllV {
            send: sb,
            recv: rb,
            dtype: dt,
            send_counts: &send_counts,
            recv_counts: &recv_counts,
        },
        OpKind::Gather => CommOp::Gather {
            send: sb,
            recv: rb,
            dtype: dt,
            root: root as u32,
        },
        OpKind::Scatter => CommOp::Scatter {
            send: sb,
            recv: rb,
            dtype: dt,
            root: root as u32,
        },
        _ => CommOp::Barrier,
    };
    // SAFETY: the buffers live until the stream is synchronized below.
    unsafe { comm.issue(&cop, s) }.unwrap_or_else(|e| panic!("{ctx}: issue: {e}"));
    s.synchronize().unwrap();
    assert_eq!(comm.poll(), Ok(Progress::Done), "{ctx}");
    let got = match (kind, in_place) {
        (OpKind::ReduceScatter, true) => send.bytes()[me * len * es..(me + 1) * len * es].to_vec(),
        _ => recv.bytes().to_vec(),
    };
    let factors: Vec<f64> = (0..n)
        .map(|r| if dt.is_float() { factor(dt, r) } else { 0.0 })
        .collect();
    let red = |inputs: &[Vec<u8>]| {
        reduce_ref(
            dt,
            ref_red(rc.unwrap_or(RedCase::Builtin(ReduceOp::Sum))),
            &factors,
            inputs,
            n,
        )
    };
    let want: Vec<u8> = match kind {
        OpKind::AllReduce => red(&ins),
        OpKind::Reduce if me == root => red(&ins),
        OpKind::Reduce if in_place => mine.clone(),
        OpKind::Reduce => vec![SENTINEL; len * es],
        OpKind::ReduceScatter => red(&ins)[me * len * es..(me + 1) * len * es].to_vec(),
        OpKind::ReduceScatterV => {
            let o = offsets(&counts);
            red(&ins)[o[me] * es..(o[me] + counts[me]) * es].to_vec()
        }
        OpKind::Broadcast => ins[root].clone(),
        OpKind::AllGather | OpKind::AllGatherV => ins.concat(),
        OpKind::Gather if me == root => ins.concat(),
        OpKind::Gather => Vec::new(),
        OpKind::Scatter => ins[root][me * len * es..(me + 1) * len * es].to_vec(),
        OpKind::AllToAll => (0..n)
            .flat_map(|p| ins[p][me * len * es..(me + 1) * len * es].to_vec())
            .collect(),
        OpKind::AllToAllV => (0..n)
            .flat_map(|p| {
                let c: Vec<usize> = (0..n).map(|q| a2av(p, q, len)).collect();
                let o = offsets(&c);
                ins[p][o[me] * es..(o[me] + c[me]) * es].to_vec()
            })
            .collect(),
        _ => vec![SENTINEL; len * es],
    };
    assert_eq!(got, want, "{ctx}");
}

fn enc_f_or_empty(dt: DataType, rc: Option<RedCase>, me: usize) -> Vec<u8> {
    match rc {
        Some(RedCase::PreMulDevice) => enc_f(dt, factor(dt, me)),
        _ => vec![0; 8],
    }
}

fn world(n: u32) {
    let counts = on_ranks(World::new(n).unwrap(), run_rank);
    assert!(counts.iter().all(|c| *c == counts[0] && *c > 0));
}

/// The whole matrix on a mock of NCCL 2.23.4, the last release without fp8: every operation
/// that moves data carries fp8 byte-exact (it travels as uint8), every reduction of it is
/// refused naming Float8.
fn world_before_fp8(n: u32) {
    let comms = World::builder(n)
        .version(Version::new(2, 23, 4))
        .build()
        .unwrap();
    assert!(!comms[0].features().has(Feature::Float8));
    let counts = on_ranks(comms, run_rank);
    assert!(counts.iter().all(|c| *c == counts[0] && *c > 0));
}

#[test]
fn world_of_1_before_fp8() {
    world_before_fp8(1);
}

#[test]
fn world_of_3_before_fp8() {
    world_before_fp8(3);
}

#[test]
fn world_of_1() {
    world(1);
}

#[test]
fn world_of_2() {
    world(2);
}

#[test]
fn world_of_3() {
    world(3);
}

#[test]
fn world_of_4() {
    world(4);
}

#[test]
fn world_of_8() {
    world(8);
}

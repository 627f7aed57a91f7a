use super::*;
use crate::buf::{RawBuf, RawBufMut};
use crate::reduce::HostScalar;

fn ar(dtype: DataType, op: ReduceOp, count: usize) -> CommOp<'static> {
    CommOp::all_reduce(
        RawBuf::new(0x1000, count),
        RawBufMut::new(0x9000, count),
        dtype,
        op,
    )
}

#[test]
fn kernel_call_takes_the_types_and_reductions_the_kernels_have() {
    let c = kernel_call(&ar(DataType::Float32, ReduceOp::Sum, 3), 4).unwrap();
    assert_eq!(
        (c.ty, c.red, c.count, c.send, c.recv),
        (KernelType::F32, KernelRed::Sum, 3, 0x1000, 0x9000)
    );
    assert_eq!((c.bytes(), c.lines()), (12, 2));
    for (d, t) in [
        (DataType::Float64, KernelType::F64),
        (DataType::Float16, KernelType::F16),
        (DataType::Bfloat16, KernelType::Bf16),
        (DataType::Int32, KernelType::I32),
        (DataType::Int64, KernelType::I64),
    ] {
        assert_eq!(kernel_call(&ar(d, ReduceOp::Max, 1), 2).unwrap().ty, t);
    }
    for d in [
        DataType::Uint8,
        DataType::Int8,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Float8E4M3,
    ] {
        assert_eq!(kernel_call(&ar(d, ReduceOp::Sum, 8), 2), None, "{d:?}");
    }
}

#[test]
fn kernel_call_refuses_what_only_nccl_runs() {
    let f32sum = ar(DataType::Float32, ReduceOp::Sum, 8);
    assert_eq!(kernel_call(&f32sum, 1), None, "a group of one");
    assert_eq!(
        kernel_call(&f32sum, MAX_RANKS + 1),
        None,
        "more ranks than the kernels hold"
    );
    assert!(kernel_call(&f32sum, MAX_RANKS).is_some());
    assert_eq!(
        kernel_call(&ar(DataType::Float32, ReduceOp::Sum, 0), 2),
        None,
        "empty"
    );
    let dev = ReduceOp::PreMulSum(Scalar::Device { addr: 0x40 });
    assert_eq!(
        kernel_call(&ar(DataType::Float32, dev, 8), 2),
        None,
        "factor in device memory"
    );
    let int_premul = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F64(2.0)));
    assert_eq!(kernel_call(&ar(DataType::Int32, int_premul, 8), 2), None);
    let bcast = CommOp::Broadcast {
        send: RawBuf::new(0x1000, 8),
        recv: RawBufMut::new(0x1000, 8),
        dtype: DataType::Float32,
        root: 0,
    };
    assert_eq!(kernel_call(&bcast, 2), None);
}

#[test]
fn averages_and_factors_become_the_kernels_codes() {
    let c = kernel_call(&ar(DataType::Float16, ReduceOp::Avg, 8), 4).unwrap();
    assert_eq!((c.red, c.scale), (KernelRed::PreMul, 0.25));
    let c = kernel_call(&ar(DataType::Int64, ReduceOp::Avg, 8), 4).unwrap();
    assert_eq!((c.red, c.scale), (KernelRed::AvgInt, 1.0));
    let factor = |s| {
        kernel_call(
            &ar(DataType::Float32, ReduceOp::PreMulSum(Scalar::Host(s)), 8),
            2,
        )
        .unwrap()
    };
    assert_eq!(factor(HostScalar::F32(1.5)).scale, 1.5);
    assert_eq!(factor(HostScalar::F64(-3.25)).scale, -3.25);
    assert_eq!(factor(HostScalar::Bf16(0x4040)).scale, 3.0);
    assert_eq!(factor(HostScalar::F16(0x3c00)).scale, 1.0);
    assert_eq!(factor(HostScalar::F16(0xc100)).scale, -2.5);
    assert_eq!(
        factor(HostScalar::F16(0x0001)).scale,
        2f64.powi(-24),
        "smallest subnormal"
    );
    assert_eq!(factor(HostScalar::F16(0x7c00)).scale, f64::INFINITY);
    assert!(factor(HostScalar::F16(0x7e00)).scale.is_nan());
}

#[test]
fn the_default_table_picks_one_shot_only_where_measured() {
    let t = PeerTable::default();
    let call = |bytes: usize, n: u32| {
        kernel_call(&ar(DataType::Int64, ReduceOp::Sum, bytes / 8), n).unwrap()
    };
    let pick = |bytes: usize, n: u32| choose(PeerPolicy::Auto, &t, &call(bytes, n), n);
    assert_eq!(pick(8, 2), Some(KernelAlgo::OneShot));
    for n in 2..=4 {
        assert_eq!(pick(128 * 1024, n), Some(KernelAlgo::OneShot), "{n}");
        assert_eq!(pick(128 * 1024 + 8, n), Some(KernelAlgo::TwoShot), "{n}");
        assert_eq!(pick(256 * 1024, n), Some(KernelAlgo::TwoShot), "{n}");
    }
    assert_eq!(pick(256 * 1024 + 8, 2), None);
    assert_eq!(pick(256 * 1024 + 8, 3), None);
    assert_eq!(pick(512 * 1024, 4), Some(KernelAlgo::TwoShot));
    assert_eq!(pick(512 * 1024 + 8, 4), None);
    assert_eq!(pick(8, 5), None, "five ranks not measured");
    assert_eq!(choose(PeerPolicy::Nccl, &t, &call(8, 2), 2), None);
}

#[test]
fn a_forced_kernel_runs_only_what_fits_its_slots() {
    let t = PeerTable::default();
    let slot = LINES_PER_SLOT * LINE_DATA_BYTES;
    let call = |bytes: u64| {
        kernel_call(&ar(DataType::Int64, ReduceOp::Sum, (bytes / 8) as usize), 4).unwrap()
    };
    let one = PeerPolicy::Force(KernelAlgo::OneShot);
    let two = PeerPolicy::Force(KernelAlgo::TwoShot);
    assert_eq!(choose(one, &t, &call(slot), 4), Some(KernelAlgo::OneShot));
    assert_eq!(choose(one, &t, &call(slot + 8), 4), None);
    assert_eq!(
        choose(two, &t, &call(4 * slot), 4),
        Some(KernelAlgo::TwoShot)
    );
    assert_eq!(choose(two, &t, &call(4 * slot + 8), 4), None);
    assert!(fits(KernelAlgo::TwoShot, &call(4 * slot), 4));
    assert!(!fits(KernelAlgo::TwoShot, &call(4 * slot), 3));
}

#[test]
fn two_shot_follows_one_shot_in_a_table() {
    let mut t = PeerTable::default();
    t.one_shot_max[4] = 1024;
    t.two_shot_max[4] = 512 * 1024;
    let call = |bytes: u64| {
        kernel_call(
            &ar(DataType::Float32, ReduceOp::Sum, (bytes / 4) as usize),
            4,
        )
        .unwrap()
    };
    assert_eq!(
        choose(PeerPolicy::Auto, &t, &call(1024), 4),
        Some(KernelAlgo::OneShot)
    );
    assert_eq!(
        choose(PeerPolicy::Auto, &t, &call(2048), 4),
        Some(KernelAlgo::TwoShot)
    );
    assert_eq!(choose(PeerPolicy::Auto, &t, &call(1 << 20), 4), None);
    assert_ne!(t.fingerprint(), PeerTable::default().fingerprint());
}

#[test]
fn policies_parse_by_name() {
    for p in [
        PeerPolicy::Auto,
        PeerPolicy::Nccl,
        PeerPolicy::Force(KernelAlgo::OneShot),
        PeerPolicy::Force(KernelAlgo::TwoShot),
        PeerPolicy::Force(KernelAlgo::AllGather),
        PeerPolicy::Force(KernelAlgo::ReduceScatter),
    ] {
        assert_eq!(PeerPolicy::parse(p.name()), Some(p));
    }
    assert_eq!(PeerPolicy::parse("off"), Some(PeerPolicy::Nccl));
    assert_eq!(PeerPolicy::parse("fast"), None);
}

#[test]
fn geometry_gives_whole_warps_and_bounded_grids() {
    assert_eq!(geometry(0), (1, 32));
    assert_eq!(geometry(1), (1, 32));
    assert_eq!(geometry(33), (1, 64));
    assert_eq!(geometry(256), (1, 256));
    assert_eq!(geometry(257), (2, 256));
    assert_eq!(geometry(512), (2, 256));
    assert_eq!(geometry(u64::MAX), (MAX_BLOCKS, MAX_THREADS));
    assert_eq!(peer_bytes(4), 4096 + 3 * 2 * 4 * 32 * 1024 * 16);
}

#[test]
fn the_control_block_holds_an_epoch_for_every_chunk_of_a_slot() {
    // The kernels' layout (peer_reduce.cu): the one-phase kernels' chunk epochs from word 64,
    // two-shot's from word 320, at most 256 chunks each, and
    // a launch of several blocks gives each block one chunk's lines per pass.
    let chunks = LINES_PER_SLOT / CHUNK_LINES;
    assert_eq!(LINES_PER_SLOT % CHUNK_LINES, 0);
    assert!(chunks <= 256);
    const { assert!(CONTROL_BYTES >= 4 * (320 + 256)) };
    for lines in [CHUNK_LINES + 1, 5 * CHUNK_LINES, LINES_PER_SLOT] {
        let (blocks, threads) = geometry(lines);
        assert!(blocks > 1);
        assert_eq!(u64::from(threads), CHUNK_LINES);
    }
}

#[test]
fn a_kernel_status_becomes_the_error_it_stands_for() {
    assert_eq!(KernelStatus::default().error(10), None);
    let t = KernelStatus {
        cause: KernelStatus::TIMED_OUT,
        missing: 0b1010,
        epoch: 7,
    };
    match t.error(1500) {
        Some(Error::Timeout { what, after_ms }) => {
            assert_eq!(after_ms, 1500);
            assert_eq!(
                what.as_str(),
                "peer kernel call #7: ranks [1, 3] did not arrive"
            );
        }
        other => panic!("{other:?}"),
    }
    let a = KernelStatus {
        cause: KernelStatus::ABORTED,
        missing: 1,
        epoch: 0,
    };
    match a.error(1) {
        Some(Error::Aborted { reason }) => assert_eq!(
            reason.as_str(),
            "peer kernel call #0 stopped by the abort while waiting for ranks [0]"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        KernelStatus {
            cause: 9,
            missing: 0,
            epoch: 1
        }
        .error(1),
        Some(Error::Remote { .. })
    ));
}

mod records {
    use super::super::record::*;
    use super::super::*;

    fn rec(host: u64) -> PeerRecord {
        PeerRecord {
            eligible: true,
            pid: 41,
            process: 7,
            host,
            table: PeerTable::default().fingerprint(),
            policy: policy_code(PeerPolicy::Auto),
            fd: 12,
            bytes: peer_bytes(2),
            socket: 0xfeed,
        }
    }

    #[test]
    fn records_round_trip_and_refuse_garbage() {
        let r = rec(5);
        assert_eq!(PeerRecord::decode(&r.encode()), Some(r));
        let neg = PeerRecord { fd: -1, ..r };
        assert_eq!(PeerRecord::decode(&neg.encode()), Some(neg));
        assert_eq!(PeerRecord::decode(&[0u8; RECORD_BYTES]), None);
        assert_eq!(PeerRecord::decode(&r.encode()[..63]), None);
        let mut bad = r.encode();
        bad[8] = 2;
        assert_eq!(PeerRecord::decode(&bad), None);
        let mut v2 = r.encode();
        v2[4] = 2;
        assert_eq!(PeerRecord::decode(&v2), None);
    }

    #[test]
    fn a_group_uses_peer_memory_only_when_every_rank_can() {
        let good = [Some(rec(5)), Some(rec(5))];
        assert_eq!(refusal(&good), None);
        assert!(refusal(&[Some(rec(5)), Some(rec(6))])
            .unwrap()
            .contains("host"));
        assert!(refusal(&[Some(rec(5)), None]).is_some());
        assert!(refusal(&[]).is_some());
        let t = PeerTable::default();
        let out = PeerRecord::ineligible(&t, PeerPolicy::Auto);
        assert!(refusal(&[Some(rec(5)), Some(out)])
            .unwrap()
            .contains("could not"));
        let forced = PeerRecord {
            policy: policy_code(PeerPolicy::Force(KernelAlgo::OneShot)),
            ..rec(5)
        };
        assert!(refusal(&[Some(rec(5)), Some(forced)])
            .unwrap()
            .contains("policies"));
        let bigger = PeerRecord {
            bytes: peer_bytes(3),
            ..rec(5)
        };
        assert!(refusal(&[Some(rec(5)), Some(bigger)])
            .unwrap()
            .contains("sizes"));
    }

    #[test]
    fn verdicts_agree_only_when_all_mapped() {
        assert!(all_mapped(&[verdict(true), verdict(true)]));
        assert!(!all_mapped(&[verdict(true), verdict(false)]));
        assert!(!all_mapped(&[verdict(true), 1]));
        assert!(!all_mapped(&[]));
    }
}

fn ag(dtype: DataType, per_rank: usize, n: u32) -> CommOp<'static> {
    CommOp::AllGather {
        send: RawBuf::new(0x1000, per_rank),
        recv: RawBufMut::new(0x9000, per_rank * n as usize),
        dtype,
    }
}

fn rs(dtype: DataType, op: ReduceOp, per_rank: usize, n: u32) -> CommOp<'static> {
    CommOp::ReduceScatter {
        send: RawBuf::new(0x1000, per_rank * n as usize),
        recv: RawBufMut::new(0x9000, per_rank),
        dtype,
        op,
    }
}

#[test]
fn all_gather_and_reduce_scatter_calls_count_one_ranks_part() {
    let c = kernel_call(&ag(DataType::Float16, 5, 4), 4).unwrap();
    assert_eq!(
        (c.coll, c.ty, c.count, c.send, c.recv),
        (KernelColl::AllGather, KernelType::F16, 5, 0x1000, 0x9000)
    );
    assert_eq!((c.bytes(), c.lines(), c.op_bytes(4)), (10, 2, 40));
    let c = kernel_call(&rs(DataType::Float32, ReduceOp::Avg, 3, 4), 4).unwrap();
    assert_eq!(
        (c.coll, c.count, c.red, c.scale, c.op_bytes(4)),
        (KernelColl::ReduceScatter, 3, KernelRed::PreMul, 0.25, 48)
    );
    let c = kernel_call(&rs(DataType::Int32, ReduceOp::Avg, 3, 2), 2).unwrap();
    assert_eq!((c.red, c.scale), (KernelRed::AvgInt, 1.0));
    // What the all-reduce kernels refuse, these refuse too.
    assert_eq!(kernel_call(&ag(DataType::Uint8, 8, 2), 2), None);
    assert_eq!(kernel_call(&ag(DataType::Float32, 0, 2), 2), None, "empty");
    assert_eq!(
        kernel_call(&ag(DataType::Float32, 8, 1), 1),
        None,
        "a group of one"
    );
    let dev = ReduceOp::PreMulSum(Scalar::Device { addr: 0x40 });
    assert_eq!(kernel_call(&rs(DataType::Float32, dev, 8, 2), 2), None);
}

#[test]
fn gathers_run_on_their_kernels_only_where_a_table_or_the_policy_says() {
    let mut t = PeerTable::default();
    let n = 4;
    let agc = |per_rank: usize| kernel_call(&ag(DataType::Float32, per_rank, n), n).unwrap();
    let rsc = |per_rank: usize| {
        kernel_call(&rs(DataType::Float32, ReduceOp::Sum, per_rank, n), n).unwrap()
    };
    // The default table runs them up to 512 KiB on 4 ranks (4 x 32 Ki floats), NCCL above.
    for per_rank in [1, 256, 32 * 1024] {
        assert_eq!(
            choose(PeerPolicy::Auto, &t, &agc(per_rank), n),
            Some(KernelAlgo::AllGather)
        );
        assert_eq!(
            choose(PeerPolicy::Auto, &t, &rsc(per_rank), n),
            Some(KernelAlgo::ReduceScatter)
        );
    }
    assert_eq!(choose(PeerPolicy::Auto, &t, &agc(32 * 1024 + 1), n), None);
    assert_eq!(choose(PeerPolicy::Auto, &t, &rsc(32 * 1024 + 1), n), None);
    // A table without their limits keeps them on NCCL at every size.
    t.all_gather_max = [0; MAX_RANKS as usize + 1];
    t.reduce_scatter_max = [0; MAX_RANKS as usize + 1];
    for per_rank in [1, 256, 16 * 1024] {
        assert_eq!(choose(PeerPolicy::Auto, &t, &agc(per_rank), n), None);
        assert_eq!(choose(PeerPolicy::Auto, &t, &rsc(per_rank), n), None);
    }
    // Limits count the whole operation: 4 ranks x 1024 floats = 16 KiB.
    t.all_gather_max[4] = 16 * 1024;
    t.reduce_scatter_max[4] = 4 * 1024;
    assert_eq!(
        choose(PeerPolicy::Auto, &t, &agc(1024), n),
        Some(KernelAlgo::AllGather)
    );
    assert_eq!(choose(PeerPolicy::Auto, &t, &agc(1025), n), None);
    assert_eq!(
        choose(PeerPolicy::Auto, &t, &rsc(256), n),
        Some(KernelAlgo::ReduceScatter)
    );
    assert_eq!(choose(PeerPolicy::Auto, &t, &rsc(257), n), None);
    assert_eq!(
        choose(PeerPolicy::Auto, &t, &agc(8), 3),
        None,
        "3 ranks: no limit"
    );
    assert_ne!(t.fingerprint(), PeerTable::default().fingerprint());
    // A forced kernel runs its own collective where it fits, nothing else.
    let force_ag = PeerPolicy::Force(KernelAlgo::AllGather);
    let one = PeerPolicy::Force(KernelAlgo::OneShot);
    let slot_floats = (LINES_PER_SLOT * LINE_DATA_BYTES / 4) as usize;
    assert_eq!(
        choose(force_ag, &t, &agc(slot_floats), n),
        Some(KernelAlgo::AllGather)
    );
    assert_eq!(choose(force_ag, &t, &agc(slot_floats + 2), n), None);
    assert_eq!(choose(force_ag, &t, &rsc(8), n), None);
    assert_eq!(choose(one, &t, &agc(8), n), None);
    let arc = kernel_call(&ar(DataType::Float32, ReduceOp::Sum, 8), n).unwrap();
    assert_eq!(choose(force_ag, &t, &arc, n), None);
    assert_eq!(
        choose(
            PeerPolicy::Force(KernelAlgo::ReduceScatter),
            &t,
            &rsc(slot_floats),
            n
        ),
        Some(KernelAlgo::ReduceScatter)
    );
    for a in KernelAlgo::EVERY {
        assert_eq!(KernelAlgo::EVERY[a.index()], a);
    }
}

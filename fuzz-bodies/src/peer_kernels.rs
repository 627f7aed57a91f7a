//! The peer kernels' pure decisions against models written here: which calls they take
//! (`kernel_call`), which kernel runs a call (`choose`: only what fits its slots, only within
//! the table under `Auto`, nothing under `Nccl`), the launch shape (`geometry`), the set-up
//! records (any bytes decode or are refused; a record survives its encoding) and the group's
//! verdict on them (`refusal`: usable exactly when every rank is eligible and agrees), a
//! kernel status's error (never a panic; a timeout names every missing rank), and when a call
//! may follow the one before block by block (`may_follow`: only where every byte both touch,
//! and either writes, is handed to the same block in both, by the core's model of the kernels,
//! `Footprint::block_key`), and how often the host numbers launches for it as the kernels report
//! misses (`FollowBackoff`: never paused before a miss, at once after one, a stretch of
//! unnumbered launches no shorter than the first pause or the probe's margin and no longer
//! than the longest pause).

use arbitrary::{Arbitrary, Unstructured};
use oxccl_core::peer_kernels::follow::backoff::{FIRST_PAUSE, LONGEST_PAUSE, PROBE_MARGIN};
use oxccl_core::peer_kernels::follow::{may_follow, FollowBackoff, Footprint};
use oxccl_core::peer_kernels::record::{all_mapped, refusal, verdict, PeerRecord, RECORD_BYTES};
use oxccl_core::peer_kernels::{
    choose, fits, geometry, kernel_call, KernelAlgo, KernelCall, KernelColl, KernelRed,
    KernelStatus, KernelType, PeerPolicy, PeerTable, LINES_PER_SLOT, MAX_BLOCKS, MAX_RANKS,
    MAX_THREADS,
};
use oxccl_core::{CommOp, DataType, Error, HostScalar, RawBuf, RawBufMut, ReduceOp, Scalar};

#[derive(Debug, Arbitrary)]
enum Case {
    /// An all-reduce, all-gather or reduce-scatter (or a broadcast) and a policy and table.
    Choose(Choice),
    /// Launch shape for a number of lines.
    Geometry { lines: u64 },
    /// Raw record bytes, then records built from fields, and verdict words.
    Records {
        raw: Vec<u8>,
        ranks: Vec<(bool, u8, u8, u8, u8)>,
        verdicts: Vec<bool>,
        junk: Option<u64>,
    },
    /// A status block.
    Status {
        cause: u32,
        missing: u32,
        epoch: u32,
        ms: u64,
    },
    /// Two launches of one group: kernel, type, ranks, counts and buffer addresses (in
    /// elements, near each other so that they meet).
    Follow {
        algo: u8,
        ty: u8,
        nranks: u8,
        counts: (u16, u16),
        addrs: [u8; 4],
    },
    /// The device's miss word as the host reads it at successive launches: each value held
    /// for a number of launches.
    Backoff { words: Vec<(u8, u16)> },
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let Ok(case) = Case::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    match case {
        Case::Choose(c) => pick(c),
        Case::Geometry { lines } => shape(lines),
        Case::Records {
            raw,
            ranks,
            verdicts,
            junk,
        } => records(&raw, &ranks, &verdicts, junk),
        Case::Status {
            cause,
            missing,
            epoch,
            ms,
        } => status(cause, missing, epoch, ms),
        Case::Follow {
            algo,
            ty,
            nranks,
            counts,
            addrs,
        } => follow(algo, ty, nranks, counts, addrs),
        Case::Backoff { words } => backoff(&words),
    }
}

fn backoff(words: &[(u8, u16)]) {
    let mut b = FollowBackoff::default();
    let (mut seen, mut paused, mut missed, mut seq) = (0u32, 0u32, false, 0u32);
    for &(word, hold) in words.iter().take(64) {
        for _ in 0..u32::from(hold) % 6000 {
            let word = u32::from(word);
            let miss = word != seen;
            seen = word;
            let numbered = b.number(word, seq.wrapping_add(1).max(1));
            if miss {
                assert!(!numbered, "numbered right after a miss");
                missed = true;
                paused = 0;
            }
            match (missed, numbered) {
                (false, n) => assert!(n, "paused before any miss"),
                (true, false) => {
                    paused += 1;
                    assert!(paused <= LONGEST_PAUSE, "unnumbered past the longest pause");
                }
                (true, true) => {
                    assert!(
                        !miss && (paused == 0 || paused >= FIRST_PAUSE.min(PROBE_MARGIN)),
                        "unnumbered for less than the first pause"
                    );
                    seq = seq.wrapping_add(1).max(1);
                    paused = 0;
                }
            }
        }
    }
}

fn follow(algo: u8, ty: u8, nranks: u8, counts: (u16, u16), addrs: [u8; 4]) {
    let algo = KernelAlgo::EVERY[algo as usize % KernelAlgo::EVERY.len()];
    let ty = KernelType::ALL[ty as usize % KernelType::ALL.len()];
    let n = 2 + u32::from(nranks % 7);
    let size = ty.size() as usize;
    let call = |count: u16, send: u8, recv: u8| KernelCall {
        coll: algo.coll(),
        ty,
        red: KernelRed::Sum,
        scale: 1.0,
        count: u64::from(count % 600),
        send: 0x10000 + usize::from(send) * size,
        recv: 0x10000 + usize::from(recv) * size,
    };
    let (a, b) = (
        call(counts.0, addrs[0], addrs[1]),
        call(counts.1, addrs[2], addrs[3]),
    );
    let (fa, fb) = (Footprint::of(algo, &a, n), Footprint::of(algo, &b, n));
    // A call follows itself unless its own input and output meet at different addresses.
    let apart = fa.send.addr == fa.recv.addr
        || fa.send.addr as u64 + fa.send.bytes <= fa.recv.addr as u64
        || fa.recv.addr as u64 + fa.recv.bytes <= fa.send.addr as u64;
    assert_eq!(
        may_follow(&fa, &fa),
        apart,
        "a call following itself: {fa:?}"
    );
    if !may_follow(&fa, &fb) {
        return;
    }
    for (eb, wb) in [(fb.send, false), (fb.recv, true)] {
        for addr in eb.addr..eb.addr + eb.bytes as usize {
            for (ea, wa) in [(fa.send, false), (fa.recv, true)] {
                if (wa || wb) && (ea.addr..ea.addr + ea.bytes as usize).contains(&addr) {
                    assert_eq!(
                        fa.block_key(n, &ea, addr),
                        fb.block_key(n, &eb, addr),
                        "byte {addr:#x} of {fa:?} then {fb:?}"
                    );
                }
            }
        }
    }
}

/// What [`Case::Choose`] draws.
#[derive(Debug, Arbitrary)]
struct Choice {
    /// 0 all-reduce, 1 all-gather, 2 reduce-scatter, else a broadcast.
    coll: u8,
    dtype: u8,
    op: u8,
    factor: f64,
    count: u32,
    nranks: u8,
    policy: u8,
    one: [u32; 9],
    two: [u32; 9],
    gather: [u32; 9],
    scatter: [u32; 9],
}

fn pick(c: Choice) {
    let Choice {
        coll,
        dtype,
        op,
        factor,
        count,
        nranks,
        policy,
        one,
        two,
        gather,
        scatter,
    } = c;
    let dtype = DataType::ALL[dtype as usize % DataType::ALL.len()];
    let red = match op % 8 {
        0 => ReduceOp::Sum,
        1 => ReduceOp::Prod,
        2 => ReduceOp::Min,
        3 => ReduceOp::Max,
        4 => ReduceOp::Avg,
        5 => ReduceOp::PreMulSum(Scalar::Host(HostScalar::F64(factor))),
        6 => ReduceOp::PreMulSum(Scalar::Host(HostScalar::F16(factor.to_bits() as u16))),
        _ => ReduceOp::PreMulSum(Scalar::Device { addr: 64 }),
    };
    let n = u32::from(nranks % 12);
    // One rank's part (the all-reduce's whole buffer); the other buffer is n parts.
    let count = count as usize % (1 << 20);
    let whole = count * n.max(1) as usize;
    let (coll, op) = match coll % 4 {
        0 => (
            Some(KernelColl::AllReduce),
            CommOp::all_reduce(
                RawBuf::new(0x1000, count),
                RawBufMut::new(0x1000, count),
                dtype,
                red,
            ),
        ),
        1 => (
            Some(KernelColl::AllGather),
            CommOp::AllGather {
                send: RawBuf::new(0x1000, count),
                recv: RawBufMut::new(0x1000, whole),
                dtype,
            },
        ),
        2 => (
            Some(KernelColl::ReduceScatter),
            CommOp::ReduceScatter {
                send: RawBuf::new(0x1000, whole),
                recv: RawBufMut::new(0x1000, count),
                dtype,
                op: red,
            },
        ),
        _ => (
            None,
            CommOp::Broadcast {
                send: RawBuf::new(0x1000, count),
                recv: RawBufMut::new(0x1000, count),
                dtype,
                root: 0,
            },
        ),
    };
    // The model of `kernel_call`: the all-gather has no reduction to refuse.
    let reduces = coll != Some(KernelColl::AllGather);
    let takes = coll.is_some()
        && (2..=MAX_RANKS).contains(&n)
        && count > 0
        && KernelType::ALL.iter().any(|t| t.dtype() == dtype)
        && (!reduces
            || match red {
                ReduceOp::PreMulSum(Scalar::Device { .. }) => false,
                ReduceOp::PreMulSum(_) => dtype.is_float(),
                _ => true,
            });
    let call = kernel_call(&op, n);
    assert_eq!(call.is_some(), takes, "{op:?} on {n} ranks");
    let Some(call) = call else { return };
    assert_eq!(Some(call.coll), coll);
    assert_eq!(call.count, count as u64);
    assert_eq!(call.bytes(), (count * dtype.size()) as u64);
    let table = PeerTable {
        one_shot_max: one.map(u64::from),
        two_shot_max: two.map(u64::from),
        all_gather_max: gather.map(u64::from),
        reduce_scatter_max: scatter.map(u64::from),
    };
    let policy = match policy % 6 {
        0 => PeerPolicy::Auto,
        1 => PeerPolicy::Nccl,
        k => PeerPolicy::Force(KernelAlgo::EVERY[usize::from(k) - 2]),
    };
    let got = choose(policy, &table, &call, n);
    // The table counts the whole operation: the gathers' larger buffer.
    let bytes = match call.coll {
        KernelColl::AllReduce => call.bytes(),
        _ => call.bytes() * u64::from(n),
    };
    let i = n as usize;
    let want = match (policy, call.coll) {
        (PeerPolicy::Nccl, _) => None,
        (PeerPolicy::Force(a), c) => (a.coll() == c).then_some(a),
        (PeerPolicy::Auto, KernelColl::AllReduce) if bytes <= table.one_shot_max[i] => {
            Some(KernelAlgo::OneShot)
        }
        (PeerPolicy::Auto, KernelColl::AllReduce) if bytes <= table.two_shot_max[i] => {
            Some(KernelAlgo::TwoShot)
        }
        (PeerPolicy::Auto, KernelColl::AllGather) if bytes <= table.all_gather_max[i] => {
            Some(KernelAlgo::AllGather)
        }
        (PeerPolicy::Auto, KernelColl::ReduceScatter) if bytes <= table.reduce_scatter_max[i] => {
            Some(KernelAlgo::ReduceScatter)
        }
        (PeerPolicy::Auto, _) => None,
    }
    .filter(|a| fits(*a, &call, n));
    assert_eq!(got, want, "{policy:?} {bytes} B on {n} ranks");
    if let Some(a) = got {
        assert!(a.lines_per_rank(call.lines(), n) <= LINES_PER_SLOT);
    }
}

fn shape(lines: u64) {
    let (blocks, threads) = geometry(lines);
    assert!((1..=MAX_BLOCKS).contains(&blocks), "{blocks}");
    assert!(
        (32..=MAX_THREADS).contains(&threads) && threads % 32 == 0,
        "{threads}"
    );
    let all = u64::from(blocks) * u64::from(threads);
    assert!(
        all >= lines.min(u64::from(MAX_BLOCKS * MAX_THREADS)),
        "{lines}: {all}"
    );
    assert!(blocks == 1 || threads == MAX_THREADS);
}

fn records(raw: &[u8], ranks: &[(bool, u8, u8, u8, u8)], verdicts: &[bool], junk: Option<u64>) {
    if let Some(r) = PeerRecord::decode(raw) {
        assert_eq!(raw.len(), RECORD_BYTES);
        assert_eq!(PeerRecord::decode(&r.encode()), Some(r));
    }
    let built: Vec<PeerRecord> = ranks
        .iter()
        .take(16)
        .map(|&(eligible, host, table, policy, bytes)| PeerRecord {
            eligible,
            pid: u32::from(host),
            process: u64::from(table),
            host: u64::from(host % 2),
            table: u64::from(table % 2),
            policy: policy % 2,
            fd: i32::from(bytes) - 1,
            bytes: u64::from(bytes % 2),
            socket: u64::from(bytes),
        })
        .collect();
    for r in &built {
        assert_eq!(PeerRecord::decode(&r.encode()), Some(*r));
    }
    let mut seen: Vec<Option<PeerRecord>> = built.iter().copied().map(Some).collect();
    if junk.is_some() && !seen.is_empty() {
        seen[0] = None;
    }
    let agree = !seen.is_empty()
        && seen.iter().all(|r| {
            r.is_some_and(|r| {
                let f = built[0];
                r.eligible
                    && r.host == f.host
                    && r.table == f.table
                    && r.policy == f.policy
                    && r.bytes == f.bytes
            })
        });
    assert_eq!(refusal(&seen).is_none(), agree, "{seen:?}");
    let words: Vec<u64> = verdicts.iter().map(|&ok| verdict(ok)).chain(junk).collect();
    let all_ok = !words.is_empty()
        && verdicts.iter().all(|&ok| ok)
        && junk.is_none_or(|j| j == verdict(true));
    assert_eq!(all_mapped(&words), all_ok);
}

fn status(cause: u32, missing: u32, epoch: u32, ms: u64) {
    let s = KernelStatus {
        cause,
        missing,
        epoch,
    };
    match (cause, s.error(ms)) {
        (0, None) => {}
        (KernelStatus::TIMED_OUT, Some(Error::Timeout { what, after_ms })) => {
            assert_eq!(after_ms, ms);
            let text = what.as_str();
            assert!(text.contains(&format!("#{epoch}")), "{text}");
            for r in (0..32).filter(|r| missing >> r & 1 == 1) {
                assert!(text.contains(&r.to_string()), "{text} lacks rank {r}");
            }
        }
        (KernelStatus::ABORTED, Some(Error::Aborted { .. })) => {}
        (c, Some(Error::Remote { .. })) if c > KernelStatus::TIMED_OUT => {}
        (c, other) => panic!("status cause {c} gave {other:?}"),
    }
}

use super::*;
use crate::peer_kernels::KernelRed;
extern crate std;
use std::vec::Vec;

fn call(algo: KernelAlgo, count: u64, send: usize, recv: usize) -> KernelCall {
    KernelCall {
        coll: algo.coll(),
        ty: KernelType::F32,
        red: KernelRed::Sum,
        scale: 1.0,
        count,
        send,
        recv,
    }
}

fn fp(algo: KernelAlgo, count: u64, send: usize, recv: usize) -> Footprint {
    Footprint::of(algo, &call(algo, count, send, recv), 4)
}

#[test]
fn the_same_kernel_on_the_same_or_apart_buffers_follows() {
    const MIB: usize = 1 << 20;
    let two = KernelAlgo::TwoShot;
    let before = fp(two, 65536, MIB, 2 * MIB);
    // Again, in place, back and forth, or on buffers elsewhere.
    assert!(may_follow(&before, &before));
    assert!(may_follow(
        &fp(two, 65536, MIB, MIB),
        &fp(two, 65536, MIB, MIB)
    ));
    assert!(may_follow(&before, &fp(two, 65536, 2 * MIB, MIB)));
    assert!(may_follow(&before, &fp(two, 65536, 8 * MIB, 9 * MIB)));
    // Reading the same input at another offset: neither writes it.
    assert!(may_follow(&before, &fp(two, 65536, MIB + 4, 3 * MIB)));
}

#[test]
fn another_kernel_count_type_or_a_shifted_overlap_waits_for_the_whole_call() {
    const MIB: usize = 1 << 20;
    let (one, two) = (KernelAlgo::OneShot, KernelAlgo::TwoShot);
    let before = fp(two, 65536, MIB, 2 * MIB);
    assert!(!may_follow(&before, &fp(one, 65536, MIB, 2 * MIB)));
    assert!(!may_follow(&before, &fp(two, 65537, MIB, 2 * MIB)));
    let mut f64_call = call(two, 65536, MIB, 2 * MIB);
    f64_call.ty = KernelType::F64;
    assert!(!may_follow(&before, &Footprint::of(two, &f64_call, 4)));
    // Reading the output before at another offset, or writing where it read.
    assert!(!may_follow(&before, &fp(two, 65536, 2 * MIB + 8, 3 * MIB)));
    assert!(!may_follow(&before, &fp(two, 65536, 3 * MIB, MIB + 256)));
    // The all-gather's output is every rank's part: a next output inside it, shifted, meets it.
    let gather = KernelAlgo::AllGather;
    assert!(!may_follow(
        &fp(gather, 1024, MIB, 2 * MIB),
        &fp(gather, 1024, 3 * MIB, 2 * MIB + 4096)
    ));
}

/// Every byte a call touches, with its block-key ([`Footprint::block_key`]) and whether the
/// call writes it.
fn touched(algo: KernelAlgo, c: &KernelCall, nranks: u32) -> Vec<(usize, u64, bool)> {
    let f = Footprint::of(algo, c, nranks);
    let mut out = Vec::new();
    for (e, writes) in [(f.send, false), (f.recv, true)] {
        for o in 0..e.bytes as usize {
            out.push((e.addr + o, f.block_key(nranks, &e, e.addr + o), writes));
        }
    }
    out
}

/// Checked against a model of how the kernels hand out elements: whenever the rule lets a call
/// follow another, every byte both touch, where either writes it, has the same block-key in
/// both (small buffers at every mix of nearby addresses, 2-4 ranks, every kernel).
#[test]
fn a_call_that_may_follow_meets_the_call_before_only_in_the_same_blocks() {
    let addrs = [0usize, 4, 8, 16, 24];
    let mut followed = 0;
    for algo in KernelAlgo::EVERY {
        for nranks in 2..=4u32 {
            for count in 1..=6u64 {
                for &bs in &addrs {
                    for &br in &addrs {
                        for &ns in &addrs {
                            for &nr in &addrs {
                                let (b, n) = (call(algo, count, bs, br), call(algo, count, ns, nr));
                                let (fb, fn_) = (
                                    Footprint::of(algo, &b, nranks),
                                    Footprint::of(algo, &n, nranks),
                                );
                                if !may_follow(&fb, &fn_) {
                                    continue;
                                }
                                followed += 1;
                                let tb = touched(algo, &b, nranks);
                                for (addr, key, w) in touched(algo, &n, nranks) {
                                    for &(a2, k2, w2) in &tb {
                                        if a2 == addr && (w || w2) {
                                            assert_eq!(
                                                key, k2,
                                                "{algo:?} n={nranks} count={count} before ({bs},{br}) next ({ns},{nr}) byte {addr}"
                                            );
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(followed > 1000, "the rule lets calls follow ({followed})");
}

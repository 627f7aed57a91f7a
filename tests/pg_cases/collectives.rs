//! Seed cases 17–24: coalesced collectives, reduce-scatter, single-rank groups, dtypes.

use super::{all_reduce_values, lazy, MakeGroup, Verdict};
use oxccl::buffer::Memory;
use oxccl::{Error, ReduceOp};

/// Five chunks of arange(60) shifted by `shift`, as `T`.
fn chunks<T>(shift: f64, conv: impl Fn(f64) -> T) -> Vec<Vec<T>> {
    (0..5)
        .map(|c| {
            (0..12)
                .map(|i| conv(f64::from(c * 12 + i) + shift))
                .collect()
        })
        .collect()
}

/// Case 17: 30 tensors (f16, f32, f16, f64, f16, f32 × 5 chunks of arange(60)) broadcast in
/// one coalesced batch, from root 0 then 1: every rank ends with the root's data exactly.
pub fn case_17<B: Memory>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    use half::f16;
    let pg = ok!(mk(lazy(rank)));
    for root in [0u32, 1] {
        let mine = f64::from(rank);
        let h = |x: f64| f16::from_f64(x);
        let mut b16: Vec<_> = (0..3)
            .flat_map(|_| chunks(mine, h))
            .map(|c| pg.upload(&c))
            .collect::<oxccl::Result<_>>()
            .map_err(|e| e.to_string())?;
        let mut b32: Vec<_> = (0..2)
            .flat_map(|_| chunks(mine, |x| x as f32))
            .map(|c| pg.upload(&c))
            .collect::<oxccl::Result<_>>()
            .map_err(|e| e.to_string())?;
        let mut b64: Vec<_> = chunks(mine, |x| x)
            .into_iter()
            .map(|c| pg.upload(&c))
            .collect::<oxccl::Result<_>>()
            .map_err(|e| e.to_string())?;
        ensure!(b16.len() + b32.len() + b64.len() == 30, "30 tensors");
        let work = ok!(pg.coalesced(|c| {
            b16.iter_mut().try_for_each(|b| c.broadcast(b, root))?;
            b32.iter_mut().try_for_each(|b| c.broadcast(b, root))?;
            b64.iter_mut().try_for_each(|b| c.broadcast(b, root))
        }));
        ok!(work.wait());
        let want = f64::from(root);
        for (b, c) in b16.iter().zip((0..3).flat_map(|_| chunks(want, h))) {
            ensure!(ok!(pg.download(b)) == c, "f16 from root {root}");
        }
        for (b, c) in b32
            .iter()
            .zip((0..2).flat_map(|_| chunks(want, |x| x as f32)))
        {
            ensure!(ok!(pg.download(b)) == c, "f32 from root {root}");
        }
        for (b, c) in b64.iter().zip(chunks(want, |x| x)) {
            ensure!(ok!(pg.download(b)) == c, "f64 from root {root}");
        }
    }
    Ok(())
}

/// Case 18: all_reduce_coalesced of full(60+i, r+1+i) f32 → N·i + N(N+1)/2.
pub fn case_18<B: Memory>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size() as usize;
    let mut bufs = Vec::new();
    for i in 0..5 {
        bufs.push(ok!(pg.upload(&vec![rank as f32 + 1.0 + i as f32; 60 + i])));
    }
    let mut refs: Vec<_> = bufs.iter_mut().collect();
    ok!(ok!(pg.all_reduce_coalesced(&mut refs, ReduceOp::Sum)).wait());
    for (i, b) in bufs.iter().enumerate() {
        let want = (n * i + n * (n + 1) / 2) as f32;
        ensure!(ok!(pg.download(b)) == vec![want; 60 + i], "tensor {i}");
    }
    Ok(())
}

/// Case 19: five all_reduce calls in one coalescing block → exactly one work, same values.
pub fn case_19<B: Memory>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size() as usize;
    let mut bufs = Vec::new();
    for i in 0..5 {
        bufs.push(ok!(pg.upload(&vec![rank as f32 + 1.0 + i as f32; 60 + i])));
    }
    let before = pg.seq();
    let mut block = ok!(pg.start_coalescing());
    for b in bufs.iter_mut() {
        ok!(block.all_reduce(b, ReduceOp::Sum));
    }
    let work = ok!(block.end());
    ok!(work.wait());
    ensure!(pg.seq() - before == 1, "works: {}", pg.seq() - before);
    ensure!(
        work.info().coalesced && work.op() == oxccl::core::OpKind::AllReduce,
        "{:?}",
        work.info()
    );
    for (i, b) in bufs.iter().enumerate() {
        let want = (n * i + n * (n + 1) / 2) as f32;
        ensure!(ok!(pg.download(b)) == vec![want; 60 + i], "tensor {i}");
    }
    Ok(())
}

/// Case 20: fp8 reductions follow the loaded library (PyTorch refuses them all; NCCL reduces
/// fp8 since 2.24.3): refused as Unsupported before, exact after. The fp8 all_gather of ones
/// is byte-exact wherever fp8 exists.
pub fn case_20<B: Memory>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    use float8::{F8E4M3, F8E5M2};
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size() as usize;
    let has_fp8 = pg
        .backend()
        .features()
        .check(oxccl::Feature::Float8)
        .is_ok();
    let mut a = ok!(pg.upload(&[F8E4M3::from_f32(1.0); 8]));
    let mut refs = vec![&mut a];
    let r1 = pg
        .all_reduce_coalesced(&mut refs, ReduceOp::Sum)
        .and_then(|w| w.wait());
    let input = ok!(pg.upload(&vec![F8E4M3::from_f32(1.0); 2 * n]));
    let mut output = ok!(pg.alloc_zeros::<F8E4M3>(2));
    let r2 = pg
        .reduce_scatter(&input, &mut output, ReduceOp::Sum)
        .and_then(|w| w.wait());
    let in5 = ok!(pg.upload(&vec![F8E5M2::from_f32(1.0); 2 * n]));
    let mut out5 = ok!(pg.alloc_zeros::<F8E5M2>(2));
    let r3 = pg
        .coalesced(|c| c.reduce_scatter(&in5, &mut out5, ReduceOp::Sum))
        .and_then(|w| w.wait());
    if !has_fp8 {
        for r in [r1, r2, r3] {
            ensure!(
                matches!(
                    r,
                    Err(Error::Unsupported {
                        feature: oxccl::Feature::Float8,
                        ..
                    })
                ),
                "{r:?}"
            );
        }
        return Ok(());
    }
    for r in [r1, r2, r3] {
        ensure!(r.is_ok(), "{r:?}");
    }
    let want = n as f32;
    ensure!(
        ok!(pg.download(&a)).iter().all(|x| x.to_f32() == want),
        "all_reduce"
    );
    ensure!(
        ok!(pg.download(&output)).iter().all(|x| x.to_f32() == want),
        "reduce_scatter"
    );
    ensure!(
        ok!(pg.download(&out5)).iter().all(|x| x.to_f32() == want),
        "e5m2"
    );
    let ones = ok!(pg.upload(&[F8E4M3::from_f32(1.0); 160]));
    let mut gathered = ok!(pg.alloc_zeros::<F8E4M3>(160 * n));
    ok!(ok!(pg.all_gather(&ones, &mut gathered)).wait());
    let g = ok!(pg.download(&gathered));
    let one = F8E4M3::from_f32(1.0).to_bits();
    ensure!(
        g.iter().all(|x| x.to_bits() == one),
        "all_gather not byte-exact"
    );
    Ok(())
}

/// Case 21: reduce_scatter of arange(2N) int64 → [2rN, (2r+1)N]; the coalesced variant with
/// two outputs of 2 and inputs of ones → all N.
pub fn case_21<B: Memory>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let n = i64::from(pg.size());
    let r = i64::from(rank);
    let input = ok!(pg.upload(&(0..2 * n).collect::<Vec<i64>>()));
    let mut output = ok!(pg.alloc_zeros::<i64>(2));
    ok!(ok!(pg.reduce_scatter(&input, &mut output, ReduceOp::Sum)).wait());
    ensure!(
        ok!(pg.download(&output)) == vec![2 * r * n, (2 * r + 1) * n],
        "single"
    );
    let ones0 = ok!(pg.upload(&vec![1i64; 2 * n as usize]));
    let ones1 = ok!(pg.upload(&vec![1i64; 2 * n as usize]));
    let mut o0 = ok!(pg.alloc_zeros::<i64>(2));
    let mut o1 = ok!(pg.alloc_zeros::<i64>(2));
    ok!(ok!(pg.coalesced(|c| {
        c.reduce_scatter(&ones0, &mut o0, ReduceOp::Sum)?;
        c.reduce_scatter(&ones1, &mut o1, ReduceOp::Sum)
    }))
    .wait());
    ensure!(ok!(pg.download(&o0)) == vec![n; 2], "coalesced 0");
    ensure!(ok!(pg.download(&o1)) == vec![n; 2], "coalesced 1");
    Ok(())
}

/// Case 22: [r+1]*10 all-reduced on the world and on [0, 1] → [3]*10; on [0] and on [1]
/// (single-rank groups) unchanged; the other rank's single group refuses this rank.
pub fn case_22<B: Memory>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let v = vec![(rank + 1) as f32; 10];
    let g0 = ok!(pg.new_group(&[0], None));
    let g1 = ok!(pg.new_group(&[1], None));
    let both = ok!(pg.new_group(&[0, 1], None));
    if rank > 1 {
        return Ok(());
    }
    ensure!(
        ok!(all_reduce_values(&pg, &v)) == vec![3.0; 10],
        "world (N=2)"
    );
    ensure!(ok!(all_reduce_values(&both, &v)) == vec![3.0; 10], "[0, 1]");
    let (mine, other) = if rank == 0 { (&g0, &g1) } else { (&g1, &g0) };
    ensure!(ok!(all_reduce_values(mine, &v)) == v, "single-rank group");
    let mut b = ok!(pg.upload(&v));
    let e = other.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
    ensure!(
        matches!(&e, Err(e @ Error::InvalidArgument { arg: "group", .. }) if e.to_string().contains("not part of group")),
        "{e:?}"
    );
    Ok(())
}

/// Case 23: one call cannot mix dtypes (a buffer has one element type); ranks that disagree
/// on the dtype are caught. Mock only: NCCL itself would hang on such a mismatch.
pub fn case_23<B: Memory>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size() as usize;
    let r = if rank == 0 {
        let x = ok!(pg.upload(&[1.0f32; 4]));
        let mut y = ok!(pg.alloc_zeros::<f32>(4 * n));
        pg.all_gather(&x, &mut y).and_then(|w| w.wait())
    } else {
        let x = ok!(pg.upload(&[half::f16::ONE; 4]));
        let mut y = ok!(pg.alloc_zeros::<half::f16>(4 * n));
        pg.all_gather(&x, &mut y).and_then(|w| w.wait())
    };
    ensure!(
        matches!(r, Err(Error::Mismatch { what: "dtype", .. })),
        "{r:?}"
    );
    Ok(())
}

/// Case 24: complex64 travels as pairs of f32: gathering complex and real buffers agrees.
pub fn case_24<B: Memory>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size();
    let pairs = |r: u32| {
        let r = r as f32;
        [r, -r, r + 0.5, 2.0]
    };
    let x = ok!(pg.upload(&pairs(rank)));
    let mut y = ok!(pg.alloc_zeros::<f32>(4 * n as usize));
    ok!(ok!(pg.all_gather(&x, &mut y)).wait());
    let want: Vec<f32> = (0..n).flat_map(pairs).collect();
    ensure!(ok!(pg.download(&y)) == want, "gathered");
    Ok(())
}

/// Not a seed case: the defects of PyTorch's coalescing manager, closed. An empty block gives
/// a completed work; an operation refused inside a block (a root outside the group) ends the
/// closure with its error and leaves no group open, so the next block and a plain collective
/// work; a second block cannot open while one is open, and the group's own calls are refused
/// meanwhile.
pub fn coalescing_edge_cases<B: Memory>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size() as f32;
    let empty = ok!(pg.coalesced(|_| Ok(())));
    ok!(empty.wait());
    ensure!(empty.is_success(), "empty block");
    let mut a = ok!(pg.upload(&[1.0f32; 4]));
    let refused = pg.coalesced(|c| c.broadcast(&mut a, 99));
    ensure!(
        matches!(refused, Err(Error::InvalidArgument { arg: "root", .. })),
        "{refused:?}"
    );
    ok!(ok!(pg.coalesced(|c| c.all_reduce(&mut a, ReduceOp::Sum))).wait());
    ensure!(
        ok!(pg.download(&a)) == vec![n; 4],
        "block after a refused one"
    );
    let mut block = ok!(pg.start_coalescing());
    let second = pg.start_coalescing().map(|_| ());
    ensure!(
        matches!(second, Err(Error::InvalidState { .. })),
        "{second:?}"
    );
    let plain = pg.all_reduce(&mut a, ReduceOp::Sum).map(|_| ());
    ensure!(
        matches!(plain, Err(Error::InvalidState { .. })),
        "{plain:?}"
    );
    ok!(block.all_reduce(&mut a, ReduceOp::Sum));
    ok!(ok!(block.end()).wait());
    ok!(ok!(pg.all_reduce(&mut a, ReduceOp::Sum)).wait());
    ensure!(
        ok!(pg.download(&a)) == vec![n * n * n; 4],
        "after the blocks"
    );
    // A guard dropped without end closes its group too.
    {
        let mut dropped = ok!(pg.start_coalescing());
        ok!(dropped.all_reduce(&mut a, ReduceOp::Sum));
    }
    ok!(ok!(pg.all_reduce(&mut a, ReduceOp::Sum)).wait());
    Ok(())
}

//! Seed cases 17–24: coalesced collectives, reduce-scatter, single-rank groups, dtypes.

use super::{all_reduce_values, lazy, MakeGroup, Verdict};
use oxccl::pg::PgBackend;
use oxccl::pg::ProcessGroup;
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
pub fn case_17<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
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
pub fn case_18<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
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
pub fn case_19<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
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
/// fp8 since 2.24.3): refused as Unsupported naming float8 before, exact after. The fp8
/// all_gather of ones(10, 16) is byte-exact, e4m3 and e5m2, on any library (`case_20_gather`,
/// which c10d runs on any NCCL: before 2.24.3 fp8 travels as uint8).
pub fn case_20<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    use float8::{F8E4M3, F8E5M2};
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size() as usize;
    let has_fp8 = pg
        .backend()
        .features()
        .check(oxccl::Feature::Float8)
        .is_ok();
    let mut a = ok!(pg.upload(&[F8E4M3::from_f32(1.0); 8]));
    let mut a2 = ok!(pg.upload(&[F8E4M3::from_f32(2.0); 3]));
    let mut refs = vec![&mut a, &mut a2];
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
    let mut out5b = ok!(pg.alloc_zeros::<F8E5M2>(2));
    let r3 = pg
        .coalesced(|c| {
            c.reduce_scatter(&in5, &mut out5, ReduceOp::Sum)?;
            c.reduce_scatter(&in5, &mut out5b, ReduceOp::Sum)
        })
        .and_then(|w| w.wait());
    if !has_fp8 {
        for (what, r) in [
            ("all_reduce_coalesced", r1),
            ("reduce_scatter", r2),
            ("coalesced reduce_scatter", r3),
        ] {
            ensure!(
                matches!(
                    &r,
                    Err(e @ Error::Unsupported {
                        feature: oxccl::Feature::Float8,
                        ..
                    }) if e.to_string().contains("float8") && e.to_string().contains("2.24.3")
                ),
                "{what}: {r:?}"
            );
        }
        // Nothing was written.
        ensure!(
            ok!(pg.download(&output)) == vec![F8E4M3::from_f32(0.0); 2],
            "refused reduce_scatter wrote"
        );
        // The refusals leave the group working, and fp8 still moves (as uint8).
        return case_20_gather(mk, rank);
    }
    for (what, r) in [
        ("all_reduce_coalesced", r1),
        ("reduce_scatter", r2),
        ("coalesced reduce_scatter", r3),
    ] {
        ensure!(r.is_ok(), "{what}: {r:?}");
    }
    let want = n as f32;
    ensure!(
        ok!(pg.download(&a)).iter().all(|x| x.to_f32() == want),
        "all_reduce"
    );
    ensure!(
        ok!(pg.download(&a2))
            .iter()
            .all(|x| x.to_f32() == 2.0 * want),
        "all_reduce, second buffer"
    );
    ensure!(
        ok!(pg.download(&output)).iter().all(|x| x.to_f32() == want),
        "reduce_scatter"
    );
    for (k, o) in [&out5, &out5b].into_iter().enumerate() {
        ensure!(
            ok!(pg.download(o)).iter().all(|x| x.to_f32() == want),
            "e5m2 {k}"
        );
    }
    case_20_gather(mk, rank)
}

/// Case 20's all_gather_into_tensor of ones(10, 16) in fp8, e4m3 and e5m2, on this group's
/// library: every byte of the output is the byte of 1.0.
pub fn case_20_gather<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    use float8::{F8E4M3, F8E5M2};
    fn gather<B: PgBackend, T: oxccl::Element>(
        pg: &ProcessGroup<B>,
        one: T,
        bits: fn(T) -> u8,
    ) -> Verdict {
        let n = pg.size() as usize;
        let ones = ok!(pg.upload(&[one; 160]));
        let mut gathered = ok!(pg.alloc_zeros::<T>(160 * n));
        ok!(ok!(pg.all_gather(&ones, &mut gathered)).wait());
        let g: Vec<u8> = ok!(pg.download(&gathered)).into_iter().map(bits).collect();
        ensure!(
            g == vec![bits(one); 160 * n],
            "all_gather not byte-exact: {:?}",
            &g[..4]
        );
        Ok(())
    }
    let pg = ok!(mk(lazy(rank)));
    gather(&pg, F8E4M3::from_f32(1.0), |x| x.to_bits())?;
    gather(&pg, F8E5M2::from_f32(1.0), |x| x.to_bits())
}

/// Case 20's rule for every operation that only moves data (c10d sends fp8 as uint8 for all
/// of them): broadcast, all_to_all(_v), all_gather_v, scatter, gather and a send/recv ring
/// carry fp8 e4m3 and e5m2 byte-exact on this group's library, every one of the 256 bit
/// patterns included (NaNs too), before NCCL 2.24.3 as after.
pub fn case_20_moves<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    use float8::{F8E4M3, F8E5M2};
    let pg = ok!(mk(lazy(rank)));
    moves(&pg, rank, F8E4M3::from_bits, |x| x.to_bits())?;
    moves(&pg, rank, F8E5M2::from_bits, |x| x.to_bits())
}

/// [`case_20_moves`] for one element type, built from and read back as its bits.
fn moves<B: PgBackend, T: oxccl::Element>(
    pg: &ProcessGroup<B>,
    rank: u32,
    of: fn(u8) -> T,
    bits: fn(T) -> u8,
) -> Verdict {
    let n = pg.size() as usize;
    let me = rank as usize;
    // Rank q's `len` bytes for the call `salt`: every byte value appears across a call.
    let pat = |q: usize, len: usize, salt: usize| -> Vec<u8> {
        (0..len)
            .map(|i| ((q * 37 + i * 11 + salt * 101) % 256) as u8)
            .collect()
    };
    let up = |b: &[u8]| pg.upload(&b.iter().map(|x| of(*x)).collect::<Vec<T>>());
    let down = |b: &B::Buf<T>| -> Result<Vec<u8>, String> {
        Ok(ok!(pg.download(b)).into_iter().map(bits).collect())
    };
    // broadcast from the last rank, in place
    let root = n - 1;
    let mut b = ok!(up(&pat(me, 256, 1)));
    ok!(ok!(pg.broadcast(&mut b, root as u32)).wait());
    ensure!(down(&b)? == pat(root, 256, 1), "broadcast");
    // all_to_all: part q of rank p's input lands in part p of rank q's output
    let x = ok!(up(&pat(me, 8 * n, 2)));
    let mut y = ok!(pg.alloc_zeros::<T>(8 * n));
    ok!(ok!(pg.all_to_all(&x, &mut y)).wait());
    let want: Vec<u8> = (0..n)
        .flat_map(|p| pat(p, 8 * n, 2)[me * 8..(me + 1) * 8].to_vec())
        .collect();
    ensure!(down(&y)? == want, "all_to_all");
    // all_to_all_v: rank p sends q + 1 elements to rank q
    let sc: Vec<usize> = (0..n).map(|q| q + 1).collect();
    let rc = vec![me + 1; n];
    let x = ok!(up(&pat(me, n * (n + 1) / 2, 3)));
    let mut y = ok!(pg.alloc_zeros::<T>(n * (me + 1)));
    ok!(ok!(pg.all_to_all_v(&x, &mut y, &sc, &rc)).wait());
    let at = me * (me + 1) / 2;
    let want: Vec<u8> = (0..n)
        .flat_map(|p| pat(p, n * (n + 1) / 2, 3)[at..at + me + 1].to_vec())
        .collect();
    ensure!(down(&y)? == want, "all_to_all_v");
    // all_gather_v: rank q contributes q + 2 elements
    let counts: Vec<usize> = (0..n).map(|q| q + 2).collect();
    let x = ok!(up(&pat(me, me + 2, 4)));
    let mut y = ok!(pg.alloc_zeros::<T>(counts.iter().sum()));
    ok!(ok!(pg.all_gather_v(&x, &mut y, &counts)).wait());
    let want: Vec<u8> = (0..n).flat_map(|q| pat(q, q + 2, 4)).collect();
    ensure!(down(&y)? == want, "all_gather_v");
    // scatter from rank 0, gather to rank 0
    let whole = ok!(up(&pat(0, 8 * n, 5)));
    let mut part = ok!(pg.alloc_zeros::<T>(8));
    ok!(ok!(pg.scatter((me == 0).then_some(&whole), &mut part, 0)).wait());
    ensure!(
        down(&part)? == pat(0, 8 * n, 5)[me * 8..(me + 1) * 8],
        "scatter"
    );
    let x = ok!(up(&pat(me, 8, 6)));
    let mut all = ok!(pg.alloc_zeros::<T>(8 * n));
    ok!(ok!(pg.gather(&x, (me == 0).then_some(&mut all), 0)).wait());
    if me == 0 {
        let want: Vec<u8> = (0..n).flat_map(|q| pat(q, 8, 6)).collect();
        ensure!(down(&all)? == want, "gather");
    }
    // a send/recv ring in one block
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let x = ok!(up(&pat(me, 64, 7)));
    let mut y = ok!(pg.alloc_zeros::<T>(64));
    ok!(ok!(pg.coalesced(|c| {
        c.send(&x, next as u32)?;
        c.recv(&mut y, prev as u32)
    }))
    .wait());
    ensure!(down(&y)? == pat(prev, 64, 7), "send/recv");
    Ok(())
}

/// Case 21: reduce_scatter of arange(2N) int64 → [2rN, (2r+1)N]; the coalesced variant with
/// two outputs of 2 and inputs of ones → all N.
pub fn case_21<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
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

/// Case 22: [r+1]*10 all-reduced on the world and on [0, 1] → [3]*10 (the world: N(N+1)/2
/// with more ranks); on [0] and on [1] (single-rank groups) unchanged; the other rank's single
/// group refuses this rank.
pub fn case_22<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let v = vec![(rank + 1) as f32; 10];
    let g0 = ok!(pg.new_group(&[0], None));
    let g1 = ok!(pg.new_group(&[1], None));
    let both = ok!(pg.new_group(&[0, 1], None));
    // The world (every rank: N(N+1)/2, the case's [3]*10 at N = 2); the rest is ranks 0, 1.
    let n = pg.size() as f32;
    ensure!(
        ok!(all_reduce_values(&pg, &v)) == vec![n * (n + 1.0) / 2.0; 10],
        "world (N={n})"
    );
    if rank > 1 {
        return Ok(());
    }
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

/// The dtype-mixing calls of case 23, each issued with elements `one` of this rank's type.
const MIXED_CALLS: [&str; 10] = [
    "all_gather",
    "all_gather_coalesced",
    "all_reduce_coalesced",
    "reduce_scatter",
    "reduce_scatter_coalesced",
    "all_to_all_single",
    "all_to_all",
    "scatter",
    "gather",
    "broadcast",
];

/// Issues case 23's call `what` with 4 elements per rank of `one`'s type and waits for it.
fn mixed_call<B: PgBackend, T: oxccl::Element>(
    pg: &ProcessGroup<B>,
    rank: u32,
    what: &str,
    one: T,
) -> oxccl::Result<()> {
    let n = pg.size() as usize;
    let x = pg.upload(&[one; 4])?;
    let xs = pg.upload(&vec![one; 4 * n])?;
    let mut y = pg.alloc_zeros::<T>(4 * n)?;
    let mut y2 = pg.alloc_zeros::<T>(4 * n)?;
    let mut o = pg.alloc_zeros::<T>(4)?;
    let mut o2 = pg.alloc_zeros::<T>(4)?;
    let w = match what {
        "all_gather" => pg.all_gather(&x, &mut y)?,
        "all_gather_coalesced" => pg.coalesced(|c| {
            c.all_gather(&x, &mut y)?;
            c.all_gather(&x, &mut y2)
        })?,
        "all_reduce_coalesced" => pg.all_reduce_coalesced(&mut [&mut o, &mut o2], ReduceOp::Sum)?,
        "reduce_scatter" => pg.reduce_scatter(&xs, &mut o, ReduceOp::Sum)?,
        "reduce_scatter_coalesced" => pg.coalesced(|c| {
            c.reduce_scatter(&xs, &mut o, ReduceOp::Sum)?;
            c.reduce_scatter(&xs, &mut o2, ReduceOp::Sum)
        })?,
        "all_to_all_single" => pg.all_to_all(&xs, &mut y)?,
        "all_to_all" => pg.all_to_all_v(&xs, &mut y, &vec![4; n], &vec![4; n])?,
        "scatter" => pg.scatter((rank == 0).then_some(&xs), &mut o2, 0)?,
        "gather" => pg.gather(&x, (rank == 0).then_some(&mut y), 0)?,
        "broadcast" => pg.broadcast(&mut o, 0)?,
        other => unreachable!("{other}"),
    };
    w.wait()
}

/// Case 23: one call cannot mix dtypes (a buffer has one element type, so c10d's lists of
/// f32 and f16 tensors cannot be written); ranks that disagree on the dtype of a call are
/// caught instead, on every rank and for every kind of call, naming both types. Mock only:
/// NCCL itself would hang on such a mismatch.
pub fn case_23<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    for what in MIXED_CALLS {
        // A fresh group per call: a mismatch fails the communicator of the call.
        let pg = ok!(mk(lazy(rank)));
        let r = if rank == 0 {
            mixed_call(&pg, rank, what, 1.0f32)
        } else {
            mixed_call(&pg, rank, what, half::f16::ONE)
        };
        ensure!(
            matches!(&r, Err(Error::Mismatch { what: "dtype", detail })
                if detail.contains("float32") && detail.contains("float16")),
            "{what}: {r:?}"
        );
        ensure!(
            r.unwrap_err().to_string().contains("disagree on dtype"),
            "{what}"
        );
        pg.abort("end of the call");
    }
    Ok(())
}

/// Case 24: complex64 travels as pairs of f32 (c10d's view_as_real; oxccl has no complex
/// type). An all_gather of pairs keeps every pair bit for bit (signed zeros, NaN payloads,
/// subnormals: no arithmetic touches them), alone and in one block with two real gathers
/// (c10d's list mixing one complex64 with two f32).
pub fn case_24<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size();
    // Two complex numbers (re, im) per rank.
    let pairs = |r: u32| {
        let r = r as f32;
        [
            r,
            -0.0,
            f32::from_bits(0x7fc0_0000 | (r as u32 + 1)),
            f32::from_bits(1 + r as u32),
        ]
    };
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let want: Vec<u32> = bits((0..n).flat_map(pairs).collect());
    let x = ok!(pg.upload(&pairs(rank)));
    let mut y = ok!(pg.alloc_zeros::<f32>(4 * n as usize));
    ok!(ok!(pg.all_gather(&x, &mut y)).wait());
    ensure!(bits(ok!(pg.download(&y))) == want, "gathered pairs");
    let reals = [rank as f32 + 0.5; 2];
    let r1 = ok!(pg.upload(&reals));
    let mut y1 = ok!(pg.alloc_zeros::<f32>(2 * n as usize));
    let mut y2 = ok!(pg.alloc_zeros::<f32>(2 * n as usize));
    let mut yc = ok!(pg.alloc_zeros::<f32>(4 * n as usize));
    ok!(ok!(pg.coalesced(|c| {
        c.all_gather(&x, &mut yc)?;
        c.all_gather(&r1, &mut y1)?;
        c.all_gather(&r1, &mut y2)
    }))
    .wait());
    ensure!(bits(ok!(pg.download(&yc))) == want, "pairs in the block");
    let real_want: Vec<f32> = (0..n).flat_map(|r| [r as f32 + 0.5; 2]).collect();
    ensure!(ok!(pg.download(&y1)) == real_want, "first real gather");
    ensure!(ok!(pg.download(&y2)) == real_want, "second real gather");
    Ok(())
}

/// Not a seed case: the defects of PyTorch's coalescing manager, closed. An empty block gives
/// a completed work; an operation refused inside a block (a root outside the group) ends the
/// closure with its error and leaves no group open, so the next block and a plain collective
/// work; a second block cannot open while one is open, and the group's own calls are refused
/// meanwhile.
pub fn coalescing_edge_cases<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
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

//! Seed cases 25, 26 and 31: membership, subgroups with global peers, config pass-through.

use super::{all_reduce_values, lazy, MakeGroup, Verdict};
use oxccl::pg::PgBackend;
use oxccl::pg::PgOptions;
use oxccl::{CommConfig, ConfigField, Error, ReduceOp};

/// Case 25: group [1]: group rank of global 1 is 0, of global 0 "not part of group"; global
/// rank of group rank 0 is 1; ranks [1]; once destroyed, "not registered".
pub fn case_25<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let g = ok!(pg.new_group(&[1], None));
    ensure!(ok!(g.group_rank_of(1)) == 0, "group rank of 1");
    let e = g.group_rank_of(0);
    ensure!(
        matches!(&e, Err(e @ Error::InvalidArgument { arg: "global_rank", .. })
            if e.to_string().contains("global rank 0 is not part of group")),
        "{e:?}"
    );
    ensure!(ok!(g.global_rank_of(0)) == 1, "global rank of 0");
    let e = g.global_rank_of(1);
    ensure!(
        matches!(
            e,
            Err(Error::InvalidArgument {
                arg: "group_rank",
                ..
            })
        ),
        "global rank of group rank 1: {e:?}"
    );
    ensure!(g.ranks() == [1], "{:?}", g.ranks());
    ensure!(
        g.rank() == (rank == 1).then_some(0),
        "this rank in the group: {:?}",
        g.rank()
    );
    if rank == 1 {
        g.destroy();
        for e in [
            g.group_rank_of(1).map(|_| ()),
            g.global_rank_of(0).map(|_| ()),
        ] {
            ensure!(
                matches!(&e, Err(e @ Error::InvalidArgument { arg: "group", .. })
                    if e.to_string().contains("not registered")),
                "{e:?}"
            );
        }
        // The default group is still registered.
        ensure!(ok!(pg.group_rank_of(1)) == 1, "default group");
    }
    Ok(())
}

/// Case 26 (N = 4): A = [0, 1], B = [2, 3], roots and peers as global ranks: gather →
/// ones·s by member s; reduce → ones·(2·base+1); send/recv → ones·(peer+1); broadcast →
/// ones·(base+1); scatter → ones·r. With fewer ranks it runs on the pairs that fit.
pub fn case_26<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(lazy(rank)));
    let n = pg.size();
    let pairs: Vec<Vec<u32>> = (0..n / 2).map(|p| vec![2 * p, 2 * p + 1]).collect();
    let (mine, all) = ok!(pg.new_subgroups_by_enumeration(&pairs));
    ensure!(all.len() == pairs.len(), "subgroups");
    let base = mine.ranks()[0];
    let peer = if rank == base { base + 1 } else { base };
    let ones = |k: u32| vec![k as f32; 4];

    let x = ok!(pg.upload(&ones(rank)));
    let mut g = ok!(pg.alloc_zeros::<f32>(8));
    let root_out = if rank == base { Some(&mut g) } else { None };
    ok!(ok!(mine.gather(&x, root_out, base)).wait());
    let gathered = ok!(pg.download(&g));
    if rank == base {
        let want: Vec<f32> = [base, base + 1].iter().flat_map(|&m| ones(m)).collect();
        ensure!(gathered == want, "gather {gathered:?}");
    }

    let mut red = ok!(pg.upload(&ones(rank)));
    ok!(ok!(mine.reduce(&mut red, base, ReduceOp::Sum)).wait());
    let want = if rank == base {
        ones(2 * base + 1)
    } else {
        ones(rank)
    };
    ensure!(ok!(pg.download(&red)) == want, "reduce");

    let s = ok!(pg.upload(&ones(rank + 1)));
    let mut rcv = ok!(pg.alloc_zeros::<f32>(4));
    ok!(ok!(mine.coalesced(|c| {
        c.send(&s, peer)?;
        c.recv(&mut rcv, peer)
    }))
    .wait());
    ensure!(
        ok!(pg.download(&rcv)) == ones(peer + 1),
        "send/recv in a batch"
    );
    let mut rcv2 = ok!(pg.alloc_zeros::<f32>(4));
    // Unbatched, ordered so the pair cannot deadlock: the lower rank sends first.
    if rank < peer {
        ok!(ok!(mine.send(&s, peer)).wait());
        ok!(ok!(mine.recv(&mut rcv2, peer)).wait());
    } else {
        ok!(ok!(mine.recv(&mut rcv2, peer)).wait());
        ok!(ok!(mine.send(&s, peer)).wait());
    }
    ensure!(ok!(pg.download(&rcv2)) == ones(peer + 1), "send/recv");

    let mut bc = ok!(pg.upload(&ones(rank + 1)));
    ok!(ok!(mine.broadcast(&mut bc, base)).wait());
    ensure!(ok!(pg.download(&bc)) == ones(base + 1), "broadcast");

    let parts: Vec<f32> = mine.ranks().iter().flat_map(|&m| ones(m)).collect();
    let src = ok!(pg.upload(&parts));
    let mut sc = ok!(pg.alloc_zeros::<f32>(4));
    let root_in = if rank == base { Some(&src) } else { None };
    ok!(ok!(mine.scatter(root_in, &mut sc, base)).wait());
    ensure!(ok!(pg.download(&sc)) == ones(rank), "scatter");

    // c10d's local-sync groups (made by their members alone; here every rank calls
    // new_group in the same order, as oxccl asks, and the partial groups are made by their
    // members alone at their first operation): a non-member gets no rank in the group and
    // its collectives are refused; each pair all-gathers [g, r] into [[g, 2g], [g, 2g+1]];
    // two groups of the same members are independent.
    let mut dups = Vec::new();
    for _ in 0..2 {
        let made: Vec<_> = pairs
            .iter()
            .map(|p| pg.new_group(p, None))
            .collect::<oxccl::Result<_>>()
            .map_err(|e| e.to_string())?;
        dups.push(made);
    }
    ensure!(
        dups[0][0].uid() != dups[1][0].uid(),
        "duplicate groups share uid {}",
        dups[0][0].uid()
    );
    let g = rank / 2;
    for (k, made) in dups.iter().enumerate() {
        for (p, grp) in made.iter().enumerate() {
            if p as u32 != g {
                ensure!(
                    grp.rank().is_none(),
                    "non-member of pair {p}: {:?}",
                    grp.rank()
                );
                let mut b = ok!(pg.upload(&[1.0f32]));
                let r = grp.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
                ensure!(
                    matches!(&r, Err(e @ oxccl::Error::InvalidArgument { arg: "group", .. })
                        if e.to_string().contains("not part of group")),
                    "non-member's op on pair {p}: {r:?}"
                );
            }
        }
        let grp = &made[g as usize];
        ensure!(grp.rank() == Some(rank % 2), "{:?}", grp.rank());
        let x = ok!(pg.upload(&[g as i64, rank as i64]));
        let mut out = ok!(pg.upload(&[-1i64; 4]));
        ok!(ok!(grp.all_gather(&x, &mut out)).wait());
        let want = vec![g as i64, 2 * g as i64, g as i64, 2 * g as i64 + 1];
        ensure!(
            ok!(pg.download(&out)) == want,
            "duplicate {k}: local-sync all_gather"
        );
    }
    Ok(())
}

/// Case 31: maxCTAs 4, minCTAs 2, cgaClusterSize 2, netName "Socket" go to the communicator,
/// and the subgroup all_reduce still gives [3]*10 (on NCCL, NCCL_DEBUG=INFO shows them).
pub fn case_31<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let config = ok!(CommConfig::new()
        .set(ConfigField::MaxCtas, 4)
        .and_then(|c| c.set(ConfigField::MinCtas, 2))
        .and_then(|c| c.set(ConfigField::CgaClusterSize, 2))
        .and_then(|c| c.net_name("Socket")));
    let pg = ok!(mk(PgOptions {
        config,
        ..lazy(rank)
    }));
    let sub = ok!(pg.new_group(&[0, 1], None));
    if rank > 1 {
        return Ok(());
    }
    let kept = &sub.options().config;
    let got = (
        kept.int(ConfigField::MaxCtas),
        kept.int(ConfigField::MinCtas),
        kept.int(ConfigField::CgaClusterSize),
        kept.string(ConfigField::NetName),
    );
    ensure!(
        got == (Some(4), Some(2), Some(2), Some("Socket")),
        "config kept: {got:?}"
    );
    let v = vec![(rank + 1) as f32; 10];
    ensure!(
        ok!(all_reduce_values(&sub, &v)) == vec![3.0; 10],
        "subgroup all_reduce"
    );
    Ok(())
}

/// Case 31 on a library older than the config fields (NCCL < 2.17): the fields are refused,
/// naming the first one and the release it needs, never dropped silently: at construction
/// when the device is bound, at the first operation when lazy.
pub fn case_31_before_2_17<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let config = ok!(CommConfig::new()
        .set(ConfigField::MaxCtas, 4)
        .and_then(|c| c.set(ConfigField::MinCtas, 2))
        .and_then(|c| c.set(ConfigField::CgaClusterSize, 2))
        .and_then(|c| c.net_name("Socket")));
    let refused = |r: &oxccl::Result<()>| {
        matches!(r, Err(e @ Error::InvalidArgument { arg: "config", .. })
            if e.to_string().contains("`cgaClusterSize` needs NCCL 2.17.1"))
    };
    let eager = mk(PgOptions {
        config: config.clone(),
        ..super::eager(rank)
    })
    .map(|_| ());
    ensure!(refused(&eager), "eager: {eager:?}");
    let pg = ok!(mk(PgOptions {
        config,
        ..lazy(rank)
    }));
    let mut b = ok!(pg.upload(&[1.0f32]));
    let r = pg.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
    ensure!(refused(&r), "lazy, first op: {r:?}");
    Ok(())
}

/// Not a seed case (found by the `pg` fuzz target): a subgroup of a parent whose communicator
/// was never made works among its members alone; buffers come from the parent without making
/// the parent's communicator (which the non-member would have to join).
pub fn subgroup_of_a_lazy_parent<B: PgBackend>(mk: MakeGroup<'_, B>, rank: u32) -> Verdict {
    let pg = ok!(mk(PgOptions {
        timeout: std::time::Duration::from_secs(5),
        ..lazy(rank)
    }));
    let members: Vec<u32> = (0..pg.size() - 1).collect();
    let sub = ok!(pg.new_group(&members, None));
    let mut b = ok!(pg.upload(&[1.0f32; 8]));
    if sub.rank().is_some() {
        ok!(ok!(sub.all_reduce(&mut b, ReduceOp::Sum)).wait());
        let want = members.len() as f32;
        ensure!(ok!(pg.download(&b)) == vec![want; 8], "subgroup sum");
    }
    ensure!(
        pg.comm_state().is_none(),
        "the parent's communicator was made"
    );
    Ok(())
}

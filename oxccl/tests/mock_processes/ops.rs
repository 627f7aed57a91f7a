//! Every collective and p2p op of the process group, for one element type, against a host
//! reference computed from the formula every rank fills its buffers with.

use oxccl::pg::PgBackend;
use oxccl::pg::ProcessGroup;
use oxccl::{Element, ReduceOp, Result};
use std::fmt::Debug;

/// An element type of the tests: built from small integers, exact in every type.
pub trait El:
    Element + From<i16> + PartialEq + Debug + PartialOrd + std::ops::Add<Output = Self>
{
}
impl<T: Element + From<i16> + PartialEq + Debug + PartialOrd + std::ops::Add<Output = T>> El for T {}

/// What rank `r` holds at index `i`.
fn v<T: El>(r: u32, i: usize) -> T {
    T::from(((r as usize * 7 + i * 3) % 13) as i16)
}

fn vals<T: El>(r: u32, from: usize, n: usize) -> Vec<T> {
    (from..from + n).map(|i| v(r, i)).collect()
}

fn sum<T: El>(n: u32, i: usize) -> T {
    (1..n).fold(v::<T>(0, i), |a, r| a + v(r, i))
}

fn max<T: El>(n: u32, i: usize) -> T {
    (1..n).fold(v::<T>(0, i), |a, r| {
        let b = v(r, i);
        if b > a {
            b
        } else {
            a
        }
    })
}

fn check<T: El>(what: &str, got: Vec<T>, want: Vec<T>) -> Result<usize> {
    assert_eq!(got, want, "{what} on {:?}", T::DTYPE);
    Ok(1)
}

/// Runs every op once on `pg` with elements of `T`; returns how many results were checked.
pub fn all_ops<T: El, B: PgBackend>(pg: &ProcessGroup<B>) -> Result<usize> {
    let (me, n) = (pg.global_rank(), pg.size());
    let c = 5usize;
    let nu = n as usize;
    let mut checked = 0;

    let mut b = pg.upload(&vals::<T>(me, 0, c))?;
    pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
    checked += check(
        "all_reduce sum",
        pg.download(&b)?,
        (0..c).map(|i| sum(n, i)).collect(),
    )?;

    let mut b = pg.upload(&vals::<T>(me, 0, c))?;
    pg.all_reduce(&mut b, ReduceOp::Max)?.wait()?;
    checked += check(
        "all_reduce max",
        pg.download(&b)?,
        (0..c).map(|i| max(n, i)).collect(),
    )?;

    let root = 1 % n;
    let mut b = pg.upload(&vals::<T>(me, 0, c))?;
    pg.broadcast(&mut b, root)?.wait()?;
    checked += check("broadcast", pg.download(&b)?, vals(root, 0, c))?;

    let mut b = pg.upload(&vals::<T>(me, 0, c))?;
    pg.reduce(&mut b, root, ReduceOp::Sum)?.wait()?;
    if me == root {
        checked += check(
            "reduce",
            pg.download(&b)?,
            (0..c).map(|i| sum(n, i)).collect(),
        )?;
    }

    let s = pg.upload(&vals::<T>(me, 0, c))?;
    let mut r = pg.alloc_zeros::<T>(c * nu)?;
    pg.all_gather(&s, &mut r)?.wait()?;
    let want: Vec<T> = (0..n).flat_map(|p| vals(p, 0, c)).collect();
    checked += check("all_gather", pg.download(&r)?, want.clone())?;

    let s = pg.upload(&vals::<T>(me, 0, c * nu))?;
    let mut r = pg.alloc_zeros::<T>(c)?;
    pg.reduce_scatter(&s, &mut r, ReduceOp::Sum)?.wait()?;
    let want_rs: Vec<T> = (0..c).map(|i| sum(n, me as usize * c + i)).collect();
    checked += check("reduce_scatter", pg.download(&r)?, want_rs)?;

    let s = pg.upload(&vals::<T>(me, 0, c * nu))?;
    let mut r = pg.alloc_zeros::<T>(c * nu)?;
    pg.all_to_all(&s, &mut r)?.wait()?;
    let want_a2a: Vec<T> = (0..n).flat_map(|p| vals(p, me as usize * c, c)).collect();
    checked += check("all_to_all", pg.download(&r)?, want_a2a)?;

    // v-collectives: rank q's part has q + 1 elements.
    let counts: Vec<usize> = (1..=nu).collect();
    let offs: Vec<usize> = counts
        .iter()
        .scan(0, |a, c| {
            let o = *a;
            *a += c;
            Some(o)
        })
        .collect();
    let total: usize = counts.iter().sum();
    let mine = counts[me as usize];
    let s = pg.upload(&vals::<T>(me, 0, mine))?;
    let mut r = pg.alloc_zeros::<T>(total)?;
    pg.all_gather_v(&s, &mut r, &counts)?.wait()?;
    let want_agv: Vec<T> = (0..n)
        .flat_map(|p| vals(p, 0, counts[p as usize]))
        .collect();
    checked += check("all_gather_v", pg.download(&r)?, want_agv)?;

    let s = pg.upload(&vals::<T>(me, 0, total))?;
    let mut r = pg.alloc_zeros::<T>(mine)?;
    pg.reduce_scatter_v(&s, &mut r, &counts, ReduceOp::Sum)?
        .wait()?;
    let want_rsv: Vec<T> = (0..mine).map(|i| sum(n, offs[me as usize] + i)).collect();
    checked += check("reduce_scatter_v", pg.download(&r)?, want_rsv)?;

    // all_to_all_v: every rank sends q + 1 elements to rank q (from offset offs[q]).
    let recv_counts = vec![mine; nu];
    let s = pg.upload(&vals::<T>(me, 0, total))?;
    let mut r = pg.alloc_zeros::<T>(mine * nu)?;
    pg.all_to_all_v(&s, &mut r, &counts, &recv_counts)?.wait()?;
    let want_a2av: Vec<T> = (0..n)
        .flat_map(|p| vals(p, offs[me as usize], mine))
        .collect();
    checked += check("all_to_all_v", pg.download(&r)?, want_a2av)?;

    let s = pg.upload(&vals::<T>(me, 0, c * nu))?;
    let mut r = pg.alloc_zeros::<T>(c)?;
    pg.scatter((me == root).then_some(&s), &mut r, root)?
        .wait()?;
    checked += check("scatter", pg.download(&r)?, vals(root, me as usize * c, c))?;

    let s = pg.upload(&vals::<T>(me, 0, c))?;
    let mut r = pg.alloc_zeros::<T>(c * nu)?;
    pg.gather(&s, (me == root).then_some(&mut r), root)?
        .wait()?;
    if me == root {
        checked += check("gather", pg.download(&r)?, want)?;
    }

    // A ring: send to the next rank (eager on the mock), then receive from the previous.
    let s = pg.upload(&vals::<T>(me, 0, c))?;
    let mut r = pg.alloc_zeros::<T>(c)?;
    let sw = pg.send(&s, (me + 1) % n)?;
    pg.recv(&mut r, (me + n - 1) % n)?.wait()?;
    sw.wait()?;
    checked += check(
        "send/recv ring",
        pg.download(&r)?,
        vals((me + n - 1) % n, 0, c),
    )?;

    pg.barrier()?.wait()?;
    Ok(checked + 1)
}

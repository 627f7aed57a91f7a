//! `oxccl::launch::spawn`: ranks as threads of this process, without a launcher, on the
//! backend `OXCCL_BACKEND` picks (the mock here), each with its default group; outputs come
//! back by rank, and a bad world size or a failing rank comes back as the typed error.

use oxccl::launch::{spawn, WithProcessGroup};
use oxccl::pg::{PgBackend, ProcessGroup};
use oxccl::{Error, ReduceOp, Result};

fn on_mock() {
    // Every test of this binary sets the same value, so their order does not matter.
    std::env::set_var("OXCCL_BACKEND", "mock");
}

/// Each rank contributes rank + 1, all-reduced and all-gathered.
#[derive(Clone)]
struct SumAndGather;

impl WithProcessGroup for SumAndGather {
    type Output = (u32, Vec<u32>, Vec<u32>);
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<Self::Output> {
        let r = pg.global_rank();
        let mut x = pg.upload(&[r + 1; 3])?;
        pg.all_reduce(&mut x, ReduceOp::Sum)?.wait()?;
        let mine = pg.upload(&[r * 10])?;
        let mut all = pg.alloc_zeros::<u32>(pg.size() as usize)?;
        pg.all_gather(&mine, &mut all)?.wait()?;
        Ok((r, pg.download(&x)?, pg.download(&all)?))
    }
}

#[test]
fn every_rank_runs_and_its_output_comes_back_by_rank() {
    on_mock();
    let out = spawn(3, SumAndGather).unwrap();
    assert_eq!(
        out,
        [0, 1, 2].map(|r| (r, vec![6u32; 3], vec![0, 10, 20])),
        "rank order, the sum 1+2+3, the gathered ranks"
    );
}

#[test]
fn a_world_of_no_rank_is_refused() {
    on_mock();
    match spawn(0, SumAndGather) {
        Err(Error::InvalidArgument { arg: "world", .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// A rank whose job fails (before any collective, so no other rank waits for it) makes
/// `spawn` return that error once every rank has ended.
#[derive(Clone)]
struct FailOn(u32);

impl WithProcessGroup for FailOn {
    type Output = u32;
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<u32> {
        if pg.global_rank() == self.0 {
            return Err(Error::invalid(
                "step",
                format_args!("a step rank {} can run", self.0),
            ));
        }
        Ok(pg.global_rank())
    }
}

#[test]
fn a_failing_rank_fails_the_spawn_with_its_error() {
    on_mock();
    match spawn(3, FailOn(1)) {
        Err(Error::InvalidArgument {
            arg: "step",
            expected,
        }) => {
            assert!(expected.contains("rank 1"), "{expected}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(spawn(2, FailOn(9)).unwrap(), [0, 1]);
}

//! One rank of a measurement's world as the code run on every rank sees it: its process
//! group (and on NCCL a `Comm` of the same ranks and the library), and what the ranks do
//! together whatever their backend: line up, and reduce a few numbers.

use oxccl::mock::MockBackend;
use oxccl::pg::{PgBackend, ProcessGroup};
use oxccl::{Comm, Nccl, ReduceOp, Result};
use std::cell::RefCell;
use std::rc::Rc;

/// One rank of a world, as a body sees it.
pub enum Rank<'a> {
    /// A rank of the mock world: its process group.
    Mock(&'a ProcessGroup<MockBackend>),
    /// A rank on NCCL: its process group, a `Comm` of the same ranks, and the library.
    Nccl(&'a ProcessGroup<Nccl>, &'a Rc<RefCell<Comm>>, &'a Nccl),
}

impl Rank<'_> {
    /// Returns once every rank has called it.
    pub fn barrier(&self) -> Result<()> {
        match self {
            Rank::Mock(pg) => pg.barrier()?.wait(),
            Rank::Nccl(pg, ..) => pg.barrier()?.wait(),
        }
    }

    /// `v` reduced with `op` over every rank (every rank calls it with as many values).
    pub fn all_reduce(&self, v: &[f64], op: ReduceOp) -> Result<Vec<f64>> {
        fn on<B: PgBackend>(pg: &ProcessGroup<B>, v: &[f64], op: ReduceOp) -> Result<Vec<f64>> {
            let mut b = pg.upload(v)?;
            pg.all_reduce(&mut b, op)?.wait()?;
            pg.download(&b)
        }
        match self {
            Rank::Mock(pg) => on(pg, v, op),
            Rank::Nccl(pg, ..) => on(pg, v, op),
        }
    }
}

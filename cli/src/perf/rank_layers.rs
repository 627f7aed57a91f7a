//! The layers of one rank, built from their kinds: the `pg` layer over any backend (plain
//! buffers, the library allocator's, or a tune table's group), and on NCCL the `raw` and
//! `comm` layers beside it.

use super::direct::{library_memory, NcclLayer};
use super::layer::{Layer, LayerKind, LibraryAlloc, PgLayer};
use super::modes::ModeLayer;
use super::plan::{LayerOpts, Plan};
use super::rank::Rank;
use crate::elem::with_dtype;
use crate::ops::Dtype;
use oxccl::pg::{PgBackend, ProcessGroup};
use oxccl::{Comm, Nccl, Result};
use std::cell::RefCell;
use std::rc::Rc;

/// The plan's layers on rank `r`, in the plan's order (rank 0's results corrupted with
/// --inject-error). The mock world has the `pg` layer only.
pub fn of(plan: &Plan, rank: &Rank<'_>, r: u32) -> Result<Vec<Box<dyn Layer>>> {
    let dtype = plan.sweep.dtype;
    let opts = LayerOpts {
        corrupt: plan.opts.corrupt && r == 0,
        library_bufs: matches!(rank, Rank::Nccl(.., lib) if library_memory(lib)),
        ..plan.opts.clone()
    };
    plan.layers
        .iter()
        .map(|kind| match (kind, rank) {
            (_, Rank::Nccl(pg, comm, lib)) => Ok(nccl_layer(*kind, dtype, lib, pg, comm, &opts)),
            (LayerKind::Pg, Rank::Mock(pg)) => Ok(pg_layer(pg, dtype, &opts)),
            (LayerKind::Raw | LayerKind::Comm, Rank::Mock(_)) => Err(oxccl::Error::invalid(
                "layer",
                format_args!("one the mock world has (pg), got {}", kind.name()),
            )),
        })
        .collect()
}

/// The `pg` layer on `pg`'s ranks as `o` sets it up.
pub fn pg_layer<B: PgBackend>(pg: &ProcessGroup<B>, dtype: Dtype, o: &LayerOpts) -> Box<dyn Layer> {
    let (corrupt, graphs) = (o.corrupt, o.graphs);
    match &o.pg_table {
        Some(t) => {
            with_dtype!(dtype, T => Box::new(ModeLayer::<B, T>::with_table(pg.clone(), t.clone()).corrupting(corrupt).graphs(graphs)) as Box<dyn Layer>)
        }
        None if o.library_bufs => {
            with_dtype!(dtype, T => Box::new(PgLayer::<B, T, LibraryAlloc>::new(pg.clone()).corrupting(corrupt).graphs(graphs)) as Box<dyn Layer>)
        }
        None => {
            with_dtype!(dtype, T => Box::new(PgLayer::<B, T>::new(pg.clone()).corrupting(corrupt).graphs(graphs)) as Box<dyn Layer>)
        }
    }
}

/// The layer of `kind` on one NCCL rank: the raw and comm layers issue through `comm`.
pub fn nccl_layer(
    kind: LayerKind,
    dtype: Dtype,
    lib: &Nccl,
    pg: &ProcessGroup<Nccl>,
    comm: &Rc<RefCell<Comm>>,
    o: &LayerOpts,
) -> Box<dyn Layer> {
    let raw = match kind {
        LayerKind::Pg => return pg_layer(pg, dtype, o),
        LayerKind::Raw => true,
        LayerKind::Comm => false,
    };
    with_dtype!(dtype, T => Box::new(NcclLayer::<T>::new(comm.clone(), lib.clone(), raw, o.registration, o.graphs).corrupting(o.corrupt).nonblocking(o.nonblocking)) as Box<dyn Layer>)
}

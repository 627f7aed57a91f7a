//! One way of calling the library, timed: the kinds `oxccl perf` reports, the trait every
//! layer implements, and the process group layer, written once over [`PgBackend`] (the
//! mock world and NCCL alike).

use crate::elem::Elem;
use crate::expect::{self, Case};
use crate::ops::Coll;
use oxccl::buffer::Operand;
use oxccl::pg::PgBackend;
use oxccl::pg::{P2pOp, PgGraph, ProcessGroup, WorkOf};
use oxccl::Result;
use std::marker::PhantomData;

/// The layers `oxccl perf` times side by side: each is one path to the same collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// NCCL's function pointers, as nccl-tests calls them.
    Raw,
    /// `Comm::issue`, the checked path under the safe calls.
    Comm,
    /// `ProcessGroup`, c10d's API.
    Pg,
}

impl LayerKind {
    /// The three, in the order their columns are reported.
    pub const ALL: [LayerKind; 3] = [LayerKind::Raw, LayerKind::Comm, LayerKind::Pg];

    /// Its name wherever a layer is shown: the table's column, the JSON, the chart.
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::Raw => "raw",
            LayerKind::Comm => "comm",
            LayerKind::Pg => "pg",
        }
    }
}

/// A layer on one rank: set up a case, run it `iters` times, check one run.
pub trait Layer {
    /// Allocates buffers for `case`; `Ok(false)` when the layer cannot run it in this placement
    /// (reported as N/A).
    fn setup(&mut self, case: &Case, in_place: bool) -> Result<bool>;
    /// Prepares the next [`Layer::run`] of `iters` operations outside the timed region (the
    /// CUDA-graph capture of `-G`); nothing by default.
    fn arm(&mut self, iters: usize) -> Result<()> {
        let _ = iters;
        Ok(())
    }
    /// Issues the set-up operation `iters` times (or launches the armed graph), waits for the
    /// last one, and says how many operations ran.
    fn run(&mut self, iters: usize) -> Result<usize>;
    /// Fills the inputs, runs once, and counts the wrong elements of this rank's output.
    fn check(&mut self) -> Result<u64>;
    /// The policy oxccl's all-reduce kernels run under in this layer's group, once it is
    /// made (`None`: NCCL runs its all-reduces).
    fn peer_kernels(&self) -> Option<oxccl::core::peer_kernels::PeerPolicy> {
        None
    }
    /// Lets go of the buffers of the last case.
    fn teardown(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Whether the process group runs `coll` in this placement: its reductions and broadcast
/// in place (c10d's API), the rest out of place. Every pg-based layer follows it.
pub fn pg_placement(coll: Coll, in_place: bool) -> bool {
    let in_place_ops = matches!(coll, Coll::AllReduce | Coll::Broadcast | Coll::Reduce);
    in_place == in_place_ops
}

/// The error of a launch method ([`Layer::arm`], [`Layer::run`], [`Layer::check`]) called
/// with no case set up (no [`Layer::setup`] since the last teardown, or one that said N/A).
pub fn not_set_up() -> oxccl::Error {
    oxccl::Error::invalid("case", format_args!("a set-up case"))
}

/// The -G capture of the process group layers: `iters` operations, each issued by `once` on
/// the capturing group, captured on `pg` into one graph. Returns the graph and the
/// operations it holds.
pub fn capture_ops<B: PgBackend>(
    pg: &ProcessGroup<B>,
    iters: usize,
    mut once: impl FnMut(&ProcessGroup<B>) -> Result<WorkOf<B>>,
) -> Result<(PgGraph<B>, usize)> {
    let graph = pg.capture(|pg| {
        for _ in 0..iters {
            once(pg)?;
        }
        Ok(())
    })?;
    Ok((graph, iters))
}

/// Which of the backend's two buffer types a [`PgLayer`] runs on: [`Plain`] (the backend's
/// own, cudarc slices on NCCL) or [`LibraryAlloc`] (the library's allocator, `NcclBuf` on NCCL,
/// the memory the `raw` and `comm` layers take by default, so the three compare like with
/// like).
pub trait PgBufs<B: PgBackend, T: Elem> {
    /// The buffer type.
    type Buf: Operand<B, Elem = T>;
    /// Whether a buffer may hold no element (the library's allocator refuses empty ones).
    const EMPTY_OK: bool;
    /// `len` zeros.
    fn zeros(pg: &ProcessGroup<B>, len: usize) -> Result<Self::Buf>;
    /// A copy of `data`.
    fn upload(pg: &ProcessGroup<B>, data: &[T]) -> Result<Self::Buf>;
}

/// The backend's plain buffers ([`Memory::Buf`]).
pub struct Plain;

/// The library allocator's buffers ([`Memory::CommBuf`]), used as they are (no tune table).
pub struct LibraryAlloc;

impl<B: PgBackend, T: Elem> PgBufs<B, T> for Plain {
    type Buf = B::Buf<T>;
    const EMPTY_OK: bool = true;
    fn zeros(pg: &ProcessGroup<B>, len: usize) -> Result<Self::Buf> {
        pg.alloc_zeros::<T>(len)
    }
    fn upload(pg: &ProcessGroup<B>, data: &[T]) -> Result<Self::Buf> {
        pg.upload(data)
    }
}

impl<B: PgBackend, T: Elem> PgBufs<B, T> for LibraryAlloc {
    type Buf = B::CommBuf<T>;
    const EMPTY_OK: bool = false;
    fn zeros(pg: &ProcessGroup<B>, len: usize) -> Result<Self::Buf> {
        pg.alloc_comm::<T>(len)
    }
    fn upload(pg: &ProcessGroup<B>, data: &[T]) -> Result<Self::Buf> {
        pg.upload_comm(data)
    }
}

/// A set-up case of the `pg` layer: the case, its buffers (both made by the setup, refilled
/// by a check) and the graph armed over them (-G).
struct SetUp<B: PgBackend, T: Elem, K: PgBufs<B, T>> {
    /// The armed graph and the operations it holds (first: dropped before the buffers).
    graph: Option<(PgGraph<B>, usize)>,
    send: K::Buf,
    recv: K::Buf,
    case: Case,
}

/// The process group path: `ProcessGroup::<B>` calls, each returning a `Work`; the loop waits
/// for the last work (stream order covers the others). With -G the timed loop is captured
/// by [`ProcessGroup::capture`] and the graph launched -G times. Its buffers are of kind `K`.
pub struct PgLayer<B: PgBackend, T: Elem, K: PgBufs<B, T> = Plain> {
    pg: ProcessGroup<B>,
    /// The case set up, with its buffers (none before the first setup, after a teardown, or
    /// after a setup that said N/A).
    set: Option<SetUp<B, T, K>>,
    corrupt: bool,
    /// -G: graph launches per run (0: no graph).
    graphs: u32,
    _t: PhantomData<T>,
}

impl<B: PgBackend, T: Elem, K: PgBufs<B, T>> PgLayer<B, T, K> {
    /// A layer over `pg`.
    pub fn new(pg: ProcessGroup<B>) -> Self {
        PgLayer {
            pg,
            set: None,
            corrupt: false,
            graphs: 0,
            _t: PhantomData,
        }
    }

    /// Captures the timed loop into a graph launched `n` times per run (-G; 0: no graph).
    pub fn graphs(mut self, n: u32) -> Self {
        self.graphs = n;
        self
    }

    /// Makes every check see one wrong element (the hidden `--inject-error`, so tests can see
    /// a failing check exit 1).
    pub fn corrupting(mut self, on: bool) -> Self {
        self.corrupt = on;
        self
    }

    /// Whether the process group has `coll` in this placement (see [`pg_placement`]).
    pub fn supports(coll: Coll, in_place: bool) -> bool {
        pg_placement(coll, in_place)
    }

    /// Which buffers an operation of `c` uses on this rank (send, recv), as `once_on` passes
    /// them: a graph launch is given exactly these.
    fn uses(c: &Case) -> (bool, bool) {
        match c.coll {
            Coll::AllReduce | Coll::All | Coll::Broadcast | Coll::Reduce => (false, true),
            Coll::Gather => (true, c.rank == c.root),
            Coll::Scatter => (c.rank == c.root, true),
            _ => (true, true),
        }
    }

    fn once_on(
        pg: &ProcessGroup<B>,
        c: &Case,
        send: &K::Buf,
        recv: &mut K::Buf,
    ) -> Result<WorkOf<B>> {
        let op = c.redop.reduce_op();
        match c.coll {
            Coll::AllReduce | Coll::All => pg.all_reduce(recv, op),
            Coll::Broadcast => pg.broadcast(recv, c.root),
            Coll::Reduce => pg.reduce(recv, c.root, op),
            Coll::AllGather => pg.all_gather(send, recv),
            Coll::ReduceScatter => pg.reduce_scatter(send, recv, op),
            Coll::Alltoall => pg.all_to_all(send, recv),
            Coll::Gather => {
                let recv = if c.rank == c.root { Some(recv) } else { None };
                pg.gather(send, recv, c.root)
            }
            Coll::Scatter => {
                let send = if c.rank == c.root { Some(send) } else { None };
                pg.scatter(send, recv, c.root)
            }
            Coll::Sendrecv => {
                let (next, prev) = ((c.rank + 1) % c.n, (c.rank + c.n - 1) % c.n);
                pg.batch_isend_irecv(&mut [P2pOp::Send(send, next), P2pOp::Recv(recv, prev)])
            }
        }
    }
}

impl<B: PgBackend, T: Elem, K: PgBufs<B, T>> SetUp<B, T, K> {
    /// Issues one operation of the case on `pg`.
    fn once(&mut self, pg: &ProcessGroup<B>) -> Result<WorkOf<B>> {
        PgLayer::<B, T, K>::once_on(pg, &self.case, &self.send, &mut self.recv)
    }

    /// Fresh inputs for a check: the collective's input buffer uploaded, its output zeroed.
    fn fill(&mut self, pg: &ProcessGroup<B>) -> Result<()> {
        let c = self.case;
        let (s, r) = c.shape();
        // An empty part is one this rank does not pass (see `PgLayer::setup`).
        let least = usize::from(!K::EMPTY_OK);
        let input = |n: usize| match n {
            0 => K::zeros(pg, least),
            n => K::upload(pg, &expect::inputs::<T>(&c, n)),
        };
        if PgLayer::<B, T, K>::supports(c.coll, true) {
            self.recv = input(r)?;
        } else {
            self.send = input(s)?;
            self.recv = K::zeros(pg, r.max(least))?;
        }
        Ok(())
    }
}

impl<B: PgBackend, T: Elem, K: PgBufs<B, T>> Layer for PgLayer<B, T, K> {
    fn arm(&mut self, iters: usize) -> Result<()> {
        if let Some(set) = self.set.as_mut() {
            set.graph = None;
        }
        if self.graphs == 0 || iters == 0 {
            return Ok(());
        }
        let set = self.set.as_mut().ok_or_else(not_set_up)?;
        let (c, send, recv) = (set.case, &set.send, &mut set.recv);
        let graph = capture_ops(&self.pg, iters, |pg| Self::once_on(pg, &c, send, recv))?;
        set.graph = Some(graph);
        Ok(())
    }

    fn setup(&mut self, case: &Case, in_place: bool) -> Result<bool> {
        self.teardown()?;
        if !Self::supports(case.coll, in_place) {
            return Ok(false);
        }
        let (s, r) = case.shape();
        let (use_s, use_r) = Self::uses(case);
        let empty = (use_s && s == 0) || (use_r && r == 0);
        // Every rank takes the same branch: a used buffer is empty only when the count (or a
        // rank's part of it) is 0, the same on every rank.
        if empty && !K::EMPTY_OK {
            return Ok(false);
        }
        // A buffer this rank does not pass (a non-root's of gather or scatter) still needs
        // one element where empty ones are refused.
        let least = usize::from(!K::EMPTY_OK);
        self.set = Some(SetUp {
            graph: None,
            send: K::zeros(&self.pg, s.max(least))?,
            recv: K::zeros(&self.pg, r.max(least))?,
            case: *case,
        });
        Ok(true)
    }

    fn run(&mut self, iters: usize) -> Result<usize> {
        let graphs = self.graphs;
        let pg = &self.pg;
        let set = self.set.as_mut().ok_or_else(not_set_up)?;
        if let Some((g, per)) = &set.graph {
            let (s, r) = Self::uses(&set.case);
            let mut last = None;
            for _ in 0..graphs {
                let mut bufs: Vec<&mut K::Buf> = Vec::with_capacity(2);
                if s {
                    bufs.push(&mut set.send);
                }
                if r {
                    bufs.push(&mut set.recv);
                }
                last = Some(g.replay(&mut bufs)?);
            }
            if let Some(w) = last {
                w.wait()?;
            }
            return Ok(per * graphs as usize);
        }
        let mut last = None;
        for _ in 0..iters {
            last = Some(set.once(pg)?);
        }
        if let Some(w) = last {
            w.wait()?;
        }
        Ok(iters)
    }

    fn check(&mut self) -> Result<u64> {
        let pg = &self.pg;
        let set = self.set.as_mut().ok_or_else(not_set_up)?;
        // The graph's buffers are replaced by the filled ones.
        set.graph = None;
        set.fill(pg)?;
        set.once(pg)?.wait()?;
        let mut got = pg.download_any(&set.recv)?;
        // Only the case's own elements: a buffer this rank does not use may hold one element
        // of padding (see `setup`).
        got.truncate(set.case.shape().1);
        if let (true, Some(g)) = (self.corrupt, got.first_mut()) {
            *g = T::of(g.get() + 101.0);
        }
        Ok(expect::count_wrong(&set.case, &got))
    }

    fn teardown(&mut self) -> Result<()> {
        self.set = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Dtype, Redop};
    use oxccl::mock::MockBackend;

    /// Every collective on the library's buffers, 3 mock ranks, root 0: right results, the
    /// forced wrong element seen, and the cases with no element (refused by that allocator)
    /// said N/A on every rank.
    #[test]
    fn library_buffers_run_every_collective_right() {
        let out = crate::perf::mock_world::mock_world_of(MockBackend::new(), 3, |pg, rank| {
            let mut seen = Vec::new();
            for coll in Coll::EACH {
                for count in [0, 12] {
                    let case = Case {
                        coll,
                        count,
                        dtype: Dtype::Float32,
                        redop: Redop::Sum,
                        root: 0,
                        n: 3,
                        rank,
                    };
                    let in_place = pg_placement(coll, true);
                    for corrupt in [false, true] {
                        let mut l = PgLayer::<MockBackend, f32, LibraryAlloc>::new(pg.clone())
                            .corrupting(corrupt && rank == 0);
                        let ran = l.setup(&case, in_place)?;
                        let wrong = if ran {
                            l.run(2)?;
                            Some(l.check()?)
                        } else {
                            None
                        };
                        seen.push((coll, count, corrupt, wrong));
                    }
                }
            }
            Ok(seen)
        })
        .expect("mock world");
        for (rank, seen) in out.iter().enumerate() {
            for &(coll, count, corrupt, wrong) in seen {
                let expected = match (count, corrupt && rank == 0) {
                    (0, _) => None,
                    (_, true) => Some(1),
                    _ => Some(0),
                };
                assert_eq!(
                    wrong, expected,
                    "rank {rank}, {coll:?} of {count}, corrupt {corrupt}"
                );
            }
        }
    }

    /// With root 1 and a product (whose inputs are 1 and 2, never 0), the padding element of
    /// a non-root's unused gather buffer is not counted: every rank right.
    #[test]
    fn library_buffers_check_only_the_case_s_elements() {
        let out = crate::perf::mock_world::mock_world_of(MockBackend::new(), 3, |pg, rank| {
            let mut wrong = Vec::new();
            for coll in Coll::EACH {
                let case = Case {
                    coll,
                    count: 12,
                    dtype: Dtype::Float32,
                    redop: Redop::Prod,
                    root: 1,
                    n: 3,
                    rank,
                };
                let mut l = PgLayer::<MockBackend, f32, LibraryAlloc>::new(pg.clone());
                if l.setup(&case, pg_placement(coll, true))? {
                    wrong.push((coll, l.check()?));
                }
            }
            Ok(wrong)
        })
        .expect("mock world");
        for (rank, wrong) in out.iter().enumerate() {
            assert_eq!(wrong.len(), Coll::EACH.len(), "rank {rank}");
            for (coll, w) in wrong {
                assert_eq!(*w, 0, "rank {rank}, {coll:?}");
            }
        }
    }
}

//! One way of calling the library, timed: the trait every layer implements, and the process
//! group layer, written once over [`Memory`] (the mock world and NCCL alike).

use crate::elem::Elem;
use crate::expect::{self, Case};
use crate::ops::Coll;
use oxccl::buffer::{Memory, StreamOf};
use oxccl::core::Capture;
use oxccl::pg::{P2pOp, PgGraph, ProcessGroup, WorkOf};
use oxccl::Result;
use std::marker::PhantomData;

/// A layer on one rank: set up a case, run it `iters` times, check one run.
pub trait Layer {
    /// The layer's name in reports: raw, comm or pg.
    fn name(&self) -> &'static str;
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
    /// Lets go of the buffers of the last case.
    fn teardown(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The process group path: `ProcessGroup::<B>` calls, each returning a `Work`; the loop waits
/// for the last work (stream order covers the others). With -G the timed loop is captured
/// by [`ProcessGroup::capture`] and the graph launched -G times.
pub struct PgLayer<B: Memory, T: Elem>
where
    StreamOf<B>: Capture,
{
    pg: ProcessGroup<B>,
    case: Option<Case>,
    send: Option<B::Buf<T>>,
    recv: Option<B::Buf<T>>,
    corrupt: bool,
    /// -G: graph launches per run (0: no graph).
    graphs: u32,
    /// The armed graph and the operations it holds.
    graph: Option<(PgGraph<B>, usize)>,
    _t: PhantomData<T>,
}

impl<B: Memory, T: Elem> PgLayer<B, T>
where
    StreamOf<B>: Capture,
{
    /// A layer over `pg`.
    pub fn new(pg: ProcessGroup<B>) -> Self {
        PgLayer {
            pg,
            case: None,
            send: None,
            recv: None,
            corrupt: false,
            graphs: 0,
            graph: None,
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

    /// Whether the process group has `coll` in this placement: its reductions and broadcast
    /// are in place (c10d's API), the rest out of place.
    pub fn supports(coll: Coll, in_place: bool) -> bool {
        let in_place_ops = matches!(coll, Coll::AllReduce | Coll::Broadcast | Coll::Reduce);
        in_place == in_place_ops
    }

    fn once(&mut self) -> Result<WorkOf<B>> {
        let c = self.case.expect("set up");
        Self::once_on(&self.pg, &c, self.send.as_ref(), self.recv.as_mut())
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
        send: Option<&B::Buf<T>>,
        recv: Option<&mut B::Buf<T>>,
    ) -> Result<WorkOf<B>> {
        let op = c.redop.reduce_op();
        let missing = || oxccl::Error::invalid("case", format_args!("a set-up case"));
        match c.coll {
            Coll::AllReduce | Coll::All => pg.all_reduce(recv.ok_or_else(missing)?, op),
            Coll::Broadcast => pg.broadcast(recv.ok_or_else(missing)?, c.root),
            Coll::Reduce => pg.reduce(recv.ok_or_else(missing)?, c.root, op),
            Coll::AllGather => pg.all_gather(send.ok_or_else(missing)?, recv.ok_or_else(missing)?),
            Coll::ReduceScatter => {
                pg.reduce_scatter(send.ok_or_else(missing)?, recv.ok_or_else(missing)?, op)
            }
            Coll::Alltoall => pg.all_to_all(send.ok_or_else(missing)?, recv.ok_or_else(missing)?),
            Coll::Gather => {
                let recv = if c.rank == c.root { recv } else { None };
                pg.gather(send.ok_or_else(missing)?, recv, c.root)
            }
            Coll::Scatter => {
                let send = if c.rank == c.root { send } else { None };
                pg.scatter(send, recv.ok_or_else(missing)?, c.root)
            }
            Coll::Sendrecv => {
                let (next, prev) = ((c.rank + 1) % c.n, (c.rank + c.n - 1) % c.n);
                pg.batch_isend_irecv(&mut [
                    P2pOp::Send(send.ok_or_else(missing)?, next),
                    P2pOp::Recv(recv.ok_or_else(missing)?, prev),
                ])
            }
        }
    }

    fn fill(&mut self) -> Result<()> {
        let c = self.case.expect("set up");
        let (s, r) = c.shape();
        if Self::supports(c.coll, true) {
            self.recv = Some(self.pg.upload(&expect::inputs::<T>(&c, r))?);
        } else {
            self.send = Some(self.pg.upload(&expect::inputs::<T>(&c, s))?);
            self.recv = Some(self.pg.alloc_zeros::<T>(r)?);
        }
        Ok(())
    }
}

impl<B: Memory, T: Elem> Layer for PgLayer<B, T>
where
    StreamOf<B>: Capture,
{
    fn name(&self) -> &'static str {
        "pg"
    }

    fn arm(&mut self, iters: usize) -> Result<()> {
        self.graph = None;
        if self.graphs == 0 || iters == 0 {
            return Ok(());
        }
        let c = self.case.expect("set up");
        let (send, mut recv) = (self.send.as_ref(), self.recv.as_mut());
        let graph = self.pg.capture(|pg| {
            for _ in 0..iters {
                Self::once_on(pg, &c, send, recv.as_deref_mut())?;
            }
            Ok(())
        })?;
        self.graph = Some((graph, iters));
        Ok(())
    }

    fn setup(&mut self, case: &Case, in_place: bool) -> Result<bool> {
        self.teardown()?;
        if !Self::supports(case.coll, in_place) {
            return Ok(false);
        }
        self.case = Some(*case);
        let (s, r) = case.shape();
        self.send = Some(self.pg.alloc_zeros::<T>(s)?);
        self.recv = Some(self.pg.alloc_zeros::<T>(r)?);
        Ok(true)
    }

    fn run(&mut self, iters: usize) -> Result<usize> {
        if let Some((g, per)) = &self.graph {
            let c = self.case.expect("set up");
            let (s, r) = Self::uses(&c);
            let mut last = None;
            for _ in 0..self.graphs {
                let mut bufs: Vec<&mut B::Buf<T>> = Vec::with_capacity(2);
                if let (true, Some(b)) = (s, self.send.as_mut()) {
                    bufs.push(b);
                }
                if let (true, Some(b)) = (r, self.recv.as_mut()) {
                    bufs.push(b);
                }
                last = Some(g.launch(&mut bufs)?);
            }
            if let Some(w) = last {
                w.wait()?;
            }
            return Ok(per * self.graphs as usize);
        }
        let mut last = None;
        for _ in 0..iters {
            last = Some(self.once()?);
        }
        if let Some(w) = last {
            w.wait()?;
        }
        Ok(iters)
    }

    fn check(&mut self) -> Result<u64> {
        // The graph's buffers are replaced by the filled ones.
        self.graph = None;
        self.fill()?;
        self.once()?.wait()?;
        let c = self.case.expect("set up");
        let mut got = self.pg.download(self.recv.as_ref().expect("filled"))?;
        if let (true, Some(g)) = (self.corrupt, got.first_mut()) {
            *g = T::of(g.get() + 101.0);
        }
        Ok(expect::count_wrong(&c, &got))
    }

    fn teardown(&mut self) -> Result<()> {
        self.graph = None;
        self.send = None;
        self.recv = None;
        self.case = None;
        Ok(())
    }
}

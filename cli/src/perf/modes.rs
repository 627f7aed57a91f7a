//! The process group on buffers of the library's allocator under a tune table: the `pg`
//! layer of `oxccl perf -R 1|2` (one mode everywhere) and of `--tuned FILE` (a table
//! `oxccl tune` wrote), and the layers `oxccl tune` alternates. Each runs on a group of its
//! own whose tune table is that one, so the process group itself registers buffers or makes
//! windows, as it would for a user with a tuned table.

use super::layer::{capture_ops, not_set_up, Layer};
use crate::elem::Elem;
use crate::expect::{self, Case};
use crate::ops::Coll;
use oxccl::buffer::Operand;
use oxccl::core::peer_kernels::PeerPolicy;
use oxccl::pg::PgBackend;
use oxccl::pg::{PgGraph, PgOptions, ProcessGroup, RegMode, TuneTable, WorkOf};
use oxccl::Result;
use std::collections::HashMap;
use std::sync::Arc;

/// The collectives a tune table covers (the process group tunes only those whose buffers
/// have the same size on every rank), as `oxccl perf` names them.
pub const TUNED: [Coll; 6] = [
    Coll::AllReduce,
    Coll::AllGather,
    Coll::ReduceScatter,
    Coll::Broadcast,
    Coll::Reduce,
    Coll::Alltoall,
];

/// The core's operation kind of a tuned collective.
pub fn kind_of(c: Coll) -> Option<oxccl::core::OpKind> {
    use oxccl::core::OpKind as K;
    Some(match c {
        Coll::AllReduce => K::AllReduce,
        Coll::AllGather => K::AllGather,
        Coll::ReduceScatter => K::ReduceScatter,
        Coll::Broadcast => K::Broadcast,
        Coll::Reduce => K::Reduce,
        Coll::Alltoall => K::AllToAll,
        _ => return None,
    })
}

/// A group of `pg`'s ranks with `table`. Collective: every rank calls it, in the same order,
/// with the same table.
pub fn tuned_group<B: PgBackend>(
    pg: &ProcessGroup<B>,
    table: &Arc<TuneTable>,
    kernels: Option<PeerPolicy>,
) -> Result<ProcessGroup<B>> {
    let base = pg.options();
    let opts = PgOptions {
        tune: Some(table.clone()),
        desc: format!("oxccl perf, tune table {:016x}", table.fingerprint()),
        peer_kernels: kernels.unwrap_or(base.peer_kernels),
        ..base.clone()
    };
    pg.new_group(pg.ranks(), Some(opts))
}

/// The process group path on [`Memory::CommBuf`] buffers, in its group's mode.
///
/// Buffers are pooled by length and reused across cases: windows stay registered as long as
/// the group lives (releasing one is collective), so fresh buffers per case would pile up.
///
/// With -G the timed loop is captured ([`ProcessGroup::capture`]) and launched -G times.
/// Nothing is registered inside a capture, so each arm first runs the operation once
/// outside it: the group's table registers the buffers then, as it would for a user's
/// warm-up step.
pub struct ModeLayer<B: PgBackend, T: Elem> {
    /// The group the layer's group is made from.
    base: ProcessGroup<B>,
    table: Arc<TuneTable>,
    /// The mode's group, made by the first [`Layer::setup`] (collective: every rank sets up
    /// the same cases in the same order), so that building a layer cannot fail.
    group: Option<ProcessGroup<B>>,
    case: Option<Case>,
    send: Option<B::CommBuf<T>>,
    recv: Option<B::CommBuf<T>>,
    pool: HashMap<usize, Vec<B::CommBuf<T>>>,
    corrupt: bool,
    /// -G: graph launches per run (0: no graph).
    graphs: u32,
    /// Who runs its group's all-reduces (`None`: as `base` says).
    kernels: Option<PeerPolicy>,
    /// The armed graph and the operations it holds.
    graph: Option<(PgGraph<B>, usize)>,
}

impl<B: PgBackend, T: Elem> ModeLayer<B, T> {
    /// A layer in `mode` everywhere on a group of `base`'s ranks.
    pub fn new(base: ProcessGroup<B>, mode: RegMode) -> Self {
        ModeLayer::with_table(base, Arc::new(TuneTable::uniform(mode)))
    }

    /// A layer under `table` on a group of `base`'s ranks.
    pub fn with_table(base: ProcessGroup<B>, table: Arc<TuneTable>) -> Self {
        ModeLayer {
            base,
            table,
            group: None,
            case: None,
            send: None,
            recv: None,
            pool: HashMap::new(),
            corrupt: false,
            graphs: 0,
            graph: None,
            kernels: None,
        }
    }

    /// Its group's all-reduces run under `policy` (oxccl's kernels or NCCL).
    pub fn kernels(mut self, policy: PeerPolicy) -> Self {
        self.kernels = Some(policy);
        self
    }

    /// Captures the timed loop into a graph launched `n` times per run (-G; 0: no graph).
    pub fn graphs(mut self, n: u32) -> Self {
        self.graphs = n;
        self
    }

    /// Makes every check see one wrong element (the hidden `--inject-error`).
    pub fn corrupting(mut self, on: bool) -> Self {
        self.corrupt = on;
        self
    }

    /// Whether the layer runs `coll` in this placement: the tuned collectives, reductions
    /// and broadcast in place, the rest out of place (as the `pg` layer).
    pub fn supports(coll: Coll, in_place: bool) -> bool {
        TUNED.contains(&coll) && super::layer::pg_placement(coll, in_place)
    }

    /// A zeroed buffer of `len` elements, from the pool when one is there. Every buffer
    /// handed out is at least one element (the library's allocator refuses empty ones).
    fn take(&mut self, len: usize) -> Result<B::CommBuf<T>> {
        if let Some(b) = self.pool.get_mut(&len).and_then(Vec::pop) {
            return Ok(b);
        }
        self.pg()?.alloc_comm::<T>(len)
    }

    /// The mode's group (made by the first setup).
    fn pg(&self) -> Result<&ProcessGroup<B>> {
        self.group
            .as_ref()
            .ok_or_else(|| oxccl::Error::invalid("layer", format_args!("a layer set up first")))
    }

    fn give_back(&mut self, b: Option<B::CommBuf<T>>) {
        if let Some(b) = b {
            self.pool.entry(b.numel()).or_default().push(b);
        }
    }

    fn once(&mut self) -> Result<WorkOf<B>> {
        let c = self.case.ok_or_else(not_set_up)?;
        let pg = self.group.as_ref().ok_or_else(not_set_up)?;
        Self::once_on(pg, &c, self.send.as_ref(), self.recv.as_mut())
    }

    fn once_on(
        pg: &ProcessGroup<B>,
        c: &Case,
        send: Option<&B::CommBuf<T>>,
        recv: Option<&mut B::CommBuf<T>>,
    ) -> Result<WorkOf<B>> {
        let op = c.redop.reduce_op();
        let recv = recv.ok_or_else(not_set_up)?;
        match c.coll {
            Coll::AllReduce => pg.all_reduce(recv, op),
            Coll::Broadcast => pg.broadcast(recv, c.root),
            Coll::Reduce => pg.reduce(recv, c.root, op),
            Coll::AllGather => pg.all_gather(send.ok_or_else(not_set_up)?, recv),
            Coll::ReduceScatter => pg.reduce_scatter(send.ok_or_else(not_set_up)?, recv, op),
            Coll::Alltoall => pg.all_to_all(send.ok_or_else(not_set_up)?, recv),
            other => Err(oxccl::Error::invalid(
                "collective",
                format_args!("one the process group tunes, got {}", other.name()),
            )),
        }
    }
}

impl<B: PgBackend, T: Elem> Layer for ModeLayer<B, T> {
    fn arm(&mut self, iters: usize) -> Result<()> {
        self.graph = None;
        if self.graphs == 0 || iters == 0 {
            return Ok(());
        }
        // Outside the capture: the table registers the buffers (or makes their windows).
        self.once()?.wait()?;
        let c = self.case.ok_or_else(not_set_up)?;
        let pg = self.group.as_ref().ok_or_else(not_set_up)?;
        let (send, mut recv) = (self.send.as_ref(), self.recv.as_mut());
        let graph = capture_ops(pg, iters, |pg| {
            Self::once_on(pg, &c, send, recv.as_deref_mut())
        })?;
        self.graph = Some(graph);
        Ok(())
    }

    fn peer_kernels(&self) -> Option<PeerPolicy> {
        self.group.as_ref().and_then(ProcessGroup::peer_kernels)
    }

    fn setup(&mut self, case: &Case, in_place: bool) -> Result<bool> {
        self.teardown()?;
        if self.group.is_none() {
            self.group = Some(tuned_group(&self.base, &self.table, self.kernels)?);
        }
        let (s, r) = case.shape();
        // Every rank takes the same branch: the shape's zero parts depend only on the case.
        if !Self::supports(case.coll, in_place) || s == 0 || r == 0 {
            return Ok(false);
        }
        self.case = Some(*case);
        if !in_place {
            self.send = Some(self.take(s)?);
        }
        self.recv = Some(self.take(r)?);
        Ok(true)
    }

    fn run(&mut self, iters: usize) -> Result<usize> {
        if let Some((g, per)) = &self.graph {
            let mut last = None;
            for _ in 0..self.graphs {
                // In place: the graph uses recv only; else send and recv.
                let mut bufs: Vec<&mut B::CommBuf<T>> = Vec::with_capacity(2);
                bufs.extend(self.send.as_mut());
                bufs.extend(self.recv.as_mut());
                last = Some(g.replay(&mut bufs)?);
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
        // The graph's buffers go back to the pool and fresh inputs come in.
        self.graph = None;
        let c = self.case.ok_or_else(not_set_up)?;
        let (s, r) = c.shape();
        // Fresh inputs into the same buffers (their registrations stay valid).
        if let Some(send) = self.send.take() {
            self.give_back(Some(send));
            self.send = Some(self.pg()?.upload_comm(&expect::inputs::<T>(&c, s))?);
            let old = self.recv.take();
            self.give_back(old);
            self.recv = Some(self.take(r)?);
        } else {
            let old = self.recv.take();
            self.give_back(old);
            self.recv = Some(self.pg()?.upload_comm(&expect::inputs::<T>(&c, r))?);
        }
        self.once()?.wait()?;
        let recv = self
            .recv
            .as_ref()
            .ok_or_else(|| oxccl::Error::invalid("case", format_args!("a filled case")))?;
        let mut got = self.pg()?.download_any(recv)?;
        if let (true, Some(g)) = (self.corrupt, got.first_mut()) {
            *g = T::of(g.get() + 101.0);
        }
        Ok(expect::count_wrong(&c, &got))
    }

    fn teardown(&mut self) -> Result<()> {
        self.graph = None;
        let (s, r) = (self.send.take(), self.recv.take());
        self.give_back(s);
        self.give_back(r);
        self.case = None;
        Ok(())
    }
}

//! The process group on buffers of the library's allocator in one buffer mode: the `pg`
//! layer of `oxccl perf -R 1|2`, and the three layers `--tune` alternates. Each mode runs on
//! a group of its own whose tune table says that mode everywhere, so the process group itself
//! registers buffers or makes windows, as it would for a user with a tuned table.

use super::layer::Layer;
use crate::elem::Elem;
use crate::expect::{self, Case};
use crate::ops::Coll;
use oxccl::buffer::{Memory, Operand};
use oxccl::pg::{PgOptions, ProcessGroup, RegMode, TuneTable, WorkOf};
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

/// A group of `pg`'s ranks whose table says `mode` for everything. Collective: every rank
/// calls it, in the same order.
pub fn mode_group<B: Memory>(pg: &ProcessGroup<B>, mode: RegMode) -> Result<ProcessGroup<B>> {
    let opts = PgOptions {
        tune: Some(Arc::new(TuneTable::uniform(mode))),
        desc: format!("oxccl perf -R {}", mode.level()),
        ..pg.options().clone()
    };
    pg.new_group(pg.ranks(), Some(opts))
}

/// Layer names by mode, for `--tune`.
pub fn name_of(mode: RegMode) -> &'static str {
    match mode {
        RegMode::Plain => "pg-R0",
        RegMode::Registered => "pg-R1",
        RegMode::Window => "pg-R2",
    }
}

/// The process group path on [`Memory::CommBuf`] buffers, in its group's mode.
///
/// Buffers are pooled by length and reused across cases: windows stay registered as long as
/// the group lives (releasing one is collective), so fresh buffers per case would pile up.
pub struct ModeLayer<B: Memory, T: Elem> {
    /// The group the mode's group is made from.
    base: ProcessGroup<B>,
    mode: RegMode,
    /// The mode's group, made by the first [`Layer::setup`] (collective: every rank sets up
    /// the same cases in the same order), so that building a layer cannot fail.
    group: Option<ProcessGroup<B>>,
    name: &'static str,
    case: Option<Case>,
    send: Option<B::CommBuf<T>>,
    recv: Option<B::CommBuf<T>>,
    pool: HashMap<usize, Vec<B::CommBuf<T>>>,
    corrupt: bool,
}

impl<B: Memory, T: Elem> ModeLayer<B, T> {
    /// A layer in `mode` on a group of `base`'s ranks, reported as `name`.
    pub fn new(base: ProcessGroup<B>, mode: RegMode, name: &'static str) -> Self {
        ModeLayer {
            base,
            mode,
            group: None,
            name,
            case: None,
            send: None,
            recv: None,
            pool: HashMap::new(),
            corrupt: false,
        }
    }

    /// Makes every check see one wrong element (the hidden `--inject-error`).
    pub fn corrupting(mut self, on: bool) -> Self {
        self.corrupt = on;
        self
    }

    /// Whether the layer runs `coll` in this placement: the tuned collectives, reductions
    /// and broadcast in place, the rest out of place (as the `pg` layer).
    pub fn supports(coll: Coll, in_place: bool) -> bool {
        let in_place_ops = matches!(coll, Coll::AllReduce | Coll::Broadcast | Coll::Reduce);
        TUNED.contains(&coll) && in_place == in_place_ops
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
        let missing = || oxccl::Error::invalid("case", format_args!("a set-up case"));
        let c = self.case.ok_or_else(missing)?;
        let op = c.redop.reduce_op();
        let pg = self.group.as_ref().ok_or_else(missing)?;
        let (send, recv) = (self.send.as_ref(), self.recv.as_mut());
        let recv = recv.ok_or_else(missing)?;
        match c.coll {
            Coll::AllReduce => pg.all_reduce(recv, op),
            Coll::Broadcast => pg.broadcast(recv, c.root),
            Coll::Reduce => pg.reduce(recv, c.root, op),
            Coll::AllGather => pg.all_gather(send.ok_or_else(missing)?, recv),
            Coll::ReduceScatter => pg.reduce_scatter(send.ok_or_else(missing)?, recv, op),
            Coll::Alltoall => pg.all_to_all(send.ok_or_else(missing)?, recv),
            other => Err(oxccl::Error::invalid(
                "collective",
                format_args!("one the process group tunes, got {}", other.name()),
            )),
        }
    }
}

impl<B: Memory, T: Elem> Layer for ModeLayer<B, T> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn setup(&mut self, case: &Case, in_place: bool) -> Result<bool> {
        self.teardown()?;
        if self.group.is_none() {
            self.group = Some(mode_group(&self.base, self.mode)?);
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
        let c = self
            .case
            .ok_or_else(|| oxccl::Error::invalid("case", format_args!("a set-up case")))?;
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
        let (s, r) = (self.send.take(), self.recv.take());
        self.give_back(s);
        self.give_back(r);
        self.case = None;
        Ok(())
    }
}

/// The `pg` layer of `oxccl perf -R level` (1 or 2; 0 is the plain `pg` layer).
pub fn pg_layer<B: Memory>(
    pg: &ProcessGroup<B>,
    dtype: crate::ops::Dtype,
    level: u8,
    corrupt: bool,
) -> Box<dyn Layer> {
    let mode = RegMode::ALL
        .into_iter()
        .find(|m| m.level() == level)
        .unwrap_or(RegMode::Plain);
    crate::with_dtype!(dtype, T => Box::new(ModeLayer::<B, T>::new(pg.clone(), mode, "pg").corrupting(corrupt)))
}

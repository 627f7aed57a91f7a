//! The `raw` layer (NCCL's function pointers, as nccl-tests calls them) and the `comm` layer
//! (`Comm::issue`, the checked path under the safe calls) over device buffers by address:
//! plain (-R 0), registered with the communicator (-R 1) or NCCL memory in symmetric windows
//! (-R 2); with -G the timed loop is captured into a CUDA graph and the graph launched.
//!
//! Buffers are kept for the whole run, pooled by size, each with its registration or window:
//! a case takes the buffers of its sizes from the pool and gives them back at its teardown, so
//! no address is freed and handed out again while the communicator lives (nccl-tests, too,
//! allocates and registers its buffers once per run). NCCL 2.28.x can move wrong data through
//! memory that a graph captured while it was registered, then deregistered, freed and
//! allocated again at the same address (see docs/BENCHMARKS.md#buffer-modes-and-the-tune-table).

use super::layer::{not_set_up, Layer, LayerKind};
use super::raw_call::{call, raw_issue, settle};
use crate::elem::Elem;
use crate::expect::{self, Case};
use crate::ops::Coll;
use cudarc::driver::{sys, CudaGraph, CudaSlice, DevicePtr};
use oxccl::loader::RawStream;
use oxccl::nccl::Window;
use oxccl::{Comm, CommOp, Error, Nccl, NcclMem, RegHandle, Result};
use std::cell::RefCell;
use std::rc::Rc;

/// Device memory by address: cudarc's allocation, or NCCL's (for symmetric windows), or
/// `cuMemAlloc`'s (`OXCCL_PERF_ALLOC=sync`, see [`SyncMem`]).
enum Mem {
    Cuda(CudaSlice<u8>),
    Nccl(NcclMem),
    Sync(SyncMem),
}

/// Device memory from `cuMemAlloc` instead of cudarc's stream-ordered pool
/// (`cuMemAllocAsync`), as nccl-tests allocates (`cudaMalloc`): set `OXCCL_PERF_ALLOC=sync`
/// to compare what the kind of memory costs NCCL per call (-R 0 only).
struct SyncMem(sys::CUdeviceptr);

impl SyncMem {
    fn zeros(ctx: &cudarc::driver::CudaContext, bytes: usize) -> Result<SyncMem> {
        let cuda = |e: cudarc::driver::DriverError| {
            Error::invalid(
                "size",
                format_args!("device memory for {bytes} bytes ({e:?})"),
            )
        };
        ctx.bind_to_thread().map_err(cuda)?;
        // SAFETY: the context is current on this thread; `bytes` > 0; the memset covers
        // exactly the allocation just made.
        unsafe {
            let p = cudarc::driver::result::malloc_sync(bytes).map_err(cuda)?;
            let m = SyncMem(p);
            cudarc::driver::result::memset_d8_sync(p, 0, bytes).map_err(cuda)?;
            Ok(m)
        }
    }
}

impl Drop for SyncMem {
    fn drop(&mut self) {
        // SAFETY: allocated by `cuMemAlloc` in `zeros`, freed once; the layer synchronized
        // its stream (every run waits for its last operation) before letting buffers go.
        if let Err(e) = unsafe { cudarc::driver::result::free_sync(self.0) } {
            log::debug!("freeing a perf buffer: {e:?}");
        }
    }
}

/// A buffer of a layer's pool, with what -R gave it (kept with it until the layer goes).
struct Pooled {
    bytes: usize,
    addr: usize,
    /// Its local registration (-R 1).
    reg: Option<RegHandle>,
    /// Its symmetric window (-R 2).
    window: Option<Window>,
    /// The memory, held for its drop; declared last: freed after its registration or
    /// window is let go (see `Drop`).
    _mem: Mem,
}

/// Where the raw and comm layers' buffers come from (`OXCCL_PERF_ALLOC`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Alloc {
    /// `ncclMemAlloc` (NCCL 2.19+), the default: what nccl-tests allocates since 2.19, and
    /// what NCCL registers by itself when a graph captures an operation
    /// (`NCCL_GRAPH_REGISTER`), so graphs on it run faster than on cudarc's pool memory,
    /// which NCCL does not register (docs/BENCHMARKS.md#graphs-and-symmetric-windows).
    Nccl,
    /// cudarc's stream-ordered pool (`OXCCL_PERF_ALLOC=pool`; also before NCCL 2.19).
    Pool,
    /// `cuMemAlloc` (`OXCCL_PERF_ALLOC=sync`, -R 0 only).
    Sync,
}

/// The allocator `OXCCL_PERF_ALLOC` names (`nccl`, `pool` or `sync`; unset: `nccl`).
fn alloc_kind() -> Alloc {
    match std::env::var("OXCCL_PERF_ALLOC").as_deref() {
        Ok("sync") => Alloc::Sync,
        Ok("pool") => Alloc::Pool,
        _ => Alloc::Nccl,
    }
}

/// Whether the raw and comm layers take `ncclMemAlloc` memory at -R 0 (the default
/// allocator, on a library that has it): the pg layer then runs on `NcclBuf`, the same
/// memory, so the three layers differ only in the path, not in what cudarc's event tracking
/// costs per use of a slice (two stream waits and a record; `benches/pg_overhead.rs` times it
/// apart) nor in what NCCL registers by itself inside a graph.
pub fn library_memory(lib: &oxccl::Nccl) -> bool {
    alloc_kind() == Alloc::Nccl && oxccl::core::Backend::features(lib).has(oxccl::Feature::MemAlloc)
}

/// Zeroes `bytes` at `addr` on `stream` and waits (set-up only, outside the timed loop).
fn zero(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    addr: usize,
    bytes: usize,
) -> Result<()> {
    let cuda = |e: cudarc::driver::DriverError| {
        Error::invalid(
            "size",
            format_args!("zeroed NCCL memory of {bytes} bytes ({e:?})"),
        )
    };
    stream.context().bind_to_thread().map_err(cuda)?;
    // SAFETY: `addr..addr+bytes` is an allocation of this layer on the stream's device, not
    // yet used by anything; the stream is synchronized before the memory is handed out.
    unsafe { cudarc::driver::result::memset_d8_async(addr as u64, 0, bytes, stream.cu_stream()) }
        .map_err(cuda)?;
    stream.synchronize().map_err(cuda)
}

/// A set-up case: the case, its placement, and the device addresses of its send and recv
/// buffers (in place, nccl-tests' layout in one buffer). The addresses are taken once at
/// set-up: no cudarc call (event tracking) runs between the set-up and the teardown, so the
/// issuing loop is capturable.
#[derive(Clone, Copy)]
struct SetUp {
    case: Case,
    in_place: bool,
    send: usize,
    recv: usize,
}

/// The raw (`raw == true`: NCCL's function pointers) or comm (`Comm::issue`) layer.
pub struct NcclLayer<T: Elem> {
    comm: Rc<RefCell<Comm>>,
    lib: Nccl,
    raw: bool,
    registration: u8,
    graphs: u32,
    /// The case set up (none before the first setup, after a teardown, or after a setup that
    /// said N/A or failed).
    set: Option<SetUp>,
    /// Its operations, built once by the core's builders when it is set up (the timed loop
    /// issues them, so it measures the library's calls alone).
    ops: Vec<CommOp<'static>>,
    /// Buffers no case holds, by size.
    pool: Vec<Pooled>,
    /// The buffers of the case set up.
    taken: Vec<Pooled>,
    graph: Option<(CudaGraph, usize)>,
    corrupt: bool,
    blocking: bool,
    _t: std::marker::PhantomData<T>,
}

impl<T: Elem> NcclLayer<T> {
    /// A layer issuing through `comm`: raw function pointers when `raw`, else `Comm::issue`.
    pub fn new(
        comm: Rc<RefCell<Comm>>,
        lib: Nccl,
        raw: bool,
        registration: u8,
        graphs: u32,
    ) -> Self {
        NcclLayer {
            comm,
            lib,
            raw,
            registration,
            graphs,
            set: None,
            ops: Vec::new(),
            pool: Vec::new(),
            taken: Vec::new(),
            graph: None,
            corrupt: false,
            blocking: true,
            _t: std::marker::PhantomData,
        }
    }

    /// The layer it is reported as.
    fn kind(&self) -> LayerKind {
        if self.raw {
            LayerKind::Raw
        } else {
            LayerKind::Comm
        }
    }

    /// Says the communicator is nonblocking (-z 0): raw calls then wait out ncclInProgress.
    pub fn nonblocking(mut self, on: bool) -> Self {
        self.blocking = !on;
        self
    }

    /// Makes every check see one wrong element (the hidden `--inject-error`).
    pub fn corrupting(mut self, on: bool) -> Self {
        self.corrupt = on;
        self
    }

    /// A device buffer of `bytes` for the case being set up, from the pool, else allocated
    /// (and registered, or put in a window, per -R); returns its address.
    fn alloc(&mut self, bytes: usize) -> Result<usize> {
        let bytes = bytes.max(1);
        if let Some(i) = self.pool.iter().position(|p| p.bytes == bytes) {
            let p = self.pool.swap_remove(i);
            let addr = p.addr;
            self.taken.push(p);
            return Ok(addr);
        }
        let mut window = None;
        let comm = self.comm.borrow();
        let has_nccl_mem = oxccl::core::Backend::features(&self.lib).has(oxccl::Feature::MemAlloc);
        let mem = match (self.registration, alloc_kind()) {
            (2, _) => {
                let m = NcclMem::alloc(self.lib.library(), bytes)?;
                // NCCL_WIN_COLL_SYMMETRIC: every rank registers a buffer of the same size
                // (every rank sets up the same cases, so their pools match).
                window = Some(comm.backend().window_register(m.addr(), bytes, 1)?);
                Mem::Nccl(m)
            }
            (0, Alloc::Sync) => Mem::Sync(SyncMem::zeros(comm.stream().context(), bytes)?),
            (0 | 1, Alloc::Nccl) if has_nccl_mem => {
                let m = NcclMem::alloc(self.lib.library(), bytes)?;
                zero(comm.stream(), m.addr(), bytes)?;
                Mem::Nccl(m)
            }
            _ => {
                let s = comm.stream().clone();
                Mem::Cuda(s.alloc_zeros::<u8>(bytes).map_err(|e| {
                    Error::invalid(
                        "size",
                        format_args!("device memory for {bytes} bytes ({e:?})"),
                    )
                })?)
            }
        };
        drop(comm);
        let addr = match &mem {
            // The guard records the slice's use now, outside any capture.
            Mem::Cuda(c) => c.device_ptr(self.comm.borrow().stream()).0 as usize,
            Mem::Nccl(m) => m.addr(),
            Mem::Sync(m) => m.0 as usize,
        };
        let reg = if self.registration == 1 {
            Some(oxccl::core::Communicator::register(
                self.comm.borrow().backend(),
                addr,
                bytes,
            )?)
        } else {
            None
        };
        self.taken.push(Pooled {
            bytes,
            addr,
            reg,
            window,
            _mem: mem,
        });
        Ok(addr)
    }

    /// The case's operations on the buffers at `send` and `recv`, through the core's builders
    /// (the one way every layer builds an operation): NCCL's per-rank counts in, lengths out.
    fn build_ops(&self, c: &Case, send: usize, recv: usize) -> Result<Vec<CommOp<'static>>> {
        use oxccl::core::build;
        let features = oxccl::core::Backend::features(&self.lib);
        let ctx = oxccl::core::check::CheckCtx {
            rank: c.rank,
            size: c.n,
            features,
        };
        let (dt, op, root) = (c.dtype.data_type(), c.redop.reduce_op(), c.root);
        let (count, part) = (c.count, c.part());
        Ok(match c.coll {
            Coll::AllReduce | Coll::All => {
                vec![build::all_reduce(&ctx, send, recv, count, dt, op)?]
            }
            Coll::Broadcast => vec![build::broadcast(&ctx, send, recv, count, dt, root)?],
            Coll::Reduce => vec![build::reduce(&ctx, send, recv, count, dt, op, root)?],
            Coll::AllGather => vec![build::all_gather(&ctx, send, recv, part, dt)?],
            Coll::ReduceScatter => vec![build::reduce_scatter(&ctx, send, recv, part, dt, op)?],
            Coll::Alltoall => vec![build::all_to_all(&ctx, send, recv, part, dt)?],
            Coll::Gather => vec![build::gather(&ctx, send, recv, part, dt, root)?],
            Coll::Scatter => vec![build::scatter(&ctx, send, recv, part, dt, root)?],
            Coll::Sendrecv => vec![
                build::send(&ctx, send, count, dt, (c.rank + 1) % c.n)?,
                build::recv(&ctx, recv, count, dt, (c.rank + c.n - 1) % c.n)?,
            ],
        })
    }

    fn once(&self, set: &SetUp) -> Result<()> {
        let (c, ops) = (set.case, &self.ops);
        let mut comm = self.comm.borrow_mut();
        let grouped = ops.len() > 1;
        if self.raw {
            let api = self.lib.library().api();
            let features = oxccl::core::Backend::features(&self.lib);
            let rc = comm.backend().raw();
            let rs = RawStream(comm.stream().cu_stream().cast());
            if grouped {
                // SAFETY: ncclGroupStart takes no argument; its ncclGroupEnd follows below.
                call(api.group_start.map(|f| unsafe { f() }))?;
            }
            for o in ops {
                // SAFETY: the addresses are this layer's live device buffers of the case's
                // lengths on this communicator's device; the stream is the communicator's.
                unsafe { raw_issue(api, features, rc, rs, o, c.n)? };
            }
            if grouped {
                // SAFETY: closes the group opened above, on this thread.
                call(api.group_end.map(|f| unsafe { f() }))?;
            }
            if !self.blocking {
                settle(api, rc)?;
            }
            Ok(())
        } else {
            if grouped {
                let mut g = comm.group()?;
                for o in ops {
                    // SAFETY: as above: live device buffers of the stated lengths, not touched
                    // by anything else until the stream has run the work.
                    unsafe { g.issue(o)? };
                }
                g.end()?;
            } else {
                for o in ops {
                    // SAFETY: as above.
                    unsafe { comm.issue(o)? };
                }
            }
            Ok(())
        }
    }
}

impl<T: Elem> Layer for NcclLayer<T> {
    fn setup(&mut self, case: &Case, in_place: bool) -> Result<bool> {
        self.teardown()?;
        let in_place_ok = matches!(
            case.coll,
            Coll::AllReduce
                | Coll::Broadcast
                | Coll::Reduce
                | Coll::AllGather
                | Coll::ReduceScatter
        );
        if in_place && !in_place_ok {
            return Ok(false);
        }
        if self.raw
            && matches!(case.coll, Coll::Gather | Coll::Scatter)
            && self.lib.library().api().gather.is_none()
        {
            return Ok(false);
        }
        let sz = std::mem::size_of::<T>();
        // Allocated alike on every rank, so that every rank's pool makes the same choices
        // and the windows of -R 2, collective and of one size on all ranks, are made by all
        // ranks together (before, a gather's root made larger windows than the others:
        // NCCL 2.28.9 failed with "operation not supported" from 4 MiB up).
        let (s, r) = case.shape_any_rank();
        let (send, recv) = if in_place {
            let at = self.alloc(s.max(r) * sz)?;
            let off = case.rank as usize * case.part() * sz;
            match case.coll {
                Coll::AllGather => (at + off, at),
                Coll::ReduceScatter => (at, at + off),
                _ => (at, at),
            }
        } else {
            (self.alloc(s * sz)?, self.alloc(r * sz)?)
        };
        self.ops = self.build_ops(case, send, recv)?;
        self.set = Some(SetUp {
            case: *case,
            in_place,
            send,
            recv,
        });
        Ok(true)
    }

    fn arm(&mut self, iters: usize) -> Result<()> {
        self.graph = None;
        if self.graphs == 0 || iters == 0 {
            return Ok(());
        }
        let set = self.set.ok_or_else(not_set_up)?;
        let st = self.comm.borrow().stream().clone();
        let cuda = |e: cudarc::driver::DriverError| {
            Error::invalid("graph", format_args!("a capturable stream ({e:?})"))
        };
        st.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cuda)?;
        let issued = (0..iters).try_for_each(|_| self.once(&set));
        let graph = st.end_capture(sys::CUgraphInstantiate_flags(0));
        // The call that broke the capture says why; the capture's end only that it broke.
        issued?;
        let graph = graph.map_err(cuda)?;
        // NCCL registered the captured buffers by itself: their memory must not come back
        // for another buffer once the pool lets it go (see `NcclMem::note_captured`).
        NcclMem::note_captured(set.send, 1);
        NcclMem::note_captured(set.recv, 1);
        self.graph = graph.map(|g| (g, iters));
        Ok(())
    }

    fn run(&mut self, iters: usize) -> Result<usize> {
        let done = match &self.graph {
            Some((g, per)) => {
                let cuda = |e: cudarc::driver::DriverError| {
                    Error::invalid("graph", format_args!("a launchable graph ({e:?})"))
                };
                for _ in 0..self.graphs {
                    g.launch().map_err(cuda)?;
                }
                per * self.graphs as usize
            }
            None => {
                let set = self.set.ok_or_else(not_set_up)?;
                for _ in 0..iters {
                    self.once(&set)?;
                }
                iters
            }
        };
        self.comm.borrow().synchronize()?;
        Ok(done)
    }

    fn check(&mut self) -> Result<u64> {
        let set = self.set.ok_or_else(not_set_up)?;
        let (c, in_place, s, r) = (set.case, set.in_place, set.send, set.recv);
        let (sn, rn) = c.shape();
        let st = self.comm.borrow().stream().clone();
        let cuda = |e: cudarc::driver::DriverError| {
            Error::invalid("check", format_args!("a device copy ({e:?})"))
        };
        st.context().bind_to_thread().map_err(cuda)?;
        let input = expect::inputs::<T>(&c, sn);
        let in_place_buf = in_place && !matches!(c.coll, Coll::AllGather | Coll::ReduceScatter);
        let input = if in_place_buf {
            expect::inputs::<T>(&c, sn.max(rn))
        } else {
            input
        };
        // A pooled output holds an earlier case's results: zeroed, an operation that wrote
        // nothing cannot pass for one that did.
        zero(&st, r, rn * std::mem::size_of::<T>())?;
        // SAFETY: `s` and `r` address this layer's live buffers, at least `sn`/`rn` elements.
        unsafe { cudarc::driver::result::memcpy_htod_sync(s as u64, &input).map_err(cuda)? };
        // A synchronous copy from pageable memory may return before its DMA lands, and the
        // communicator's stream does not wait for the default stream: wait for the context.
        cudarc::driver::result::ctx::synchronize().map_err(cuda)?;
        self.once(&set)?;
        self.comm.borrow().synchronize()?;
        let mut got = vec![T::of(0.0); rn];
        // SAFETY: as above.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut got, r as u64).map_err(cuda)? };
        if let (true, Some(g)) = (self.corrupt, got.first_mut()) {
            *g = T::of(g.get() + 101.0);
        }
        Ok(expect::count_wrong(&c, &got))
    }

    fn teardown(&mut self) -> Result<()> {
        self.graph = None;
        self.set = None;
        self.ops.clear();
        if self.taken.is_empty() {
            return Ok(());
        }
        // The case's work ends before its buffers serve another case.
        self.comm.borrow().synchronize()?;
        self.pool.append(&mut self.taken);
        Ok(())
    }
}

impl<T: Elem> Drop for NcclLayer<T> {
    /// Lets the pool go: registrations and windows first (windows are collective: every
    /// rank's layer goes at the same point of the run), then the memory. After a failure
    /// (the communicator stopped, its stream not synchronized) nothing is deregistered and
    /// the memory is kept, never freed under work that may still run: the communicator's
    /// destruction releases NCCL's side, the process's end the rest.
    fn drop(&mut self) {
        self.graph = None;
        self.pool.append(&mut self.taken);
        let Ok(mut comm) = self.comm.try_borrow_mut() else {
            std::mem::forget(std::mem::take(&mut self.pool));
            return;
        };
        if let Err(e) = comm.synchronize() {
            log::debug!(
                "perf layer {}: keeping its buffers ({e})",
                self.kind().name()
            );
            std::mem::forget(std::mem::take(&mut self.pool));
            return;
        }
        for p in &mut self.pool {
            if let Some(h) = p.reg.take() {
                if let Err(e) = comm.deregister(h) {
                    log::debug!("perf layer: deregistering a buffer: {e}");
                }
            }
            if let Some(w) = p.window.take() {
                if let Err(e) = comm.backend().window_deregister(w) {
                    log::debug!("perf layer: deregistering a window: {e}");
                }
            }
        }
        drop(comm);
        self.pool.clear();
    }
}

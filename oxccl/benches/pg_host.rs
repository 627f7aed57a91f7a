//! The process group's own host cost per call, without a library or a GPU: a backend defined
//! here whose issue does nothing and whose events are complete at once, so what is timed is
//! oxccl's code alone (the lock, sequence numbers, the work, the watchdog's hand-off, the
//! flight recorder's entry), free of the mock's stream thread and of the driver.
//!
//! Run: `cargo bench --bench pg_host` (or the release binary). Variants are alternated round
//! by round; each round times `OXCCL_BENCH_CALLS` (200) back-to-back 8-byte float32 sum
//! all_reduces on one thread. Reported: the median per-call CPU time of the issuing thread
//! (`CLOCK_THREAD_CPUTIME_ID`, blind to time spent waiting for a core on a busy machine) and
//! the median of the per-round differences to the row named. `OXCCL_BENCH_ROUNDS` (300)
//! changes the rounds; `OXCCL_BENCH_ONLY=<row>` runs that row alone for a profiler;
//! `OXCCL_BENCH_THREADS=<n>` (1) issues from n threads at once, each its own rank and groups
//! with the one watchdog of the process (a thread per GPU), samples of all threads merged.
//!
//! Rows: the `Comm` path over the same backend (buffer access + `Communicator::issue`, what
//! `Comm::all_reduce_in_place` does), then the process group with the watchdog and recorder
//! off, the watchdog alone, both on (a 2000-entry recorder, the default), the recorder alone,
//! then the same groups with each call waited for (`Work::wait`).
//!
//! With `OXCCL_BENCH_GPUS=1` (a GPU machine, NCCL found as usual) it times instead what each
//! piece of a process-group issue costs on NCCL and the driver (module `gpu`).

use oxccl::buffer::{Buffer, Memory, Operand, StreamOf};
use oxccl::core::one_sided::{PutSignal, SignalWait};
use oxccl::core::peer_kernels::{PeerPolicy, PeerTable};
use oxccl::core::traits::StreamPriority;
use oxccl::core::{Backend, Capture, CaptureError, CommAbort, Communicator, Event, Graph, Stream};
use oxccl::core::{
    Error, Missing, OneSided, PeerKernels, Reshape, ReshapeBackend, ShrinkMode, Windows,
};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::recorder::Recorder;
use oxccl::store::{MemStore, Store};
use oxccl::{
    CommConfig, CommOp, CommState, Device, Element, Feature, FeatureSet, Progress, RawBuf,
    RawBufMut, ReduceOp, RegHandle, Result, UniqueId, Version,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// The backend that does nothing: every call succeeds at once.
#[derive(Clone)]
struct Null {
    features: Arc<FeatureSet>,
}

impl Null {
    fn new() -> Null {
        let all = FeatureSet::for_version(Version::new(2, 28, 3));
        // Nothing the process group would use on its own: no windows, no allocator.
        let features = all
            .without(Feature::WindowRegistration)
            .without(Feature::MemAlloc);
        Null {
            features: Arc::new(features),
        }
    }
}

struct NullComm {
    features: Arc<FeatureSet>,
    abort: NullAbort,
}

/// Shared like NCCL's abort handle (an `Arc` of the communicator's state).
#[derive(Clone)]
struct NullAbort(Arc<AtomicBool>);

#[derive(Clone)]
struct NullStream;

struct NullEvent;

/// A buffer that is only a length (nothing ever reads or writes it).
struct NullBuf<T> {
    data: Vec<T>,
}

impl Backend for Null {
    type Comm = NullComm;

    fn version(&self) -> Version {
        self.features.version()
    }

    fn features(&self) -> &FeatureSet {
        &self.features
    }

    fn unique_id(&self) -> Result<UniqueId> {
        UniqueId::from_bytes(&[7u8; UniqueId::LEN])
    }

    fn device_count(&self) -> Result<u32> {
        Ok(u32::MAX)
    }

    fn init_rank(
        &self,
        _id: &UniqueId,
        _rank: u32,
        _size: u32,
        _device: Device,
        _cfg: &CommConfig,
    ) -> Result<NullComm> {
        Ok(NullComm {
            features: self.features.clone(),
            abort: NullAbort(Arc::new(AtomicBool::new(false))),
        })
    }

    fn group_start(&self) -> Result<()> {
        Ok(())
    }

    fn group_end(&self) -> Result<Progress> {
        Ok(Progress::Done)
    }
}

impl CommAbort for NullAbort {
    fn abort(&self, _reason: &str) {
        self.0.store(true, Ordering::Release);
    }

    fn state(&self) -> CommState {
        if self.0.load(Ordering::Acquire) {
            CommState::Aborted
        } else {
            CommState::Ready
        }
    }

    fn poll(&self) -> Result<Progress> {
        Ok(Progress::Done)
    }
}

impl Communicator for NullComm {
    type Stream = NullStream;
    type Abort = NullAbort;

    fn rank(&self) -> u32 {
        0
    }

    fn size(&self) -> u32 {
        1
    }

    fn device(&self) -> Device {
        Device(0)
    }

    fn features(&self) -> &FeatureSet {
        &self.features
    }

    fn state(&self) -> CommState {
        self.abort.state()
    }

    fn poll(&self) -> Result<Progress> {
        Ok(Progress::Done)
    }

    fn new_stream(&self) -> Result<NullStream> {
        Ok(NullStream)
    }

    fn new_stream_with(&self, _priority: StreamPriority) -> Result<NullStream> {
        Ok(NullStream)
    }

    fn abort_handle(&self) -> NullAbort {
        self.abort.clone()
    }

    unsafe fn issue(&self, op: &CommOp<'_>, _stream: &NullStream) -> Result<()> {
        // Keep the operation observable so the call is not optimized away.
        std::hint::black_box(op);
        evict();
        Ok(())
    }

    fn split(&self, _color: Option<u32>, _key: u32, _cfg: &CommConfig) -> Result<Option<Self>> {
        Ok(None)
    }

    fn abort(&self, reason: &str) {
        self.abort.abort(reason);
    }

    fn finalize(&self) -> Result<Progress> {
        Ok(Progress::Done)
    }

    fn register(&self, addr: usize, bytes: usize) -> Result<RegHandle> {
        Ok(RegHandle {
            raw: 1,
            addr,
            bytes,
        })
    }

    fn deregister(&self, _handle: RegHandle) -> Result<()> {
        Ok(())
    }
}

/// The capabilities a process group's safety nets use, which the null backend lacks: each
/// refuses as a library without it does, and the group never calls them with its defaults.
fn lacks<T>(feature: Feature) -> Result<T> {
    Err(Error::Unsupported {
        feature,
        missing: Missing::Disabled,
    })
}

impl Reshape for NullComm {
    fn revoke(&self, _reason: &str) -> Result<Progress> {
        lacks(Feature::Revoke)
    }

    fn shrink(&self, _exclude: &[u32], _cfg: &CommConfig, _mode: ShrinkMode) -> Result<Self> {
        lacks(Feature::Shrink)
    }

    fn grow_id(&self) -> Result<UniqueId> {
        lacks(Feature::Grow)
    }

    fn grow(&self, _size: u32, _id: &UniqueId, _cfg: &CommConfig) -> Result<Self> {
        lacks(Feature::Grow)
    }
}

impl ReshapeBackend for Null {
    fn join_grown(
        &self,
        _id: &UniqueId,
        _rank: u32,
        _size: u32,
        _device: Device,
        _cfg: &CommConfig,
    ) -> Result<NullComm> {
        lacks(Feature::Grow)
    }
}

impl OneSided for NullComm {
    unsafe fn put_signal(&self, _put: &PutSignal, _stream: &NullStream) -> Result<()> {
        lacks(Feature::OneSided)
    }

    fn signal(&self, _peer: u32, _signal: u32, _ctx: u32, _stream: &NullStream) -> Result<()> {
        lacks(Feature::OneSided)
    }

    fn wait_signal(&self, _waits: &[SignalWait], _stream: &NullStream) -> Result<()> {
        lacks(Feature::OneSided)
    }
}

impl Windows for NullComm {
    fn register_window(&self, _addr: usize, _bytes: usize) -> Result<RegHandle> {
        lacks(Feature::WindowRegistration)
    }

    fn deregister_window(&self, _handle: RegHandle) -> Result<()> {
        lacks(Feature::WindowRegistration)
    }
}

impl PeerKernels for NullComm {
    fn enable_peer_kernels(
        &self,
        _stream: &NullStream,
        _policy: PeerPolicy,
        _table: &PeerTable,
    ) -> Result<bool> {
        Ok(false)
    }

    fn peer_policy(&self) -> Option<PeerPolicy> {
        None
    }
}

/// No graph exists: the null stream refuses to capture.
enum NullGraph {}

impl Graph for NullGraph {
    type Stream = NullStream;

    unsafe fn replay(&self, _stream: &NullStream) -> Result<()> {
        match *self {}
    }
}

impl Capture for NullStream {
    type Graph = NullGraph;

    fn begin_capture(&self) -> Result<()> {
        Err(CaptureError::Unsupported.error_str("the null backend records nothing"))
    }

    fn end_capture(&self) -> Result<NullGraph> {
        Err(CaptureError::NotCapturing.error_str("the null backend records nothing"))
    }

    fn is_capturing(&self) -> bool {
        false
    }
}

impl Stream for NullStream {
    type Event = NullEvent;

    fn record(&self, _timing: bool) -> Result<NullEvent> {
        Ok(NullEvent)
    }

    fn wait_event(&self, _event: &NullEvent) -> Result<()> {
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

impl Event for NullEvent {
    fn query(&self) -> Result<bool> {
        Ok(true)
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn elapsed_ms(&self, _end: &NullEvent) -> Result<f32> {
        Ok(0.0)
    }
}

impl<T: Element> Buffer<T> for NullBuf<T> {
    fn len(&self) -> usize {
        self.data.len()
    }
}

impl<T: Element> Operand<Null> for NullBuf<T> {
    type Elem = T;

    fn numel(&self) -> usize {
        self.data.len()
    }

    fn read<'a>(
        &'a self,
        arg: &'static str,
        device: Device,
        stream: &'a NullStream,
    ) -> Result<(RawBuf, ())> {
        Null::read(arg, device, stream, self)
    }

    fn write<'a>(
        &'a mut self,
        arg: &'static str,
        device: Device,
        stream: &'a NullStream,
    ) -> Result<(RawBufMut, ())> {
        Null::write(arg, device, stream, self)
    }

    fn download(&self, backend: &Null, stream: &NullStream) -> Result<Vec<T>> {
        backend.download(stream, self)
    }

    fn has_nan(&self, _backend: &Null, _stream: &NullStream) -> Result<bool> {
        Ok(false)
    }
}

impl Memory for Null {
    type Buf<T: Element> = NullBuf<T>;
    type CommBuf<T: Element> = NullBuf<T>;
    type Access<'a> = ();

    fn stream(&self, _device: Device) -> Result<StreamOf<Self>> {
        Ok(NullStream)
    }

    fn alloc_zeros<T: Element>(&self, _stream: &NullStream, len: usize) -> Result<NullBuf<T>> {
        let data = (0..len).map(|_| unsafe_zero::<T>()).collect::<Vec<T>>();
        Ok(NullBuf { data })
    }

    fn upload<T: Element>(&self, _stream: &NullStream, data: &[T]) -> Result<NullBuf<T>> {
        Ok(NullBuf {
            data: data.to_vec(),
        })
    }

    fn alloc_comm<T: Element>(&self, stream: &NullStream, len: usize) -> Result<NullBuf<T>> {
        self.alloc_zeros(stream, len)
    }

    fn upload_comm<T: Element>(&self, stream: &NullStream, data: &[T]) -> Result<NullBuf<T>> {
        self.upload(stream, data)
    }

    fn download<T: Element>(&self, _stream: &NullStream, buf: &NullBuf<T>) -> Result<Vec<T>> {
        Ok(buf.data.clone())
    }

    fn has_nan<T: Element>(&self, _stream: &NullStream, _buf: &NullBuf<T>) -> Result<bool> {
        Ok(false)
    }

    fn read<'a, T: Element>(
        _arg: &'static str,
        _device: Device,
        _stream: &'a NullStream,
        buf: &'a NullBuf<T>,
    ) -> Result<(RawBuf, ())> {
        Ok((RawBuf::new(buf.data.as_ptr() as usize, buf.data.len()), ()))
    }

    fn write<'a, T: Element>(
        _arg: &'static str,
        _device: Device,
        _stream: &'a NullStream,
        buf: &'a mut NullBuf<T>,
    ) -> Result<(RawBufMut, ())> {
        Ok((
            RawBufMut::new(buf.data.as_mut_ptr() as usize, buf.data.len()),
            (),
        ))
    }
}

/// A zero of any element type NCCL moves.
fn unsafe_zero<T: Element>() -> T {
    // SAFETY: `Element` requires `ValidAsZeroBits`: all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// CPU time the calling thread has used, in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// (name, the row it is compared with, the group it uses (`None`: the communicator alone),
/// whether each call is waited for).
const ROWS: [(&str, usize, Option<usize>, bool); 8] = [
    (
        "Comm path: buffer access + Communicator::issue",
        0,
        None,
        false,
    ),
    (
        "pg, watchdog and recorder off (work dropped)",
        0,
        Some(0),
        false,
    ),
    ("pg, watchdog on, recorder off", 1, Some(1), false),
    ("pg, watchdog on, recorder 2000", 1, Some(2), false),
    ("pg, watchdog off, recorder 2000", 1, Some(3), false),
    ("pg + Work::wait, both off", 0, Some(0), true),
    (
        "pg + Work::wait, watchdog on, recorder 2000",
        5,
        Some(2),
        true,
    ),
    (
        "pg + Work::wait, watchdog on, recorder off",
        5,
        Some(1),
        true,
    ),
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if let Some(n) = std::env::var("OXCCL_BENCH_GPUS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        assert!(n >= 1, "OXCCL_BENCH_GPUS: at least 1");
        gpu::run();
        return;
    }
    let calls = env_usize("OXCCL_BENCH_CALLS", 200);
    let rounds = env_usize("OXCCL_BENCH_ROUNDS", 300);
    let only = std::env::var("OXCCL_BENCH_ONLY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let threads = env_usize("OXCCL_BENCH_THREADS", 1).max(1);
    let rows: Vec<usize> = match only {
        Some(r) if r < ROWS.len() => vec![r],
        _ => (0..ROWS.len()).collect(),
    };
    let barrier = Barrier::new(threads);
    // Every thread's samples, merged: (CPU, wall) per row.
    let per_thread: Vec<Samples> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| issue_rounds(calls, rounds, &rows, &barrier)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut cpu = vec![Vec::new(); ROWS.len()];
    let mut wall = vec![Vec::new(); ROWS.len()];
    for (c, w) in per_thread {
        for v in 0..ROWS.len() {
            cpu[v].extend(&c[v]);
            wall[v].extend(&w[v]);
        }
    }
    println!(
        "null backend, {threads} issuing thread(s) (a rank and its groups each, one watchdog), {calls} calls x {rounds} rounds, 8-byte float32 sum; ns per call"
    );
    println!(
        "| row | path | CPU median | CPU min | wall median | compared with | CPU: median paired difference | wall: median paired difference |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    for &v in &rows {
        let (name, base, _, _) = ROWS[v];
        let diff = |s: &[Vec<f64>]| {
            median(
                s[v].iter()
                    .zip(&s[base])
                    .map(|(a, b)| a - b)
                    .collect::<Vec<_>>(),
            )
        };
        let min = cpu[v].iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "| {} | {name} | {:.0} | {:.0} | {:.0} | row {} | {:+.0} | {:+.0} |",
            v + 1,
            median(cpu[v].clone()),
            min,
            median(wall[v].clone()),
            base + 1,
            diff(&cpu),
            diff(&wall),
        );
    }
}

/// CPU and wall ns per call, by row and round.
type Samples = (Vec<Vec<f64>>, Vec<Vec<f64>>);

/// Bytes of memory each issue writes (`OXCCL_BENCH_EVICT`, KiB; 0 by default): a stand-in
/// for the library's and the driver's own footprint per call, which pushes the process
/// group's data out of the nearer caches between two calls as a real launch does.
fn evict_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var("OXCCL_BENCH_EVICT")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
            * 1024
    })
}

/// Writes a byte per cache line of this thread's [`evict_bytes`] of memory (never inlined:
/// `scripts/pg-footprint.sh` subtracts its cost by name).
#[inline(never)]
fn evict() {
    thread_local! {
        static MEM: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; evict_bytes()]);
    }
    MEM.with(|m| {
        let mut m = m.borrow_mut();
        for i in (0..m.len()).step_by(64) {
            m[i] = m[i].wrapping_add(1);
        }
        std::hint::black_box(&mut *m);
    });
}

/// One issuing thread's rounds (its own backend, communicator and groups; every thread of
/// the run shares the process's watchdog), rows in turn, each row begun by all threads at
/// once.
fn issue_rounds(calls: usize, rounds: usize, rows: &[usize], barrier: &Barrier) -> Samples {
    let backend = Null::new();
    let make = |watchdog: bool, capacity: usize| {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        ProcessGroup::new(
            backend.clone(),
            store,
            0,
            1,
            PgOptions {
                watchdog,
                heartbeat: None,
                recorder: Some(Recorder::new(capacity)),
                ..PgOptions::default()
            },
        )
        .expect("process group")
    };
    let groups = [
        make(false, 0),
        make(true, 0),
        make(true, 2000),
        make(false, 2000),
    ];
    let mut bufs: Vec<NullBuf<f32>> = groups
        .iter()
        .map(|g| g.upload(&[1.0f32, 2.0]).unwrap())
        .collect();
    let comm = backend
        .init_rank(
            &backend.unique_id().unwrap(),
            0,
            1,
            Device(0),
            &CommConfig::new(),
        )
        .unwrap();
    let stream = comm.new_stream().unwrap();
    let mut cbuf = NullBuf {
        data: vec![1.0f32, 2.0],
    };
    let mut cpu = vec![Vec::new(); ROWS.len()];
    let mut wall = vec![Vec::new(); ROWS.len()];
    const WARMUP: usize = 5;
    for round in 0..WARMUP + rounds {
        for &v in rows {
            let (_, _, group, wait) = ROWS[v];
            barrier.wait();
            let (t, c) = (Instant::now(), thread_cpu_ns());
            match group {
                None => {
                    for _ in 0..calls {
                        let op = <f32 as Element>::map_op(ReduceOp::Sum).unwrap();
                        let (w, ()) = Null::write("buf", Device(0), &stream, &mut cbuf).unwrap();
                        let op = CommOp::AllReduce {
                            send: w.as_read(),
                            recv: w,
                            dtype: <f32 as Element>::DTYPE,
                            op,
                        };
                        // SAFETY: the null communicator touches no memory.
                        unsafe { comm.issue(&op, &stream) }.unwrap();
                    }
                }
                Some(g) => {
                    let (pg, b) = (&groups[g], &mut bufs[g]);
                    for _ in 0..calls {
                        let w = pg.all_reduce(b, ReduceOp::Sum).unwrap();
                        if wait {
                            w.wait().unwrap();
                        }
                    }
                }
            }
            let cpu_ns = (thread_cpu_ns() - c) as f64 / calls as f64;
            let wall_ns = t.elapsed().as_nanos() as f64 / calls as f64;
            if round >= WARMUP {
                cpu[v].push(cpu_ns);
                wall[v].push(wall_ns);
            }
        }
    }
    for g in &groups {
        g.destroy();
    }
    (cpu, wall)
}

/// On a GPU (`OXCCL_BENCH_GPUS=1`): what the pieces of a process group's issue cost on NCCL
/// and the driver, each timed alone on one GPU, rows alternated round by round (wall time per
/// call, the median of rounds).
#[path = "pg_host/gpu.rs"]
mod gpu;

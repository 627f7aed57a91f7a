//! On a GPU (`OXCCL_BENCH_GPUS=1`): what the pieces of a process group's issue cost on NCCL
//! and the driver, each timed alone on one GPU, rows alternated round by round (wall time per
//! call, the median of rounds).

use super::env_usize;
use oxccl::core::{Backend, Stream};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::recorder::Recorder;
use oxccl::store::{MemStore, Store};
use oxccl::{Comm, CommConfig, Device, Nccl, NcclStream, ReduceOp};
use std::sync::Arc;
use std::time::Instant;

const ROWS: [&str; 12] = [
    "Comm::all_reduce_in_place",
    "ProcessGroup::all_reduce, watchdog and recorder off (work dropped)",
    "ProcessGroup::all_reduce, watchdog on, recorder 2000 (work dropped)",
    "ProcessGroup::all_reduce, watchdog on, recorder off (work dropped)",
    "NcclStream::record(false) + drop (the event pool's round trip)",
    "cudarc CudaEvent::record of one event (context check + cuEventRecord)",
    "cuEventRecord alone (one event)",
    "cudarc device_ptr_mut + its guard (the buffer's event tracking)",
    "Comm::all_reduce_in_place + NcclStream::record(false) + drop (an event after the launch)",
    "cuStreamWriteValue64 into host-mapped memory (a completion counter)",
    "Comm::all_reduce_in_place + cuStreamWriteValue64 (a counter after the launch)",
    "cuEventQuery of a completed event (the watchdog's look)",
];

pub fn run() {
    let calls = env_usize("OXCCL_BENCH_CALLS", 200);
    let rounds = env_usize("OXCCL_BENCH_ROUNDS", 100);
    let only = std::env::var("OXCCL_BENCH_ONLY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let lib = Nccl::load().expect("load NCCL");
    let id = lib.unique_id().expect("unique id");
    let mut comm = Comm::init_rank(&lib, &id, 0, 1, 0, &CommConfig::new()).expect("init");
    let make = |watchdog: bool, capacity: usize| {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        ProcessGroup::new(
            lib.clone(),
            store,
            0,
            1,
            PgOptions {
                bound_device: Some(Device(0)),
                watchdog,
                recorder: Some(Recorder::new(capacity)),
                ..PgOptions::default()
            },
        )
        .expect("process group")
    };
    let groups = [make(false, 0), make(true, 2000), make(true, 0)];
    let st = comm.stream().clone();
    let mut cbuf = st.clone_htod(&[1.0f32, 2.0]).unwrap();
    let mut tbuf = st.clone_htod(&[1.0f32, 2.0]).unwrap();
    let mut bufs: Vec<_> = groups
        .iter()
        .map(|g| g.upload(&[1.0f32, 2.0]).unwrap())
        .collect();
    let pooled = NcclStream::new(st.clone());
    let ev = st.context().new_event(None).unwrap();
    let counter = HostCounter::new();
    let mut next = 0u64;
    let rows: Vec<usize> = match only {
        Some(r) if r < ROWS.len() => vec![r],
        _ => (0..ROWS.len()).collect(),
    };
    let mut per_call = vec![Vec::new(); ROWS.len()];
    for round in 0..5 + rounds {
        for &v in &rows {
            let t = Instant::now();
            for _ in 0..calls {
                match v {
                    0 => comm.all_reduce_in_place(&mut cbuf, ReduceOp::Sum).unwrap(),
                    1..=3 => {
                        let g = [0, 1, 2][v - 1];
                        drop(groups[g].all_reduce(&mut bufs[g], ReduceOp::Sum).unwrap())
                    }
                    4 => drop(pooled.record(false).unwrap()),
                    5 => ev.record(&st).unwrap(),
                    6 => {
                        // SAFETY: a live event and stream of the same context, current
                        // on this thread (the cudarc calls above bound it).
                        unsafe {
                            cudarc::driver::result::event::record(ev.cu_event(), st.cu_stream())
                        }
                        .unwrap()
                    }
                    8 => {
                        comm.all_reduce_in_place(&mut cbuf, ReduceOp::Sum).unwrap();
                        drop(pooled.record(false).unwrap());
                    }
                    9 => {
                        next += 1;
                        counter.write(&st, next);
                    }
                    10 => {
                        comm.all_reduce_in_place(&mut cbuf, ReduceOp::Sum).unwrap();
                        next += 1;
                        counter.write(&st, next);
                    }
                    11 => {
                        // SAFETY: a live event of the context bound on this thread.
                        let q = unsafe { cudarc::driver::sys::cuEventQuery(ev.cu_event()) };
                        std::hint::black_box(q);
                    }
                    _ => {
                        use cudarc::driver::DevicePtrMut;
                        let (p, g) = tbuf.device_ptr_mut(&st);
                        std::hint::black_box(p);
                        drop(g);
                    }
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / calls as f64;
            st.synchronize().unwrap();
            if round >= 5 {
                per_call[v].push(ns);
            }
        }
    }
    st.synchronize().unwrap();
    println!("host counter reads {} after {next} writes", counter.read());
    println!(
        "NCCL {} at {}, 1 GPU, {calls} calls x {rounds} rounds; wall ns per call",
        lib.version(),
        lib.library().path().display()
    );
    println!("| row | what | median | min |");
    println!("|---|---|---|---|");
    for &v in &rows {
        let mut s = per_call[v].clone();
        s.sort_by(|a, b| a.total_cmp(b));
        println!(
            "| {} | {} | {:.0} | {:.0} |",
            v + 1,
            ROWS[v],
            s[s.len() / 2],
            s[0]
        );
    }
    for g in &groups {
        g.destroy();
    }
    comm.destroy().unwrap();
}

/// Eight bytes of pinned host memory the device can write (experiment).
struct HostCounter {
    host: *mut u64,
    dev: cudarc::driver::sys::CUdeviceptr,
}

impl HostCounter {
    fn new() -> HostCounter {
        use cudarc::driver::sys;
        let mut host = std::ptr::null_mut();
        let mut dev = 0;
        // SAFETY: out-pointers valid; the context is bound on this thread.
        unsafe {
            let r = sys::cuMemHostAlloc(
                &mut host,
                8,
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            );
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "cuMemHostAlloc");
            *(host as *mut u64) = 0;
            let r = sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0);
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "cuMemHostGetDevicePointer");
        }
        HostCounter {
            host: host as *mut u64,
            dev,
        }
    }

    fn write(&self, st: &cudarc::driver::CudaStream, v: u64) {
        // SAFETY: a live stream; `dev` maps 8 pinned bytes that live as long as `self`.
        let r =
            unsafe { cudarc::driver::sys::cuStreamWriteValue64_v2(st.cu_stream(), self.dev, v, 0) };
        assert_eq!(
            r,
            cudarc::driver::sys::CUresult::CUDA_SUCCESS,
            "cuStreamWriteValue64"
        );
    }

    fn read(&self) -> u64 {
        // SAFETY: pinned memory the device writes; a volatile read sees its last write.
        unsafe { std::ptr::read_volatile(self.host) }
    }
}

impl Drop for HostCounter {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `new`; the stream was synchronized
        // before the bench ends, so no write to it is pending.
        unsafe { cudarc::driver::sys::cuMemFreeHost(self.host as *mut _) };
    }
}

//! Host cost and latency of one all_reduce through the process group against the `Comm` path
//! beneath it, in the same binary, on the same GPUs, variants alternated round by round.
//!
//! Run on a GPU machine: `OXCCL_BENCH_GPUS=2 target/release/deps/pg_overhead-*` (a thread per
//! GPU; one GPU works too). Without `OXCCL_BENCH_GPUS` it runs on the mock world (one rank;
//! `cargo bench --bench pg_overhead`): the process group with the watchdog and recorder off
//! against on, which is what the watchdog's hand-off costs the issuing thread (the mock's own
//! issue, a task queued to a stream thread, is far costlier than NCCL's, so only the paired
//! difference means anything there).
//!
//! - issue: `CALLS` back-to-back 8-byte all_reduces without waiting, the issuing loop timed
//!   (the process group's cost: a lock, two sequence numbers, an event and its work). On
//!   cudarc slices, as `Comm` takes them (cudarc records the slice's own event besides the
//!   work's), and on `NcclBuf`, the group's own buffer, whose use ends with the work's event.
//!   Every buffer is read back once a round (see `reader`); rows 14 and 15 show what one
//!   event record costs beside `Comm`'s call, and `Comm` on a slice never read back; the
//!   last, what the recorder costs the issuing thread when no watchdog records for it.
//! - latency: each call waited for before the next (`Work::wait` against a stream
//!   synchronize), the whole loop timed.
//! - pipelined: `CALLS` calls, then a wait for the last, the whole timed: what `oxccl perf`
//!   and nccl-tests time (the host's issue or the GPU's run, whichever is slower).

use oxccl::core::Backend;
use oxccl::pg::{PgOptions, ProcessGroup, RegMode, TuneTable};
use oxccl::recorder::Recorder;
use oxccl::store::{MemStore, PrefixStore, Store};
use oxccl::{Comm, CommConfig, Device, Nccl, ReduceOp};
use std::sync::{Arc, Barrier};
use std::time::Instant;

const CALLS: usize = 200;
const ROUNDS: usize = 100;
const WARMUP: usize = 5;
/// The variants and the one each is compared with (paired, round by round).
const VARIANTS: [(&str, usize); 16] = [
    ("issue: Comm::all_reduce_in_place", 0),
    (
        "issue: ProcessGroup::all_reduce, watchdog and recorder off (work dropped)",
        0,
    ),
    (
        "issue: ProcessGroup::all_reduce, watchdog on, recorder 2000 (work dropped)",
        1,
    ),
    ("latency: Comm::all_reduce_in_place + stream synchronize", 3),
    (
        "latency: ProcessGroup::all_reduce + Work::wait, watchdog and recorder off",
        3,
    ),
    (
        "latency: ProcessGroup::all_reduce + Work::wait, watchdog on, recorder 2000",
        4,
    ),
    (
        "issue: ProcessGroup::all_reduce, watchdog on, recorder off (work dropped)",
        1,
    ),
    (
        "issue: ProcessGroup::all_reduce on NcclBuf, watchdog and recorder off (work dropped)",
        0,
    ),
    (
        "issue: ProcessGroup::all_reduce on NcclBuf, watchdog on, recorder 2000 (work dropped)",
        7,
    ),
    (
        "pipelined: Comm::all_reduce_in_place x CALLS, then stream synchronize",
        9,
    ),
    (
        "pipelined: ProcessGroup::all_reduce on NcclBuf x CALLS, then the last Work::wait, watchdog on, recorder 2000",
        9,
    ),
    (
        "pipelined: as row 11, in a group made by new_group with a uniform -R 1 tune table",
        10,
    ),
    (
        "pipelined: as row 11, in a group made by ProcessGroup::new with a uniform -R 1 tune table",
        10,
    ),
    (
        "issue: Comm::all_reduce_in_place + one event record per call (what a work's event costs)",
        0,
    ),
    (
        "issue: Comm::all_reduce_in_place on a slice never read back (its read event the allocation's)",
        0,
    ),
    (
        "issue: ProcessGroup::all_reduce, watchdog off, recorder 2000 (the issuing thread records)",
        1,
    ),
];

fn main() {
    let Some(n) = std::env::var("OXCCL_BENCH_GPUS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    else {
        eprintln!(
            "no OXCCL_BENCH_GPUS: the mock world (set OXCCL_BENCH_GPUS=<n> on a GPU machine)"
        );
        mock::run();
        return;
    };
    let lib = Nccl::load().expect("load NCCL");
    let id = lib.unique_id().expect("unique id");
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let barrier = Arc::new(Barrier::new(n as usize));
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (lib, barrier, store) = (lib.clone(), barrier.clone(), store.clone());
            std::thread::spawn(move || rank(lib, id, store, r, n, barrier))
        })
        .collect();
    let results: Vec<Vec<Vec<f64>>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    println!(
        "NCCL {} at {}, {n} GPUs, {CALLS} calls x {ROUNDS} rounds, 8-byte float32 sum, cudarc event tracking on",
        lib.version(),
        lib.library().path().display()
    );
    print_table(&VARIANTS, &results);
}

/// The markdown table of `rows` (name, the row it is compared with) from the samples of each
/// rank (`by_rank[rank][row]`, ns per call by round): median and min over every rank's
/// samples, and the median of the differences paired within a rank and round.
fn print_table(rows: &[(&str, usize)], by_rank: &[Vec<Vec<f64>>]) {
    println!(
        "| path | median ns/call | min ns/call | compared with | median paired difference, ns |"
    );
    println!("|---|---|---|---|---|");
    for (v, &(name, base)) in rows.iter().enumerate() {
        let mut all: Vec<f64> = by_rank.iter().flat_map(|r| r[v].clone()).collect();
        let mut diff: Vec<f64> = by_rank
            .iter()
            .flat_map(|r| r[v].iter().zip(&r[base]).map(|(a, b)| a - b))
            .collect();
        all.sort_by(|a, b| a.total_cmp(b));
        diff.sort_by(|a, b| a.total_cmp(b));
        println!(
            "| {name} | {:.0} | {:.0} | row {} | {:+.0} |",
            all[all.len() / 2],
            all[0],
            base + 1,
            diff[diff.len() / 2]
        );
    }
}

fn rank(
    lib: Nccl,
    id: oxccl::UniqueId,
    store: Arc<dyn Store>,
    r: u32,
    n: u32,
    barrier: Arc<Barrier>,
) -> Vec<Vec<f64>> {
    let mut comm = Comm::init_rank(&lib, &id, r, n, r, &CommConfig::new()).expect("init");
    high_priority_check(&lib, &store, r, n);
    let make = |prefix: &str, watchdog: bool, capacity: usize| {
        let store: Arc<dyn Store> = Arc::new(PrefixStore::new(prefix, store.clone()));
        ProcessGroup::new(
            lib.clone(),
            store,
            r,
            n,
            PgOptions {
                bound_device: Some(Device(r)),
                watchdog,
                recorder: Some(Recorder::new(capacity)),
                ..PgOptions::default()
            },
        )
        .expect("process group")
    };
    let plain = make("plain", false, 0);
    let full = make("full", true, 2000);
    let dog = make("dog", true, 0);
    let rec = make("rec", false, 2000);
    let st = comm.stream().clone();
    let mut cbuf = st.clone_htod(&[1.0f32, 2.0]).unwrap();
    // Every buffer here is read back once a round, the group's through its copy stream, so
    // `Comm`'s through a stream of its own too: an operation waits on a slice's read event,
    // and the driver's wait costs more once that event was last recorded by a later read
    // than while it still holds the allocation's record, a difference that would otherwise
    // count against the group.
    let reader = st.context().new_stream().unwrap();
    let mut fresh = st.clone_htod(&[1.0f32, 2.0]).unwrap();
    let mark = st
        .context()
        .new_event(Some(
            cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
        ))
        .unwrap();
    let mut pbuf = plain.upload(&[1.0f32, 2.0]).unwrap();
    let mut fbuf = full.upload(&[1.0f32, 2.0]).unwrap();
    let mut dbuf = dog.upload(&[1.0f32, 2.0]).unwrap();
    let mut rbuf = rec.upload(&[1.0f32, 2.0]).unwrap();
    // The group's own buffer type: its stream order shares the work's end event.
    let mut pnb = plain.upload_comm(&[1.0f32, 2.0]).unwrap();
    let mut fnb = full.upload_comm(&[1.0f32, 2.0]).unwrap();
    // Groups under a tune table (registration everywhere), as `oxccl perf -R 1` makes one
    // (new_group of its base group) and as a user would at construction.
    let table = Some(Arc::new(TuneTable::uniform(RegMode::Registered)));
    let sub = full
        .new_group(
            full.ranks(),
            Some(PgOptions {
                tune: table.clone(),
                ..full.options().clone()
            }),
        )
        .expect("new_group");
    let tuned = {
        let store: Arc<dyn Store> = Arc::new(PrefixStore::new("tuned", store.clone()));
        ProcessGroup::new(
            lib.clone(),
            store,
            r,
            n,
            PgOptions {
                tune: table,
                ..full.options().clone()
            },
        )
        .expect("process group")
    };
    let mut snb = sub.upload_comm(&[1.0f32, 2.0]).unwrap();
    let mut tnb = tuned.upload_comm(&[1.0f32, 2.0]).unwrap();
    let mut per_call = vec![Vec::new(); VARIANTS.len()];
    for round in 0..WARMUP + ROUNDS {
        for (v, samples) in per_call.iter_mut().enumerate() {
            barrier.wait();
            let t = Instant::now();
            let mut last = None;
            for _ in 0..CALLS {
                match v {
                    0 => comm.all_reduce_in_place(&mut cbuf, ReduceOp::Sum).unwrap(),
                    1 => drop(plain.all_reduce(&mut pbuf, ReduceOp::Sum).unwrap()),
                    2 => drop(full.all_reduce(&mut fbuf, ReduceOp::Sum).unwrap()),
                    3 => {
                        comm.all_reduce_in_place(&mut cbuf, ReduceOp::Sum).unwrap();
                        st.synchronize().unwrap();
                    }
                    4 => plain
                        .all_reduce(&mut pbuf, ReduceOp::Sum)
                        .unwrap()
                        .wait()
                        .unwrap(),
                    5 => full
                        .all_reduce(&mut fbuf, ReduceOp::Sum)
                        .unwrap()
                        .wait()
                        .unwrap(),
                    6 => drop(dog.all_reduce(&mut dbuf, ReduceOp::Sum).unwrap()),
                    7 => drop(plain.all_reduce(&mut pnb, ReduceOp::Sum).unwrap()),
                    8 => drop(full.all_reduce(&mut fnb, ReduceOp::Sum).unwrap()),
                    9 => comm.all_reduce_in_place(&mut cbuf, ReduceOp::Sum).unwrap(),
                    10 => last = Some(full.all_reduce(&mut fnb, ReduceOp::Sum).unwrap()),
                    11 => last = Some(sub.all_reduce(&mut snb, ReduceOp::Sum).unwrap()),
                    12 => last = Some(tuned.all_reduce(&mut tnb, ReduceOp::Sum).unwrap()),
                    13 => {
                        comm.all_reduce_in_place(&mut cbuf, ReduceOp::Sum).unwrap();
                        mark.record(&st).unwrap();
                    }
                    14 => comm.all_reduce_in_place(&mut fresh, ReduceOp::Sum).unwrap(),
                    _ => drop(rec.all_reduce(&mut rbuf, ReduceOp::Sum).unwrap()),
                }
            }
            // The pipelined rows time the loop up to the end of its last operation, as
            // `oxccl perf` and nccl-tests do (host or GPU, whichever is slower).
            match (v, last) {
                (9, _) => st.synchronize().unwrap(),
                (_, Some(w)) => w.wait().unwrap(),
                _ => {}
            }
            let ns = t.elapsed().as_nanos() as f64 / CALLS as f64;
            st.synchronize().unwrap();
            reader.clone_dtoh(&cbuf).unwrap();
            plain.download(&pbuf).unwrap();
            full.download(&fbuf).unwrap();
            dog.download(&dbuf).unwrap();
            rec.download(&rbuf).unwrap();
            plain.download_any(&pnb).unwrap();
            full.download_any(&fnb).unwrap();
            sub.download_any(&snb).unwrap();
            tuned.download_any(&tnb).unwrap();
            if round >= WARMUP {
                samples.push(ns);
            }
        }
    }
    barrier.wait();
    comm.destroy().unwrap();
    plain.destroy();
    sub.destroy();
    tuned.destroy();
    full.destroy();
    dog.destroy();
    rec.destroy();
    per_call
}

/// Says which priority a group made with `high_priority` issues on (CUDA's number: lower is
/// higher; 0 is the default).
fn high_priority_check(lib: &Nccl, store: &Arc<dyn Store>, r: u32, n: u32) {
    let store: Arc<dyn Store> = Arc::new(PrefixStore::new("prio", store.clone()));
    let pg = ProcessGroup::new(
        lib.clone(),
        store,
        r,
        n,
        PgOptions {
            bound_device: Some(Device(r)),
            high_priority: true,
            ..PgOptions::default()
        },
    )
    .expect("process group");
    let prio = pg
        .with_stream(|s| {
            let mut p = 0;
            // SAFETY: a live stream of this group; `p` is a valid place for the result.
            let rc =
                unsafe { cudarc::driver::sys::cuStreamGetPriority(s.cuda().cu_stream(), &mut p) };
            (rc, p)
        })
        .expect("stream");
    let range = cudarc::driver::result::stream::get_priority_range();
    println!("rank {r}: high_priority stream priority {prio:?} (driver range (least, greatest) {range:?})");
    pg.destroy();
}

/// The mock world's part: one rank, the process group with the watchdog and the recorder off
/// and on, alternated round by round.
mod mock {
    use oxccl::mock::MockBackend;
    use oxccl::pg::{PgOptions, ProcessGroup};
    use oxccl::recorder::Recorder;
    use oxccl::store::{MemStore, Store};
    use oxccl::ReduceOp;
    use std::sync::Arc;

    /// CPU time the calling thread has used, in ns (what the issuing thread itself spends,
    /// without the time it waits to be scheduled on a busy machine).
    fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write; the clock id is a constant the kernel knows.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// (name, the row it is compared with, which group: 0 both off, 1 both on, 2 the
    /// watchdog alone).
    const VARIANTS: [(&str, usize, usize); 6] = [
        (
            "issue: ProcessGroup::all_reduce, watchdog and recorder off (work dropped)",
            0,
            0,
        ),
        (
            "issue: ProcessGroup::all_reduce, watchdog on, recorder 2000 (work dropped)",
            0,
            1,
        ),
        (
            "issue: ProcessGroup::all_reduce, watchdog on, recorder off (work dropped)",
            0,
            2,
        ),
        (
            "latency: ProcessGroup::all_reduce + Work::wait, watchdog and recorder off",
            3,
            0,
        ),
        (
            "latency: ProcessGroup::all_reduce + Work::wait, watchdog on, recorder 2000",
            3,
            1,
        ),
        (
            "latency: ProcessGroup::all_reduce + Work::wait, watchdog on, recorder off",
            3,
            2,
        ),
    ];

    pub fn run() {
        let rounds: usize = std::env::var("OXCCL_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(super::ROUNDS);
        let make = |watchdog: bool, capacity: usize| {
            let store: Arc<dyn Store> = Arc::new(MemStore::new());
            ProcessGroup::new(
                MockBackend::new(),
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
        let groups = [make(false, 0), make(true, 2000), make(true, 0)];
        let mut bufs: Vec<_> = groups
            .iter()
            .map(|g| g.upload(&[1.0f32, 2.0]).unwrap())
            .collect();
        let mut per_call = vec![Vec::new(); VARIANTS.len()];
        for round in 0..super::WARMUP + rounds {
            for (v, samples) in per_call.iter_mut().enumerate() {
                let which = VARIANTS[v].2;
                let (g, b) = (&groups[which], &mut bufs[which]);
                // Start from an idle stream: the previous variant's calls have run.
                g.all_reduce(b, ReduceOp::Sum).unwrap().wait().unwrap();
                let t = thread_cpu_ns();
                for _ in 0..super::CALLS {
                    let w = g.all_reduce(b, ReduceOp::Sum).unwrap();
                    if v >= 3 {
                        w.wait().unwrap();
                    }
                }
                let ns = (thread_cpu_ns() - t) as f64 / super::CALLS as f64;
                if round >= super::WARMUP {
                    samples.push(ns);
                }
            }
        }
        println!(
            "mock world, 1 rank, {} calls x {rounds} rounds, 8-byte float32 sum; CPU time of the \
             issuing thread per call (wall time on a shared machine is mostly scheduling noise)",
            super::CALLS
        );
        let rows: Vec<(&str, usize)> = VARIANTS.iter().map(|&(n, b, _)| (n, b)).collect();
        super::print_table(&rows, &[per_call]);
        for g in &groups {
            g.destroy();
        }
    }
}

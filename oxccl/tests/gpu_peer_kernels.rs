//! oxccl's own kernels on GPUs, a thread per GPU through `Comm`: every type the kernels have ×
//! every reduction × counts up to the slot size, in place and out of place, for the
//! all-reduces, the all-gather and the reduce-scatter, eager and replayed in a CUDA graph with
//! new inputs each launch, against the host reference; and the waits that must give up (a peer that never calls: `Timeout` naming it;
//! an abort from another thread), after which a new communicator runs the kernels again;
//! calls of one shape back to back (which follow one another block by block), with a copy
//! into their buffer and calls of another shape between some of them; and a process group's
//! small all-reduces on the kernels, back to back.
//! Runs when `OXCCL_TEST_GPUS` is 2 or more (all of them are used) and skips, saying so,
//! otherwise.

mod common;
#[allow(dead_code)]
#[path = "gpu/devbuf.rs"]
mod devbuf;
#[path = "gpu/end_mark.rs"]
mod end_mark;
#[path = "gpu/following.rs"]
mod following;
#[allow(dead_code)]
#[path = "gpu/values.rs"]
mod values;

use devbuf::{run, DevBuf, Tally};
use oxccl::core::peer_kernels::{
    KernelAlgo, KernelColl, KernelType, PeerPolicy, PeerTable, LINES_PER_SLOT,
};
use oxccl::core::Backend as _;
use oxccl::core::PeerKernels;
use oxccl::{Comm, CommConfig, CommOp, CommState, DataType, Error, HostScalar, ReduceOp, Scalar};
use std::time::{Duration, Instant};
use values::{input, reduced};

fn gpus() -> Option<u32> {
    if !common::gpus_at_least(2) {
        return None;
    }
    std::env::var("OXCCL_TEST_GPUS").ok()?.parse().ok()
}

/// A communicator of `n` ranks with the kernels under `policy` (asserted on).
fn comm(lib: &oxccl::Nccl, id: &oxccl::UniqueId, r: u32, n: u32, policy: PeerPolicy) -> Comm {
    let nc = lib
        .init_rank(id, r, n, oxccl::Device(r), &CommConfig::new())
        .expect("init");
    let mut c = Comm::with_new_stream(nc).expect("stream");
    let on = c
        .enable_peer_kernels_with(policy, &PeerTable::default())
        .expect("peer kernels set-up");
    assert!(on, "rank {r}: the kernels stayed off on one node");
    assert_eq!(c.backend().peer_policy(), Some(policy));
    c
}

fn reductions(dt: DataType) -> Vec<ReduceOp> {
    let mut v = ReduceOp::BUILTIN.to_vec();
    let factor = match dt {
        DataType::Float16 => Some(HostScalar::F16(half::f16::from_f64(2.0).to_bits())),
        DataType::Bfloat16 => Some(HostScalar::Bf16(half::bf16::from_f64(2.0).to_bits())),
        DataType::Float32 => Some(HostScalar::F32(2.0)),
        DataType::Float64 => Some(HostScalar::F64(2.0)),
        _ => None,
    };
    if let Some(f) = factor {
        v.push(ReduceOp::PreMulSum(Scalar::Host(f)));
    }
    v
}

fn factor(op: &ReduceOp) -> f64 {
    if matches!(op, ReduceOp::PreMulSum(_)) {
        2.0
    } else {
        1.0
    }
}

/// Every case of the module's first paragraph under `algo` on this rank (the all-gather and
/// reduce-scatter kernels on their own collectives); returns the tally and how many kernel
/// calls ran.
fn values_under(c: &mut Comm, algo: KernelAlgo) -> (Tally, u64) {
    let mut t = Tally::default();
    let (n, r) = (c.size(), c.rank());
    let slot_bytes = (LINES_PER_SLOT * 8) as usize;
    // The largest count each kernel holds: one-shot's whole buffer, two-shot's a chunk per
    // rank, the gathers' one rank's part.
    let cap = match algo {
        KernelAlgo::TwoShot => slot_bytes * n as usize,
        KernelAlgo::OneShot | KernelAlgo::AllGather | KernelAlgo::ReduceScatter => slot_bytes,
    };
    let mut expected = 0u64;
    for dt in KernelType::ALL.map(KernelType::dtype) {
        let counts = [1, 3, 7, 1031, 4099, cap / dt.size()];
        let ops: Vec<Option<ReduceOp>> = match algo.coll() {
            KernelColl::AllGather => vec![None],
            _ => reductions(dt).into_iter().map(Some).collect(),
        };
        for op in ops {
            for count in counts {
                for in_place in [false, true] {
                    let name = format!(
                        "{} {dt} {} n={count} in_place={in_place}",
                        algo.name(),
                        op.as_ref().map_or(String::new(), |o| o.to_string())
                    );
                    expected += 1;
                    let (got, want) = match (algo.coll(), op) {
                        (KernelColl::AllReduce, Some(op)) => {
                            let send_vals: Vec<f64> =
                                (0..count).map(|i| input(Some(&op), r, i)).collect();
                            let want: Vec<f64> = (0..count)
                                .map(|i| reduced(dt, &op, n, i, factor(&op)))
                                .collect();
                            let send = DevBuf::new(c, dt, &send_vals);
                            let out = (!in_place).then(|| DevBuf::zeros(c, dt, count));
                            let recv = out.as_ref().unwrap_or(&send);
                            let call = CommOp::AllReduce {
                                send: send.r(),
                                recv: recv.w(),
                                dtype: dt,
                                op,
                            };
                            if !run(c, &mut t, &name, call) {
                                continue;
                            }
                            (recv.read(c, dt), want)
                        }
                        (KernelColl::AllGather, _) => {
                            let whole = count * n as usize;
                            let mine: Vec<f64> = (0..count).map(|i| input(None, r, i)).collect();
                            let want: Vec<f64> = (0..whole)
                                .map(|j| input(None, (j / count) as u32, j % count))
                                .collect();
                            // In place: the input is this rank's part of the output.
                            let (recv, send) = if in_place {
                                let mut start = vec![0.0; whole];
                                start[r as usize * count..][..count].copy_from_slice(&mine);
                                (DevBuf::new(c, dt, &start), None)
                            } else {
                                (DevBuf::zeros(c, dt, whole), Some(DevBuf::new(c, dt, &mine)))
                            };
                            let send_raw = send.as_ref().map_or_else(
                                || recv.part(dt, r as usize * count, count).as_read(),
                                DevBuf::r,
                            );
                            let call = CommOp::AllGather {
                                send: send_raw,
                                recv: recv.w(),
                                dtype: dt,
                            };
                            if !run(c, &mut t, &name, call) {
                                continue;
                            }
                            (recv.read(c, dt), want)
                        }
                        (KernelColl::ReduceScatter, Some(op)) => {
                            let whole = count * n as usize;
                            let send_vals: Vec<f64> =
                                (0..whole).map(|j| input(Some(&op), r, j)).collect();
                            let want: Vec<f64> = (0..count)
                                .map(|i| reduced(dt, &op, n, r as usize * count + i, factor(&op)))
                                .collect();
                            let send = DevBuf::new(c, dt, &send_vals);
                            // In place: the output is this rank's chunk of the input.
                            let out = (!in_place).then(|| DevBuf::zeros(c, dt, count));
                            let recv_raw = out.as_ref().map_or_else(
                                || send.part(dt, r as usize * count, count),
                                DevBuf::w,
                            );
                            let call = CommOp::ReduceScatter {
                                send: send.r(),
                                recv: recv_raw,
                                dtype: dt,
                                op,
                            };
                            if !run(c, &mut t, &name, call) {
                                continue;
                            }
                            let got = match &out {
                                Some(o) => o.read(c, dt),
                                None => send.read(c, dt)[r as usize * count..][..count].to_vec(),
                            };
                            (got, want)
                        }
                        (_, None) => unreachable!("only the all-gather has no reduction"),
                    };
                    t.check(&name, &got, &want, dt);
                }
            }
        }
    }
    let ran = c.backend().peer_kernel_calls_of(algo);
    assert_eq!(
        ran,
        expected,
        "rank {r}: every case ran on the {} kernel",
        algo.name()
    );
    (t, ran)
}

/// A graph of one out-of-place f32 operation of `coll` (a sum where it reduces; `count`
/// elements per rank), launched 5 times with new inputs each time: every launch's output is
/// that launch's result (a flag reused across launches would let a rank read the previous
/// launch's data).
fn graph_relaunches(c: &mut Comm, coll: KernelColl, count: usize) -> Tally {
    let mut t = Tally::default();
    let (n, r) = (c.size(), c.rank());
    let dt = DataType::Float32;
    let whole = count * n as usize;
    let (send_len, recv_len) = match coll {
        KernelColl::AllReduce => (count, count),
        KernelColl::AllGather => (count, whole),
        KernelColl::ReduceScatter => (whole, count),
    };
    let mut send = c.stream().alloc_zeros::<f32>(send_len).expect("alloc");
    let mut recv = c.stream().alloc_zeros::<f32>(recv_len).expect("alloc");
    let op = |c: &mut Comm, send: &_, recv: &mut _| match coll {
        KernelColl::AllReduce => c.all_reduce(send, recv, ReduceOp::Sum),
        KernelColl::AllGather => c.all_gather(send, recv),
        KernelColl::ReduceScatter => c.reduce_scatter(send, recv, ReduceOp::Sum),
    };
    op(c, &send, &mut recv).expect("eager first");
    let g = c.capture(|c| op(c, &send, &mut recv)).expect("capture");
    // Rank p's input at element i in launch l.
    let value = |l: u32, p: u32, i: usize| (l * 10 + p + (i % 3) as u32) as f32;
    for launch in 0..5u32 {
        let vals: Vec<f32> = (0..send_len).map(|i| value(launch, r, i)).collect();
        c.stream().memcpy_htod(&vals, &mut send).expect("upload");
        g.bind(c, &mut send)
            .buf(&mut recv)
            .replay()
            .expect("launch");
        let got: Vec<f64> = c
            .stream()
            .clone_dtoh(&recv)
            .expect("download")
            .into_iter()
            .map(f64::from)
            .collect();
        let sum = |i: usize| (0..n).map(|p| f64::from(value(launch, p, i))).sum::<f64>();
        let want: Vec<f64> = match coll {
            KernelColl::AllReduce => (0..count).map(sum).collect(),
            KernelColl::AllGather => (0..whole)
                .map(|j| f64::from(value(launch, (j / count) as u32, j % count)))
                .collect(),
            KernelColl::ReduceScatter => (0..count).map(|i| sum(r as usize * count + i)).collect(),
        };
        t.check(
            &format!("{coll:?} graph launch {launch} count {count}"),
            &got,
            &want,
            dt,
        );
    }
    t
}

#[test]
fn gpu_peer_kernels_match_the_host_reference() {
    let Some(n) = gpus() else { return };
    let lib = oxccl::Nccl::load().expect("NCCL");
    for algo in KernelAlgo::EVERY {
        let id = lib.unique_id().expect("id");
        let tallies: Vec<(Tally, u64)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|r| {
                    let lib = lib.clone();
                    s.spawn(move || {
                        let mut c = comm(&lib, &id, r, n, PeerPolicy::Force(algo));
                        let (mut t, ran) = values_under(&mut c, algo);
                        for count in [2, 5000] {
                            let g = graph_relaunches(&mut c, algo.coll(), count);
                            t.absorb(g);
                        }
                        // Each graph's eager call and its capture ran on the kernel.
                        assert_eq!(
                            c.backend().peer_kernel_calls_of(algo),
                            ran + 4,
                            "rank {r}: the graphs' calls on the {} kernel",
                            algo.name()
                        );
                        if algo.coll() == KernelColl::AllReduce {
                            t.absorb(following::back_to_back(&mut c, algo));
                            t.absorb(following::grids_between(&mut c, algo));
                            t.absorb(end_mark::marked_ends(&mut c));
                        }
                        c.destroy().expect("destroy");
                        (t, ran)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("rank")).collect()
        });
        for (r, (t, ran)) in tallies.iter().enumerate() {
            eprintln!(
                "{} on {n} GPUs, rank {r}: {} checks passed, {ran} kernel calls",
                algo.name(),
                t.passed
            );
            assert!(t.failed.is_empty(), "rank {r}: {:#?}", t.failed);
        }
    }
}

/// Rank 0 calls an all-reduce its peers never call: its kernel gives up after the
/// communicator's time limit and the communicator reports `Timeout` naming the missing ranks.
/// Then (all ranks) a fresh communicator runs the kernels again.
#[test]
fn gpu_peer_kernel_gives_up_on_a_peer_that_never_calls() {
    let Some(n) = gpus() else { return };
    let limit = Duration::from_secs(2);
    let lib = oxccl::Nccl::load().expect("NCCL").with_timeout(limit);
    let id = lib.unique_id().expect("id");
    let again = lib.unique_id().expect("id");
    std::thread::scope(|s| {
        for r in 0..n {
            let lib = lib.clone();
            s.spawn(move || {
                let mut c = comm(&lib, &id, r, n, PeerPolicy::Auto);
                let mut buf = c.stream().alloc_zeros::<f32>(4).expect("alloc");
                if r == 0 {
                    let t0 = Instant::now();
                    c.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                        .expect("issue");
                    // The kernel ends on its own; the synchronize that waited for it
                    // reports why.
                    let waited = c.synchronize();
                    let took = t0.elapsed();
                    assert!(
                        took >= limit && took < limit + Duration::from_secs(3),
                        "{took:?}"
                    );
                    let missing: Vec<String> = (1..n).map(|p| p.to_string()).collect();
                    match waited {
                        Err(Error::Timeout { what, after_ms }) => {
                            assert_eq!(after_ms, limit.as_millis() as u64);
                            let text = what.as_str().to_string();
                            assert!(
                                text.contains(&format!(
                                    "ranks [{}] did not arrive",
                                    missing.join(", ")
                                )),
                                "{text}"
                            );
                        }
                        other => panic!("rank 0: the wait for the kernel gave {other:?}"),
                    }
                    // Sticky: later polls report it too.
                    assert!(matches!(c.poll(), Err(Error::Timeout { .. })));
                    assert!(matches!(c.state(), CommState::Failed), "{:?}", c.state());
                }
                c.abort("test over");
                drop(c);
                // A new group on the same devices: the kernels run again.
                let mut c = comm(&lib, &again, r, n, PeerPolicy::Auto);
                let mut buf = c.stream().clone_htod(&[1.0f32; 4]).expect("upload");
                c.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                    .expect("issue");
                let got = c.stream().clone_dtoh(&buf).expect("download");
                assert_eq!(got, vec![n as f32; 4], "rank {r} after the abort");
                assert_eq!(c.backend().peer_kernel_calls().0, 1);
                c.destroy().expect("destroy");
            });
        }
    });
}

/// Rank 0 waits in a kernel for peers that never call; another thread aborts the
/// communicator: the kernel gives up at once (well before the time limit), the stream drains,
/// and the communicator is Aborted with the abort's reason.
#[test]
fn gpu_peer_kernel_gives_up_on_an_abort_from_another_thread() {
    let Some(n) = gpus() else { return };
    let lib = oxccl::Nccl::load()
        .expect("NCCL")
        .with_timeout(Duration::from_secs(60));
    let id = lib.unique_id().expect("id");
    std::thread::scope(|s| {
        for r in 0..n {
            let lib = lib.clone();
            s.spawn(move || {
                let mut c = comm(&lib, &id, r, n, PeerPolicy::Auto);
                if r == 0 {
                    let mut buf = c.stream().alloc_zeros::<f32>(4).expect("alloc");
                    c.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                        .expect("issue");
                    let handle = c.abort_handle();
                    let aborter = std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(300));
                        handle.abort("stopped by the test");
                    });
                    let t0 = Instant::now();
                    let _ = c.synchronize_timeout(Duration::from_secs(10));
                    let took = t0.elapsed();
                    aborter.join().unwrap();
                    assert!(
                        took < Duration::from_secs(3),
                        "the kernel outlived the abort: {took:?}"
                    );
                    assert_eq!(c.state(), CommState::Aborted);
                    let e = c.poll().unwrap_err();
                    assert!(e.to_string().contains("stopped by the test"), "{e}");
                } else {
                    c.abort("peer test over");
                }
            });
        }
    });
}

/// Starts a process per GPU in `role` (see `gpu_peer_child_rank`), with `env` per rank, and
/// asserts each one's outcome with `judge(rank, output)`.
fn processes(
    n: u32,
    role: &str,
    env: &dyn Fn(u32) -> Vec<(String, String)>,
    judge: impl Fn(u32, &std::process::Output),
) {
    let outs = common::children::spawn_ranks(
        n,
        "gpu_peer_child_rank",
        role,
        None,
        env,
        Duration::from_secs(150),
    );
    for (r, o) in &outs {
        let text = String::from_utf8_lossy(&o.stdout);
        for l in text.lines().filter(|l| l.starts_with("child")) {
            eprintln!("[{role} rank {r}] {l}");
        }
        judge(*r, o);
    }
}

fn succeeded(r: u32, o: &std::process::Output) {
    assert!(
        o.status.success(),
        "rank {r} failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A process per GPU: the memory goes between processes as descriptors over Unix sockets;
/// every case of the threads' test, on both kernels.
#[test]
fn gpu_peer_kernels_across_processes() {
    let Some(n) = gpus() else { return };
    for role in ["values-one-shot", "values-two-shot"] {
        processes(n, role, &|_| Vec::new(), succeeded);
    }
}

/// Ranks that say they are on different hosts never set the kernels up: every all-reduce
/// runs on NCCL, with its values right.
#[test]
fn gpu_peer_kernels_stay_off_across_hosts() {
    let Some(n) = gpus() else { return };
    let env = |r: u32| vec![("OXCCL_PEER_HOST".to_string(), format!("host-{r}"))];
    processes(n, "hosts", &env, succeeded);
}

/// Rank 1 is killed (SIGKILL) while its kernel waits for the others. The survivors' next
/// kernel gives up within the time limit with an error (the kernel's `Timeout` naming rank 1,
/// or NCCL's remote error if NCCL saw the death first), the abort returns, and the GPU is
/// still usable.
#[test]
fn gpu_peer_killed_mid_kernel() {
    let Some(n) = gpus() else { return };
    processes(n, "kill", &|_| Vec::new(), |r, o| {
        if r == 1 {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(o.status.signal(), Some(9), "rank 1 was to die by SIGKILL");
        } else {
            succeeded(r, o);
            assert!(String::from_utf8_lossy(&o.stdout).contains("child survivor ok"));
        }
    });
}

/// The body of a child process (does nothing unless started by `processes`).
#[test]
fn gpu_peer_child_rank() {
    let Some((role, r, n, id)) = common::children::child() else {
        return;
    };
    let limit = Duration::from_secs(2);
    let lib = oxccl::Nccl::load().expect("NCCL").with_timeout(limit);
    match role.as_str() {
        "values-one-shot" | "values-two-shot" => {
            let algo = if role.ends_with("one-shot") {
                KernelAlgo::OneShot
            } else {
                KernelAlgo::TwoShot
            };
            let mut c = comm(&lib, &id, r, n, PeerPolicy::Force(algo));
            let (t, ran) = values_under(&mut c, algo);
            println!(
                "child {r}: {} {} checks passed, {ran} kernel calls",
                algo.name(),
                t.passed
            );
            assert!(t.failed.is_empty(), "{:#?}", t.failed);
            c.destroy().expect("destroy");
        }
        "hosts" => {
            let mut c = Comm::init_rank(&lib, &id, r, n, r, &CommConfig::new()).expect("init");
            assert_eq!(
                c.backend().peer_policy(),
                None,
                "the kernels came on across hosts"
            );
            let mut buf = c.stream().clone_htod(&[1.0f32; 8]).expect("upload");
            c.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                .expect("all_reduce");
            assert_eq!(
                c.stream().clone_dtoh(&buf).expect("download"),
                vec![n as f32; 8]
            );
            assert_eq!(c.backend().peer_kernel_calls(), (0, 0));
            println!("child {r}: kernels off across hosts, NCCL ran it");
            c.destroy().expect("destroy");
        }
        "kill" => {
            let mut c = comm(&lib, &id, r, n, PeerPolicy::Auto);
            let mut buf = c.stream().clone_htod(&[1.0f32; 4]).expect("upload");
            if r == 1 {
                c.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                    .expect("issue");
                std::thread::sleep(Duration::from_millis(300));
                println!("child {r}: killing myself inside the kernel");
                let me = std::process::id().to_string();
                let _ = std::process::Command::new("kill")
                    .args(["-9", &me])
                    .status();
                std::thread::sleep(Duration::from_secs(60));
            }
            std::thread::sleep(Duration::from_millis(800));
            // Rank 1 pushed its part before it died: this call may complete (or NCCL may
            // already report the death).
            c.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                .expect("issue");
            let first = c.synchronize();
            println!("child {r}: the call rank 1 died in: {first:?}");
            if first.is_ok() {
                let t0 = Instant::now();
                c.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                    .expect("issue");
                let e = c.synchronize().expect_err("a dead peer must give an error");
                let took = t0.elapsed();
                println!("child {r}: the next call gave {e} after {took:?}");
                assert!(took < limit + Duration::from_secs(3), "{took:?}");
                match &e {
                    Error::Timeout { what, .. } => {
                        assert!(what.as_str().contains("[1] did not arrive"), "{what}")
                    }
                    Error::Remote { .. } | Error::Backend { .. } => {}
                    other => panic!("unexpected error {other:?}"),
                }
            }
            let t0 = Instant::now();
            c.abort("peer died");
            println!("child {r}: abort took {:?}", t0.elapsed());
            let ctx = cudarc::driver::CudaContext::new(r as usize).expect("context");
            let st = ctx.new_stream().expect("stream");
            let x = st.clone_htod(&[7u32; 1024]).expect("upload");
            assert_eq!(st.clone_dtoh(&x).expect("download")[1023], 7);
            println!("child survivor ok");
        }
        other => panic!("unknown role {other}"),
    }
}

/// A process group's small all-reduces on the kernels, issued back to back with the watchdog
/// on: 300 in-place i32 sums on the group's own buffers and 300 on cudarc slices, then the
/// last work waited for; the values are the host's wrapping sums (each call's input is the
/// previous call's output, so one call run out of order or twice shows).
fn pg_back_to_back_on_rank(store: std::sync::Arc<dyn oxccl::store::Store>, r: u32, n: u32) {
    use oxccl::pg::{PgOptions, ProcessGroup};
    let opts = PgOptions {
        bound_device: Some(oxccl::Device(r)),
        peer_kernels: PeerPolicy::Force(KernelAlgo::OneShot),
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(oxccl::Nccl::load().expect("NCCL"), store, r, n, opts).expect("pg");
    let start: Vec<i32> = (0..4).map(|i| r as i32 * 7 + i + 1).collect();
    let calls = 300;
    let mut want: Vec<i32> = (0..4)
        .map(|i| (0..n as i32).map(|q| q * 7 + i + 1).sum())
        .collect();
    for _ in 1..calls {
        for w in want.iter_mut() {
            *w = w.wrapping_mul(n as i32);
        }
    }
    let mut comm_buf = pg.upload_comm(&start).expect("upload");
    let mut slice = pg.upload(&start).expect("upload");
    for _ in 0..calls {
        pg.all_reduce(&mut comm_buf, ReduceOp::Sum)
            .expect("all_reduce");
    }
    let mut last = None;
    for _ in 0..calls {
        last = Some(
            pg.all_reduce(&mut slice, ReduceOp::Sum)
                .expect("all_reduce"),
        );
    }
    assert_eq!(
        pg.peer_kernels(),
        Some(PeerPolicy::Force(KernelAlgo::OneShot))
    );
    last.expect("work").wait().expect("wait");
    assert_eq!(
        pg.download_any(&comm_buf).expect("read"),
        want,
        "rank {r}: NcclBuf"
    );
    assert_eq!(
        pg.download_any(&slice).expect("read"),
        want,
        "rank {r}: slice"
    );
    pg.destroy();
}

#[test]
fn gpu_peer_kernels_back_to_back_in_a_process_group() {
    let Some(n) = gpus() else { return };
    let store: std::sync::Arc<dyn oxccl::store::Store> =
        std::sync::Arc::new(oxccl::store::MemStore::new());
    std::thread::scope(|s| {
        for r in 0..n {
            let store = store.clone();
            s.spawn(move || pg_back_to_back_on_rank(store, r, n));
        }
    });
}

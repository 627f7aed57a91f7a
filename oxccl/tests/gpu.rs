//! Acceptance tests on real GPUs. They run when `OXCCL_TEST_GPUS=<n>` is set and skip, saying
//! so, otherwise. Each suite runs with one thread per GPU, and with one process per GPU (the
//! test binary re-executes itself once per rank). `OXCCL_TEST_LIBRARIES` (colon-separated
//! paths) makes the per-process suite run once per NCCL library, chosen through
//! `OXCCL_NCCL_LIBRARY`.

mod common;
#[path = "gpu/contract.rs"]
mod contract;
#[path = "gpu/devbuf.rs"]
mod devbuf;
#[path = "gpu/fp8.rs"]
mod fp8;
#[path = "gpu/suite.rs"]
mod suite;
#[path = "gpu/typed.rs"]
mod typed;
#[path = "gpu/values.rs"]
mod values;

use oxccl::core::Communicator as _;
use oxccl::core::Reshape;
use oxccl::core::{Backend, Stream};
use oxccl::{Comm, CommConfig, CommState, Error, Feature, Nccl, ReduceOp};
use std::process::Command;
use std::time::{Duration, Instant};

fn gpus() -> Option<u32> {
    match std::env::var("OXCCL_TEST_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) if n >= 1 => Some(n),
        _ => {
            eprintln!("skipped: no GPU configured (set OXCCL_TEST_GPUS=<n> to run the GPU tests)");
            None
        }
    }
}

fn nccl() -> Nccl {
    Nccl::load().unwrap_or_else(|e| panic!("loading NCCL: {e}"))
}

/// Runs `body(rank, comm)` on one thread per GPU, all in one communicator.
fn on_threads<T: Send + 'static>(
    n: u32,
    cfg: CommConfig,
    body: impl Fn(u32, Comm) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    on_threads_with(nccl(), n, cfg, body)
}

/// [`on_threads`] with a given backend.
fn on_threads_with<T: Send + 'static>(
    lib: Nccl,
    n: u32,
    cfg: CommConfig,
    body: impl Fn(u32, Comm) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let id = lib.unique_id().expect("unique id");
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (lib, cfg, body) = (lib.clone(), cfg.clone(), body.clone());
            std::thread::spawn(move || {
                let comm = Comm::init_rank(&lib, &id, r, n, r, &cfg).expect("init");
                body(r, comm)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread panicked"))
        .collect()
}

#[test]
fn gpu_threads_every_op_type_and_reduction() {
    let Some(n) = gpus() else { return };
    let tallies = on_threads(n, CommConfig::new(), |_, mut c| {
        let t = suite::run_all(&mut c);
        c.destroy().expect("finalize + destroy");
        t
    });
    let passed: usize = tallies.iter().map(|t| t.passed).sum();
    let failed: Vec<_> = tallies.iter().flat_map(|t| t.failed.clone()).collect();
    println!(
        "threads: {passed} checks passed over {n} ranks, {} failed",
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(passed > 1000);
}

#[test]
fn gpu_threads_fallback_paths() {
    let Some(n) = gpus() else { return };
    // Hide the native all-to-all, gather and scatter (2.28+): the grouped send/recv paths that
    // older releases take run on this one.
    let lib = nccl()
        .without(Feature::AllToAll)
        .without(Feature::GatherScatter);
    let tallies = on_threads_with(lib, n, CommConfig::new(), |_, mut c| {
        assert!(!oxccl::core::Communicator::features(c.backend()).has(Feature::AllToAll));
        let t = suite::run_all(&mut c);
        c.destroy().expect("finalize + destroy");
        t
    });
    let passed: usize = tallies.iter().map(|t| t.passed).sum();
    let failed: Vec<_> = tallies.iter().flat_map(|t| t.failed.clone()).collect();
    println!(
        "fallback paths: {passed} checks passed over {n} ranks, {} failed",
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:#?}");
}

/// fp8 moves byte-exact on the loaded library, whatever its release: as uint8 before 2.24.3
/// (`OXCCL_NCCL_LIBRARY` naming a 2.23 library runs that path as released; a newer one runs it
/// with fp8 hidden), where its reductions are refused.
#[test]
fn gpu_fp8_moves_byte_exact_on_any_release() {
    let Some(n) = gpus() else { return };
    let lib = nccl();
    let mut libs = vec![(lib.clone(), "as loaded")];
    if lib.features().has(Feature::Float8) {
        libs.push((lib.without(Feature::Float8), "fp8 hidden"));
    }
    for (lib, how) in libs {
        let version = lib.version();
        let checked = on_threads_with(lib, n, CommConfig::new(), |_, mut c| {
            let k = fp8::run_all(&mut c);
            c.destroy().expect("finalize + destroy");
            k
        });
        println!(
            "fp8 on NCCL {version} ({how}): {} byte-exact checks over {n} ranks",
            checked.iter().sum::<usize>()
        );
        assert!(checked.iter().all(|k| *k >= 16));
    }
}

#[test]
fn gpu_threads_large_counts() {
    let Some(n) = gpus() else { return };
    on_threads(n, CommConfig::new(), move |r, mut c| {
        let st = c.stream().clone();
        let count = 64 << 20; // 64 Mi elements
        let mut buf = st.clone_htod(&vec![(r + 1) as f32; count]).unwrap();
        c.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
        c.synchronize().unwrap();
        let host = st.clone_dtoh(&buf).unwrap();
        let want = (n * (n + 1) / 2) as f32;
        assert!(host.iter().all(|x| *x == want), "64Mi f32 all_reduce");
        let mine = st.clone_htod(&vec![r as u8; count]).unwrap();
        let mut all = st.alloc_zeros::<u8>(count * n as usize).unwrap();
        c.all_gather(&mine, &mut all).unwrap();
        c.synchronize().unwrap();
        let host = st.clone_dtoh(&all).unwrap();
        for q in 0..n as usize {
            assert!(
                host[q * count..(q + 1) * count]
                    .iter()
                    .all(|x| *x == q as u8),
                "64Mi u8 all_gather part {q}"
            );
        }
        println!("rank {r}: 64 Mi element all_reduce and all_gather correct (typed API)");
        let t = suite::run_large(&mut c, count);
        println!(
            "rank {r}: every op at 64 Mi elements: {} checks passed, {} failed",
            t.passed,
            t.failed.len()
        );
        assert!(t.failed.is_empty(), "{:#?}", t.failed);
        c.destroy().unwrap();
    });
}

#[test]
fn gpu_split_nonblocking_and_registration() {
    let Some(n) = gpus() else { return };
    let lib = nccl();
    let fs = *lib.features();
    on_threads(n, CommConfig::new().blocking(false), move |r, mut c| {
        // nonblocking init: usable after wait_ready
        c.wait_ready().expect("nonblocking init completes");
        assert_eq!(c.state(), CommState::Ready);
        let st = c.stream().clone();
        // split by parity, keys reversed: child rank order follows the key
        if fs.has(Feature::Split) {
            let mut child = c
                .split(Some(r % 2), n - r, &CommConfig::new())
                .unwrap()
                .expect("member");
            let members: Vec<u32> = (0..n).filter(|q| q % 2 == r % 2).collect();
            assert_eq!(child.size() as usize, members.len());
            let pos = members.iter().rev().position(|q| *q == r).unwrap() as u32;
            assert_eq!(child.rank(), pos, "child rank ordered by key");
            let mut x = st.clone_htod(&[r as f32]).unwrap();
            x = {
                let cst = child.stream().clone();
                let mut y = cst.clone_htod(&st.clone_dtoh(&x).unwrap()).unwrap();
                child.all_reduce_in_place(&mut y, ReduceOp::Sum).unwrap();
                child.synchronize().unwrap();
                let got = cst.clone_dtoh(&y).unwrap()[0];
                assert_eq!(got, members.iter().sum::<u32>() as f32);
                st.clone_htod(&[got]).unwrap()
            };
            drop(x);
            child.destroy().unwrap();
            // NOCOLOR: rank 0 joins none
            let other = c
                .split(if r == 0 { None } else { Some(0) }, r, &CommConfig::new())
                .unwrap();
            assert_eq!(other.is_none(), r == 0);
            if let Some(o) = other {
                assert_eq!(o.size(), n - 1);
                o.destroy().unwrap();
            }
        }
        if fs.has(Feature::BufferRegistration) {
            let buf = st.alloc_zeros::<f32>(1 << 20).unwrap();
            let h = c.register(&buf).expect("register");
            assert!(matches!(
                c.register(&buf),
                Err(Error::InvalidArgument { arg: "addr", .. })
            ));
            let mut bogus = h;
            bogus.raw ^= 0x10;
            assert!(matches!(
                c.deregister(bogus),
                Err(Error::InvalidArgument { arg: "handle", .. })
            ));
            c.deregister(h).expect("deregister");
            assert!(matches!(
                c.deregister(h),
                Err(Error::InvalidArgument { arg: "handle", .. })
            ));
            // a registered buffer stays registered until abort/destroy releases it
            let _kept = c.register(&buf).expect("register again");
        }
        c.destroy().unwrap();
        println!("rank {r}: nonblocking init, split, NOCOLOR and registration ok");
    });
}

#[test]
fn gpu_abort_unblocks_an_unmatched_collective() {
    let Some(n) = gpus() else { return };
    if n < 2 {
        eprintln!("skipped: needs 2 GPUs");
        return;
    }
    let times = on_threads(n, CommConfig::new(), |r, mut c| {
        let st = c.stream().clone();
        let mut buf = st.alloc_zeros::<f32>(1024).unwrap();
        // A matched collective first: NCCL connects peers lazily, inside the first call.
        c.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
        c.synchronize().unwrap();
        if r != 0 {
            // the peers never join the second one: rank 0's all_reduce cannot complete
            std::thread::sleep(Duration::from_secs(4));
            c.abort("test over");
            return Duration::ZERO;
        }
        let handle = c.abort_handle();
        let aborter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            let t = Instant::now();
            handle.abort("deliberate");
            (t, t.elapsed())
        });
        let issued = c.all_reduce_in_place(&mut buf, ReduceOp::Sum);
        let waited = issued.and_then(|_| c.synchronize_timeout(Duration::from_secs(10)));
        let back = Instant::now();
        let (aborted_at, abort_call) = aborter.join().unwrap();
        println!(
            "rank 0: unmatched all_reduce ended with {waited:?}; ncclCommAbort took {abort_call:?}"
        );
        assert!(waited.is_err(), "the unmatched collective must not succeed");
        assert!(
            matches!(c.poll(), Err(Error::Aborted { ref reason }) if reason.as_str() == "deliberate")
        );
        // every later operation fails fast with the reason
        assert!(matches!(
            c.all_reduce_in_place(&mut buf, ReduceOp::Sum),
            Err(Error::Aborted { .. })
        ));
        back.saturating_duration_since(aborted_at)
    });
    println!("host returned {:?} after the abort began", times[0]);
    assert!(
        times[0] < Duration::from_secs(2),
        "abort took {:?} to unblock",
        times[0]
    );
}

/// Spawns one child process per rank running `role` (in `gpu_child_rank`), with the library at
/// `lib` (or the default).
fn spawn_ranks(n: u32, role: &str, lib: Option<&str>) -> Vec<(u32, std::process::Output)> {
    common::children::spawn_ranks(
        n,
        "gpu_child_rank",
        role,
        lib,
        &|_| Vec::new(),
        Duration::from_secs(120),
    )
}

#[test]
fn gpu_processes_every_op_per_library() {
    let Some(n) = gpus() else { return };
    let libs: Vec<Option<String>> = match std::env::var("OXCCL_TEST_LIBRARIES") {
        Ok(v) => v
            .split(':')
            .filter(|s| !s.is_empty())
            .map(|s| Some(s.to_string()))
            .collect(),
        Err(_) => vec![None],
    };
    for lib in libs {
        let outs = spawn_ranks(n, "suite", lib.as_deref());
        for (r, o) in &outs {
            let text = String::from_utf8_lossy(&o.stdout);
            println!(
                "[{lib:?} rank {r}] {}",
                text.lines()
                    .filter(|l| l.starts_with("child"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            assert!(
                o.status.success(),
                "rank {r} with {lib:?} failed:\n{text}\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            if let Some(p) = &lib {
                assert!(
                    text.contains(&format!("library {p}")),
                    "rank {r} did not load {p}:\n{text}"
                );
            }
        }
    }
}

#[test]
fn gpu_peer_killed_mid_collective() {
    let Some(n) = gpus() else { return };
    if n < 2 {
        eprintln!("skipped: needs 2 GPUs");
        return;
    }
    let outs = spawn_ranks(n, "kill", None);
    for (r, o) in &outs {
        let text = String::from_utf8_lossy(&o.stdout);
        println!(
            "[rank {r}] {}",
            text.lines()
                .filter(|l| l.starts_with("child"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        if *r == 1 {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(o.status.signal(), Some(9), "rank 1 was to die by SIGKILL");
        } else {
            assert!(
                o.status.success(),
                "survivor {r} failed:\n{text}\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(text.contains("child survivor ok"), "{text}");
        }
    }
}

/// The body of a child process (does nothing unless started by `spawn_ranks`).
#[test]
fn gpu_child_rank() {
    let Some((role, r, n, id)) = common::children::child() else {
        return;
    };
    let lib = nccl();
    println!(
        "child {r}: library {} version {}",
        lib.library().path().display(),
        lib.version()
    );
    let mut c = Comm::init_rank(&lib, &id, r, n, r, &CommConfig::new()).expect("init");
    match role.as_str() {
        "suite" => {
            let t = suite::run_all(&mut c);
            println!(
                "child {r}: {} checks passed, {} failed",
                t.passed,
                t.failed.len()
            );
            assert!(t.failed.is_empty(), "{:#?}", t.failed);
            c.destroy().unwrap();
        }
        "kill" => {
            let st = c.stream().clone();
            let mut buf = st.clone_htod(&vec![1.0f32; 1 << 20]).unwrap();
            c.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
            c.synchronize().unwrap();
            println!("child {r}: first all_reduce ok");
            if r == 1 {
                let me = std::process::id().to_string();
                let _ = Command::new("kill").args(["-9", &me]).status();
                std::thread::sleep(Duration::from_secs(60));
            }
            std::thread::sleep(Duration::from_millis(500));
            c.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
            let t = Instant::now();
            let e = c
                .synchronize_timeout(Duration::from_secs(5))
                .expect_err("a dead peer must give an error, not success");
            println!("child {r}: survivor got {e} after {:?}", t.elapsed());
            assert!(matches!(
                e,
                Error::Timeout { .. } | Error::Remote { .. } | Error::Backend { .. }
            ));
            let handle = c.abort_handle();
            let t = Instant::now();
            handle.abort("peer died");
            println!("child {r}: abort took {:?}", t.elapsed());
            // the GPU is still usable: allocate, copy, synchronize
            let st2 = lib_stream(r);
            let x = st2.clone_htod(&[7u32; 1024]).unwrap();
            assert_eq!(st2.clone_dtoh(&x).unwrap()[1023], 7);
            println!("child survivor ok");
        }
        other => panic!("unknown role {other}"),
    }
}

fn lib_stream(device: u32) -> std::sync::Arc<cudarc::driver::CudaStream> {
    let ctx = cudarc::driver::CudaContext::new(device as usize).unwrap();
    ctx.new_stream().unwrap()
}

#[test]
fn gpu_stream_events_time_work() {
    let Some(n) = gpus() else { return };
    on_threads(n, CommConfig::new(), |_, mut c| {
        let st = c.stream().clone();
        let ns = oxccl::NcclStream::new(st.clone());
        let start = ns.record(true).unwrap();
        let mut buf = st.alloc_zeros::<f32>(1 << 22).unwrap();
        c.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
        let end = ns.record(true).unwrap();
        end.synchronize().unwrap();
        use oxccl::core::Event;
        assert!(end.query().unwrap());
        let ms = start.elapsed_ms(&end).unwrap();
        assert!(ms > 0.0, "elapsed {ms}");
        let untimed = ns.record(false).unwrap();
        assert!(untimed.elapsed_ms(&end).is_err());
    });
}

#[test]
fn gpu_init_all_one_thread_drives_every_gpu() {
    let Some(n) = gpus() else { return };
    use oxccl::core::{Communicator, Stream as _};
    let lib = nccl();
    let comms = lib
        .init_all(&(0..n).collect::<Vec<_>>())
        .expect("ncclCommInitAll");
    let streams: Vec<_> = comms.iter().map(|c| c.new_stream().unwrap()).collect();
    let bufs: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(r, s)| s.cuda().clone_htod(&[r as f64 + 1.0; 5]).unwrap())
        .collect();
    let addrs: Vec<usize> = bufs
        .iter()
        .zip(&streams)
        .map(|(b, s)| {
            use cudarc::driver::DevicePtr;
            b.device_ptr(s.cuda()).0 as usize
        })
        .collect();
    // one thread, one group, every rank
    // groups belong to the library (per thread), spanning its communicators
    lib.group_start().unwrap();
    for (c, (a, s)) in comms.iter().zip(addrs.iter().zip(&streams)) {
        let op = oxccl::CommOp::AllReduce {
            send: oxccl::RawBuf::new(*a, 5),
            recv: oxccl::RawBufMut::new(*a, 5),
            dtype: oxccl::DataType::Float64,
            op: ReduceOp::Sum,
        };
        // SAFETY: each buffer is 5 f64 on its comm's device, alive until the synchronize below.
        unsafe { c.issue(&op, s) }.unwrap();
    }
    assert_eq!(lib.group_end().unwrap(), oxccl::Progress::Done);
    let want = f64::from(n * (n + 1) / 2);
    for (b, s) in bufs.iter().zip(&streams) {
        s.synchronize().unwrap();
        assert_eq!(s.cuda().clone_dtoh(b).unwrap(), vec![want; 5]);
    }
    for c in comms {
        c.destroy().unwrap();
    }
    println!("init_all: one thread drove {n} GPUs in one group");
}

#[test]
fn gpu_scalable_init_shrink_windows_memory_and_groups() {
    let Some(n) = gpus() else { return };
    if n < 2 {
        eprintln!("skipped: needs 2 GPUs");
        return;
    }
    let lib = nccl();
    let fs = *lib.features();
    if !fs.has(Feature::ScalableInit) {
        eprintln!("skipped: scalable init needs NCCL 2.23");
        return;
    }
    let ids = [lib.unique_id().unwrap(), lib.unique_id().unwrap()];
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let lib = lib.clone();
            std::thread::spawn(move || {
                let cfg = CommConfig::new()
                    .comm_name("oxccl-test")
                    .unwrap()
                    .set(oxccl::ConfigField::MaxCtas, 4)
                    .unwrap()
                    .set(oxccl::ConfigField::MinCtas, 2)
                    .unwrap();
                let comm = lib
                    .init_rank_scalable(&ids, r, n, oxccl::Device(r), &cfg)
                    .expect("scalable init with config");
                let mut c = Comm::with_new_stream(comm).unwrap();
                let st = c.stream().clone();
                // nested groups; an invalid op inside is refused and the group still closes
                {
                    let a = st.clone_htod(&[1.0f32; 4]).unwrap();
                    let mut short = st.alloc_zeros::<f32>(3).unwrap();
                    let mut ok = st.alloc_zeros::<f32>(4).unwrap();
                    let mut outer = c.group().unwrap();
                    let mut inner = outer.group().unwrap();
                    assert!(matches!(
                        inner.all_reduce(&a, &mut short, ReduceOp::Sum),
                        Err(Error::InvalidArgument { arg: "recv", .. })
                    ));
                    inner.all_reduce(&a, &mut ok, ReduceOp::Sum).unwrap();
                    inner.end().unwrap();
                    outer.end().unwrap();
                    c.synchronize().unwrap();
                    assert_eq!(st.clone_dtoh(&ok).unwrap(), vec![n as f32; 4]);
                }
                // NCCL's allocator, registered; a window over it (2.27+)
                if fs.has(Feature::MemAlloc) {
                    let mem = oxccl::NcclMem::alloc(c.backend().library(), 1 << 20)
                        .expect("ncclMemAlloc");
                    let h = c
                        .backend()
                        .register(mem.addr(), mem.bytes())
                        .expect("register ncclMemAlloc memory");
                    c.backend().deregister(h).unwrap();
                    if fs.has(Feature::WindowRegistration) {
                        let w = c
                            .backend()
                            .window_register(mem.addr(), mem.bytes(), 0)
                            .expect("window");
                        assert!(matches!(
                            c.backend().window_register(mem.addr(), mem.bytes(), 0),
                            Err(Error::InvalidArgument { arg: "addr", .. })
                        ));
                        c.backend().window_deregister(w).unwrap();
                    }
                }
                // shrink: rank 0 carries on alone without the last rank
                if fs.has(Feature::Shrink) && r != n - 1 {
                    let small = c
                        .backend()
                        .shrink(
                            &[n - 1],
                            &CommConfig::new(),
                            oxccl_core::ShrinkMode::Default,
                        )
                        .expect("shrink");
                    assert_eq!(small.size(), n - 1);
                    let mut s = Comm::with_new_stream(small).unwrap();
                    let sst = s.stream().clone();
                    let mut x = sst.clone_htod(&[1i32; 3]).unwrap();
                    s.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
                    s.synchronize().unwrap();
                    assert_eq!(sst.clone_dtoh(&x).unwrap(), vec![(n - 1) as i32; 3]);
                    s.destroy().unwrap();
                }
                c.destroy().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().expect("rank thread");
    }
    println!(
        "scalable init with config, nested groups, ncclMemAlloc + register, windows and shrink ok"
    );
}

#[test]
fn gpu_two_ranks_on_one_device_is_invalid_usage() {
    let Some(_) = gpus() else { return };
    // Seed case 2: NCCL refuses two ranks of one communicator on the same GPU ("Duplicate GPU
    // detected"); both ranks get a typed backend error carrying NCCL's text, not a hang.
    let lib = nccl();
    let id = lib.unique_id().unwrap();
    let handles: Vec<_> = (0..2u32)
        .map(|r| {
            let lib = lib.clone();
            std::thread::spawn(move || {
                Comm::init_rank(&lib, &id, r, 2, 0, &CommConfig::new()).map(|_| ())
            })
        })
        .collect();
    for h in handles {
        match h.join().expect("rank thread") {
            Err(Error::Backend { code, last, .. }) => {
                assert_eq!(code, oxccl::ResultCode::INVALID_USAGE, "{last}");
                println!("same-device init refused: {code}: {last}");
            }
            other => panic!("expected ncclInvalidUsage, got {other:?}"),
        }
    }
}

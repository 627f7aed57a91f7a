//! One NCCL communicator shared by a Rust program and a PyTorch program: this is the Rust
//! side, an inference server that receives the weights a PyTorch trainer
//! (`examples/torch_share/trainer.py`) broadcasts every step. The guide is
//! docs/guide/pytorch.md; `scripts/gpu-torch-share.sh` runs both on 2 GPUs.
//!
//! The trainer is rank 0 (GPU 0): it makes the NCCL unique id, hosts a `torch.distributed.TCPStore`
//! and sets the id there. This program is rank 1: it reads the id with oxccl's `TcpStore`
//! client, loads the same libnccl as torch, joins with `init_rank_within` and
//! `Comm::with_new_stream` (not `Comm::init_rank`, whose set-up of oxccl's kernels is a
//! collective the torch side does not make), receives and checks each step's weights, then all-reduces its checksum back to the trainer, acknowledges in the
//! store and destroys the communicator.
//!
//! ```sh
//! python examples/torch_share/trainer.py --port 29533 &              # GPU 0
//! target/release/examples/torch_share --store 127.0.0.1:29533 --gpu 1
//! ```
//!
//! Flags: `--store HOST:PORT` (127.0.0.1:29533), `--gpu N` (1), `--nccl PATH` (else
//! `OXCCL_NCCL_LIBRARY`, else the library the trainer says torch loaded, else the usual search),
//! `--timeout SECS` (120: the store, the init and each step), `--allow-version-mismatch`,
//! `--dry-store` (only read the trainer's keys and echo the id back; no GPU, no NCCL).
//! Exit status 0 when every step's weights matched, 1 otherwise, 2 for a usage error.

#[path = "torch_share/handshake.rs"]
mod handshake;

use handshake::{Shared, KEY_ACK, KEY_SERVER};
use oxccl::prelude::*;
use oxccl::store::{Store, TcpStore};
use oxccl::{Comm, CommConfig, Device, Nccl, ReduceOp};
use std::process::ExitCode;
use std::time::{Duration, Instant};

struct Args {
    store: String,
    gpu: u32,
    nccl: Option<String>,
    timeout: Duration,
    allow_mismatch: bool,
    dry_store: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        store: "127.0.0.1:29533".into(),
        gpu: 1,
        nccl: None,
        timeout: Duration::from_secs(120),
        allow_mismatch: false,
        dry_store: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--store" => a.store = value("--store")?,
            "--gpu" => {
                a.gpu = value("--gpu")?
                    .parse()
                    .map_err(|_| "--gpu wants a device number".to_string())?
            }
            "--nccl" => a.nccl = Some(value("--nccl")?),
            "--timeout" => {
                let s: u64 = value("--timeout")?
                    .parse()
                    .map_err(|_| "--timeout wants seconds".to_string())?;
                a.timeout = Duration::from_secs(s.max(1));
            }
            "--allow-version-mismatch" => a.allow_mismatch = true,
            "--dry-store" => a.dry_store = true,
            "-h" | "--help" => {
                println!(
                    "usage: torch_share [--store HOST:PORT] [--gpu N] [--nccl PATH] \
                     [--timeout SECS] [--allow-version-mismatch] [--dry-store]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other:?} (try --help)")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("torch_share: {e}");
            return ExitCode::from(2);
        }
    };
    // Store first: without it the trainer cannot be told anything.
    let store = match handshake::connect(&args.store, args.timeout) {
        Ok(s) => s,
        Err(e) => {
            println!("RESULT torch_share server: FAIL ({e})");
            return ExitCode::from(1);
        }
    };
    let shared = match handshake::read(&store, args.timeout) {
        Ok(s) => s,
        Err(e) => return fail(&store, KEY_SERVER, &e),
    };
    println!(
        "store {}: unique id {} bytes ({}…), world {}, {} steps of {} f32, trainer's torch {} \
         with NCCL {}{}",
        args.store,
        shared.id.as_bytes().len(),
        &handshake::hex(&shared.id.as_bytes()[..8]),
        shared.world,
        shared.steps,
        shared.elems,
        shared.torch_version,
        shared.nccl_version,
        shared
            .nccl_path
            .as_deref()
            .map(|p| format!(" from {p}"))
            .unwrap_or_default()
    );
    if args.dry_store {
        let echo = format!("dry-ok id={}", handshake::hex(shared.id.as_bytes()));
        if let Err(e) = store.set(KEY_SERVER, echo.as_bytes()) {
            println!("RESULT torch_share server: FAIL (setting {KEY_SERVER}: {e})");
            return ExitCode::from(1);
        }
        println!("RESULT torch_share server: dry-store OK (id echoed under {KEY_SERVER})");
        return ExitCode::SUCCESS;
    }
    match serve(&args, &store, &shared) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Failure::BeforeJoin(e)) => fail(&store, KEY_SERVER, &e),
        Err(Failure::AfterJoin(e)) => fail(&store, KEY_ACK, &e),
    }
}

/// Tells the trainer (under `key`) and the person (a RESULT line) why this side gave up.
fn fail(store: &TcpStore, key: &str, why: &str) -> ExitCode {
    let _ = store.set(key, format!("fail: {why}").as_bytes());
    println!("RESULT torch_share server: FAIL ({why})");
    ExitCode::from(1)
}

enum Failure {
    /// Before `joining` was set: the trainer is still waiting on the store and reads why.
    BeforeJoin(String),
    /// After: the trainer is in NCCL; it reads the reason from the ack key (or times out).
    AfterJoin(String),
}

/// Loads NCCL: `--nccl`, else `OXCCL_NCCL_LIBRARY`, else torch's own file, else the search.
fn load_nccl(args: &Args, shared: &Shared) -> Result<(Nccl, &'static str), String> {
    let env = std::env::var_os(oxccl::loader::ENV_LIBRARY).filter(|v| !v.is_empty());
    let (r, how) = if let Some(p) = &args.nccl {
        (Nccl::open(p), "--nccl")
    } else if env.is_some() {
        (Nccl::load(), "OXCCL_NCCL_LIBRARY")
    } else if let Some(p) = &shared.nccl_path {
        (Nccl::open(p), "the trainer's (torch's) library")
    } else {
        (Nccl::load(), "the search")
    };
    r.map(|n| (n, how))
        .map_err(|e| format!("no NCCL ({how}): {e}"))
}

fn serve(args: &Args, store: &TcpStore, shared: &Shared) -> Result<bool, Failure> {
    let before = Failure::BeforeJoin;
    let (nccl, how) = load_nccl(args, shared).map_err(before)?;
    let version = nccl.version().to_string();
    println!(
        "NCCL {version} loaded from {} (chosen by {how})",
        oxccl::escaped_path(nccl.library().path())
    );
    if version != shared.nccl_version {
        let msg =
            format!(
            "NCCL versions differ: this side loaded {version}, torch runs {}; the two sides of \
             one communicator should load the same release (--nccl {} picks torch's)",
            shared.nccl_version,
            shared.nccl_path.as_deref().unwrap_or("<torch's libnccl.so.2>")
        );
        if !args.allow_mismatch {
            return Err(before(msg));
        }
        println!("warning: {msg} (going on: --allow-version-mismatch)");
    }
    // The GPU before telling the trainer to init: a machine without one fails here, cleanly.
    oxccl::nccl::require_driver().map_err(|e| before(e.to_string()))?;
    cudarc::driver::CudaContext::new(args.gpu as usize)
        .map_err(|e| before(format!("GPU {} unusable: {e:?}", args.gpu)))?;

    store
        .set(KEY_SERVER, b"joining")
        .map_err(|e| before(format!("setting {KEY_SERVER}: {e}")))?;
    let after = |e: String| Failure::AfterJoin(e);
    let t0 = Instant::now();
    let raw = nccl
        .clone()
        .with_timeout(args.timeout)
        .init_rank_within(
            &shared.id,
            1,
            shared.world,
            Device(args.gpu),
            &CommConfig::new(),
            args.timeout,
        )
        .map_err(|e| after(format!("init of rank 1: {e}")))?;
    let mut comm = Comm::with_new_stream(raw).map_err(|e| after(e.to_string()))?;
    println!(
        "rank {} of {} on GPU {} joined torch's communicator in {:.0} ms",
        comm.rank(),
        comm.size(),
        args.gpu,
        t0.elapsed().as_secs_f64() * 1e3
    );

    let stream = comm.stream().clone();
    let cuda = |what: &str, e: cudarc::driver::DriverError| after(format!("{what}: {e:?}"));
    let mut weights = stream
        .alloc_zeros::<f32>(shared.elems)
        .map_err(|e| cuda("allocating the weights", e))?;
    let (mut checksum, mut mismatches) = (0f64, 0u64);
    for step in 0..shared.steps {
        let t = Instant::now();
        // Rank 0 (torch) is the root; this side's buffer is overwritten.
        comm.broadcast_in_place(&mut weights, 0)
            .map_err(|e| after(format!("step {step}: broadcast: {e}")))?;
        comm.synchronize_timeout(args.timeout)
            .map_err(|e| after(format!("step {step}: waiting for the broadcast: {e}")))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        // Read back on the communicator's stream: ordered after the broadcast.
        let host = stream
            .clone_dtoh(&weights)
            .map_err(|e| cuda("copying the weights back", e))?;
        let mut bad = 0u64;
        let mut sum = 0f64;
        for (i, &w) in host.iter().enumerate() {
            sum += w as f64;
            if w != handshake::weight(step, i) {
                if bad == 0 {
                    println!(
                        "step {step}: weight {i} is {w}, expected {}",
                        handshake::weight(step, i)
                    );
                }
                bad += 1;
            }
        }
        checksum += sum;
        mismatches += bad;
        println!(
            "step {step}: received {} f32 in {ms:.2} ms, sum {sum}, {bad} mismatched",
            host.len()
        );
    }

    // The matching collective back: the trainer contributes zeros and reads ours.
    let mut back = stream
        .clone_htod(&[checksum, mismatches as f64, shared.steps as f64])
        .map_err(|e| cuda("uploading the checksum", e))?;
    comm.all_reduce_in_place(&mut back, ReduceOp::Sum)
        .map_err(|e| after(format!("all_reduce of the checksum: {e}")))?;
    comm.synchronize_timeout(args.timeout)
        .map_err(|e| after(format!("waiting for the checksum's all_reduce: {e}")))?;
    let ack = format!(
        "ok steps={} checksum={checksum} mismatches={mismatches}",
        shared.steps
    );
    store
        .set(KEY_ACK, ack.as_bytes())
        .map_err(|e| after(format!("setting {KEY_ACK}: {e}")))?;
    comm.destroy()
        .map_err(|e| after(format!("destroying the communicator: {e}")))?;
    let ok = mismatches == 0;
    println!(
        "RESULT torch_share server: {} ({} steps of {} f32 from torch {} over NCCL {version}, \
         checksum {checksum}, {mismatches} mismatched)",
        if ok { "OK" } else { "FAIL" },
        shared.steps,
        shared.elems,
        shared.torch_version
    );
    Ok(ok)
}

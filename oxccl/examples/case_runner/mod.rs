//! What the GPU case runners (`examples/pg_cases.rs`, `examples/pg_capture.rs`) share: the
//! launcher's store, and the loop that runs a suite of `tests/case_kit` cases on this rank
//! with a store prefix per group, a line per case and a count of failures. (The mock suites'
//! runner is `tests/case_kit::run_on`: ranks as threads of one test.)
#![allow(dead_code)]

use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::launch::LaunchInfo;
use oxccl::store::{PrefixStore, Store, TcpStore, TcpStoreOptions};
use oxccl::Result;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A case body as `tests/case_kit` writes it: this rank's default group made with the options
/// it chooses, this rank; `Err` says what went wrong.
pub type Body<B> =
    fn(&dyn Fn(PgOptions) -> Result<ProcessGroup<B>>, u32) -> std::result::Result<(), String>;

/// The launcher's TCP store: the agent's under torchrun, else one rank 0 hosts at
/// MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29500).
pub fn launcher_store(launch: &LaunchInfo) -> Result<Arc<dyn Store>> {
    let host = launch
        .master_addr
        .as_ref()
        .map_or("127.0.0.1".to_string(), |h| h.as_str().to_string());
    let port = launch.master_port.unwrap_or(29500);
    let mut opts = if launch.use_agent_store || launch.rank != 0 {
        TcpStoreOptions::client(&host, port)
    } else {
        TcpStoreOptions::server(&host, port)
    };
    opts.world_size = Some(launch.world_size);
    opts.timeout = Duration::from_secs(60);
    Ok(Arc::new(TcpStore::new(opts)?))
}

/// This process's launch (torchrun's, Slurm's, MPI's variables), `None` when not launched.
pub fn launched() -> Result<Option<LaunchInfo>> {
    let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
    if !vars.contains_key("RANK") || !vars.contains_key("WORLD_SIZE") {
        return Ok(None);
    }
    LaunchInfo::detect(|k| vars.get(k).map(String::as_str)).map(Some)
}

/// Every rank reaches `key` before any goes on (cases start together, so one rank's slow
/// case never eats into the next case's timeouts on another).
fn rendezvous(store: &dyn Store, key: &str, world: u32) -> Result<()> {
    store.add(key, 1)?;
    let began = Instant::now();
    while store.add(key, 0)? < i64::from(world) {
        if began.elapsed() > Duration::from_secs(120) {
            return Err(oxccl::Error::Timeout {
                what: oxccl::core::text!("ranks at {key}"),
                after_ms: 120_000,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Runs `cases` in order on this rank: each starts when every rank reached it, and the k-th
/// group a case makes gets the store prefix `<case>/<k>` on every rank. Prints
/// `rank R NAME: ok (T ms)` or `rank R NAME: FAILED (T ms): why`; returns how many failed.
pub fn run_cases<B: PgBackend>(
    backend: &B,
    store: &Arc<dyn Store>,
    rank: u32,
    world: u32,
    cases: Vec<(&'static str, Body<B>)>,
) -> Result<u32> {
    let mut failed = 0;
    for (name, body) in cases {
        rendezvous(&**store, &format!("{name}/start"), world)?;
        let made = AtomicU32::new(0);
        let mk = |opts: PgOptions| {
            let k = made.fetch_add(1, Ordering::Relaxed);
            let store: Arc<dyn Store> =
                Arc::new(PrefixStore::new(format!("{name}/{k}"), store.clone()));
            ProcessGroup::new(backend.clone(), store, rank, world, opts)
        };
        let t = Instant::now();
        let verdict = body(&mk, rank);
        let ms = t.elapsed().as_millis();
        match verdict {
            Ok(()) => println!("rank {rank} {name}: ok ({ms} ms)"),
            Err(e) => {
                failed += 1;
                println!("rank {rank} {name}: FAILED ({ms} ms): {e}");
            }
        }
    }
    Ok(failed)
}

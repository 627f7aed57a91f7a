//! The seed cases of `tests/pg_cases` on real NCCL, one process per GPU, as torchrun starts
//! them: `torchrun --nproc_per_node 2 --no-python target/release/examples/pg_cases [NAME…]`.
//! Each process joins the launcher's store (rank 0 hosts one when there is no agent store),
//! runs every case (or those whose names contain one of the arguments), prints one line per
//! case, and exits non-zero when any failed. Case 2 (two ranks on one device) runs with
//! `--same-device` and expects NCCL's invalid usage.

#[path = "../tests/pg_cases/mod.rs"]
mod pg_cases;

use oxccl::core::Backend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{PrefixStore, Store, TcpStore, TcpStoreOptions};
use oxccl::{Nccl, Result};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn store_of(launch: &oxccl::core::launch::LaunchInfo) -> Result<Arc<dyn Store>> {
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

/// Every rank reaches `key` before any goes on (cases start together).
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

fn main() -> Result<()> {
    env_logger::init();
    let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
    let launch = oxccl::core::launch::LaunchInfo::detect(|k| vars.get(k).map(String::as_str))?;
    let (rank, world) = (launch.rank, launch.world_size);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nccl = Nccl::load().map_err(|e| {
        oxccl::Error::invalid("OXCCL_NCCL_LIBRARY", format_args!("a loadable NCCL: {e}"))
    })?;
    let store = store_of(&launch)?;
    let mut cases: Vec<pg_cases::Case<Nccl>> = if args.iter().any(|a| a == "--same-device") {
        vec![("case_02_same_device", pg_cases::case_02::<Nccl>)]
    } else {
        pg_cases::portable()
    };
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    if !filters.is_empty() {
        cases.retain(|(name, _)| filters.iter().any(|f| name.contains(f.as_str())));
    }
    println!(
        "rank {rank}/{world}: NCCL {} at {}",
        nccl.version(),
        nccl.library().path().display()
    );
    let mut failed = 0;
    for (name, body) in cases {
        rendezvous(&*store, &format!("{name}/start"), world)?;
        let made = AtomicU32::new(0);
        let mk = |opts: PgOptions| {
            let k = made.fetch_add(1, Ordering::Relaxed);
            let store: Arc<dyn Store> =
                Arc::new(PrefixStore::new(format!("{name}/{k}"), store.clone()));
            ProcessGroup::new(nccl.clone(), store, rank, world, opts)
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
    println!("rank {rank}: {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

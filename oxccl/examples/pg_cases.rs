//! The seed cases of `tests/pg_cases` on real NCCL, one process per GPU, as torchrun starts
//! them: `torchrun --nproc_per_node 2 --no-python target/release/examples/pg_cases [NAME…]`.
//! Each process joins the launcher's store (rank 0 hosts one when there is no agent store),
//! runs every case (or those whose names contain one of the arguments), prints one line per
//! case, and exits non-zero when any failed. Case 2 (two ranks on one device) runs with
//! `--same-device` and expects NCCL's invalid usage; `--list` prints the cases' names.
//! With `OXCCL_BACKEND=mock` the same cases run on the mock spanning the launched processes
//! instead of NCCL (a rehearsal without a GPU: case 2 fails there, the mock has no devices).

#[path = "../tests/pg_cases/mod.rs"]
mod pg_cases;

#[path = "case_runner/mod.rs"]
mod case_runner;

use oxccl::mock::MockBackend;
use oxccl::pg::PgBackend;
use oxccl::prelude::*;
use oxccl::store::Store;
use oxccl::{Nccl, Result};
use std::sync::Arc;

/// The cases the arguments name (every portable one, or case 2 with `--same-device`) on `B`.
fn chosen<B: PgBackend>(args: &[String]) -> Vec<pg_cases::Case<B>> {
    let mut cases: Vec<pg_cases::Case<B>> = if args.iter().any(|a| a == "--same-device") {
        vec![("case_02_same_device", pg_cases::case_02::<B>)]
    } else {
        pg_cases::portable()
    };
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    if !filters.is_empty() {
        cases.retain(|(name, _)| filters.iter().any(|f| name.contains(f.as_str())));
    }
    cases
}

fn main() -> Result<()> {
    env_logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in pg_cases::portable::<Nccl>() {
            println!("{name}");
        }
        return Ok(());
    }
    let Some(launch) = case_runner::launched()? else {
        eprintln!(
            "pg_cases runs under a launcher: torchrun --nproc_per_node N --no-python pg_cases"
        );
        std::process::exit(2);
    };
    let (rank, world) = (launch.rank, launch.world_size);
    let failed = if std::env::var("OXCCL_BACKEND").is_ok_and(|b| b == "mock") {
        let store: Arc<dyn Store> = case_runner::launcher_store(&launch)?;
        println!("rank {rank}/{world}: the mock across processes (OXCCL_BACKEND=mock)");
        let mock = MockBackend::for_processes();
        case_runner::run_cases(&mock, &store, rank, world, chosen::<MockBackend>(&args))?
    } else {
        let nccl = Nccl::load().map_err(|e| {
            oxccl::Error::invalid("OXCCL_NCCL_LIBRARY", format_args!("a loadable NCCL: {e}"))
        })?;
        let store: Arc<dyn Store> = case_runner::launcher_store(&launch)?;
        println!(
            "rank {rank}/{world}: NCCL {} at {}",
            nccl.version(),
            oxccl::escaped_path(nccl.library().path())
        );
        case_runner::run_cases(&nccl, &store, rank, world, chosen::<Nccl>(&args))?
    };
    println!("rank {rank}: {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

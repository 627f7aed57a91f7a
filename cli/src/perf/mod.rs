//! `oxccl perf`: nccl-tests' sweep through oxccl's layers, side by side in one run: `raw`
//! (NCCL's function pointer), `comm` (`Comm::issue`) and `pg` (`ProcessGroup`). Without a GPU
//! or NCCL it runs the `pg` layer on the mock world and says so in its first line.

mod direct;
mod drive;
mod layer;
mod modes;
pub mod nccl;
mod processes;
mod raw_call;
mod report;
mod stop;
mod svg;
mod tune;

pub use drive::{merge, sweep, Plan, Sample};
pub use layer::{Layer, PgLayer};

use crate::exit;
use crate::ops::{self, Coll, Dtype, Redop};
use clap::{Args, ValueEnum};
use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::sync::{Arc, Barrier};

/// Which layers to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayerSel {
    /// NCCL through the loaded function pointer.
    Raw,
    /// `Comm::issue`.
    Comm,
    /// `ProcessGroup` (c10d's API).
    Pg,
    /// The three side by side.
    All,
}

/// Which backend runs the sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendSel {
    /// NCCL when a library and a GPU are found, else the mock world.
    Auto,
    /// NCCL, or exit 3 saying what is missing.
    Nccl,
    /// The mock world on host memory (ranks as threads).
    Mock,
}

/// Options of `oxccl perf` (nccl-tests' flags where they make sense).
#[derive(Args, Clone, Debug)]
#[command(after_help = "Examples:
  oxccl perf                                   all_reduce 8 B..1 MiB (mock: 2 ranks)
  oxccl perf all -b 8 -e 128M -f 2 -g 2 --layer all --svg perf.svg
  oxccl perf all_reduce all_gather -d bfloat16 -c 1 --json > perf.json
  torchrun --nproc-per-node 2 --no-python oxccl perf all_reduce -b 8 -e 1G")]
pub struct PerfArgs {
    /// Collectives to run (`all` for the nine).
    #[arg(value_enum, default_values_t = [Coll::AllReduce])]
    pub colls: Vec<Coll>,
    /// Smallest size (bytes; K, M, G suffixes). Default: 8.
    #[arg(short = 'b', long = "minbytes", value_parser = ops::parse_bytes)]
    pub min_bytes: Option<usize>,
    /// Largest size. Default: 1M on the mock, 128M on NCCL.
    #[arg(short = 'e', long = "maxbytes", value_parser = ops::parse_bytes)]
    pub max_bytes: Option<usize>,
    /// Multiply the size by this each step.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..))]
    pub factor: u64,
    /// Add this many bytes each step instead (overrides -f).
    #[arg(short = 'i', long = "stepbytes", value_parser = ops::parse_bytes)]
    pub incr: Option<usize>,
    /// Timed iterations per size. Default: 20 (5 on the mock).
    #[arg(short = 'n', long = "iters", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub iters: Option<u64>,
    /// Untimed warm-up iterations. Default: 5 (1 on the mock).
    #[arg(short = 'w', long = "warmup_iters", value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub warmup: Option<u64>,
    /// GPUs (ranks) driven by this process, a thread each. Default: every visible GPU (2 on
    /// the mock). Under torchrun, srun or mpirun: 1 per process.
    #[arg(short = 'g', long = "ngpus", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub gpus: Option<u32>,
    /// Element type.
    #[arg(short = 'd', long = "datatype", value_enum, default_value_t = Dtype::Float32)]
    pub dtype: Dtype,
    /// Reduce operator.
    #[arg(short = 'o', long = "op", value_enum, default_value_t = Redop::Sum)]
    pub redop: Redop,
    /// Root rank of rooted collectives.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: u32,
    /// Check results against the host reference once per size and layer (1, as nccl-tests) or
    /// not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Blocking communicators (1) or nonblocking ones (0), for the raw and comm layers.
    #[arg(short = 'z', long = "blocking", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub blocking: u8,
    /// CUDA-graph launches: capture the timed loop into a graph and launch it this many
    /// times (0: no graphs). Every layer on NCCL; the pg layer on the mock world too (its
    /// streams record and replay).
    #[arg(short = 'G', long = "cudagraph", default_value_t = 0)]
    pub graphs: u32,
    /// Buffers: 0 plain, 1 registered (ncclCommRegister), 2 symmetric windows (ncclMemAlloc and
    /// ncclCommWindowRegister, NCCL 2.27+). Raw and comm layers by address; the pg layer on
    /// CommBuf buffers in a group whose tune table says that mode (the mock world too; with
    /// -G, registered before each capture).
    #[arg(short = 'R', long = "registration", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub registration: u8,
    /// Measure every tuned collective at every size in each buffer mode (-R 0, 1, 2, rounds
    /// alternating) and write the fastest mode per collective and size as a tune table
    /// (give it to every rank as OXCCL_TUNE_FILE). A thread per local GPU, a process per GPU
    /// under torchrun, srun or mpirun (rank 0 writes), or the mock world.
    #[arg(long)]
    pub tune: bool,
    /// Time the pg layer under this tune table (a file --tune wrote), on CommBuf buffers: the
    /// check that the table is at least as fast as the best of -R 0, 1, 2.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["registration", "tune"])]
    pub tuned: Option<std::path::PathBuf>,
    /// Where --tune writes its table (default: oxccl.tune).
    #[arg(long, value_name = "FILE", requires = "tune")]
    pub out: Option<std::path::PathBuf>,
    /// --tune: rounds each size's iterations are split into, the modes alternating in each.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Layers to time side by side.
    #[arg(long, value_enum, default_value_t = LayerSel::All)]
    pub layer: LayerSel,
    /// Backend.
    #[arg(long, value_enum, default_value_t = BackendSel::Auto)]
    pub backend: BackendSel,
    /// NCCL library to load (instead of the search).
    #[arg(long, value_name = "PATH")]
    pub library: Option<std::path::PathBuf>,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file (the table still goes to stdout).
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<std::path::PathBuf>,
    /// Write busbw and latency against size as an SVG chart.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,
    /// Test hook: every check sees one wrong element (the exit code must be 1).
    #[arg(long, hide = true)]
    pub inject_error: bool,
}

/// What one run produced: where it ran, and the merged samples (on the rank that reports).
pub struct Outcome {
    /// The first line: backend, ranks, and why this backend.
    pub head: Value,
    /// The merged samples, `None` on ranks other than 0 of a multi-process job.
    pub merged: Option<Vec<Sample>>,
    /// Ranks.
    pub n: u32,
}

/// Runs `oxccl perf`.
pub fn run(a: &PerfArgs) -> ExitCode {
    let (use_nccl, why) = match choose(a.backend, a.library.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("oxccl perf: {e}");
            return ExitCode::from(exit::ENV);
        }
    };
    if a.tune {
        return tune::main(a, use_nccl, &why);
    }
    match modes::pg_table(a.registration, a.tuned.as_deref()) {
        Ok(Some(t)) => modes::set_pg_table(t),
        Ok(None) => {}
        Err(e) => {
            eprintln!("oxccl perf: {e}");
            return ExitCode::from(exit::USAGE);
        }
    }
    let mock = !use_nccl;
    let layers: Vec<&'static str> = match (a.layer, mock) {
        (LayerSel::Pg | LayerSel::All, _) if mock => vec!["pg"],
        (_, true) => {
            eprintln!("oxccl perf: --layer {} needs NCCL and a GPU ({why}); use --layer pg on the mock world", a.layer.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default());
            return ExitCode::from(exit::ENV);
        }
        // -R on the process group runs CommBuf buffers in a group of that mode (with -G, in
        // graphs of that group).
        (LayerSel::All, false) => vec!["raw", "comm", "pg"],
        (LayerSel::Raw, false) => vec!["raw"],
        (LayerSel::Comm, false) => vec!["comm"],
        (LayerSel::Pg, false) => vec!["pg"],
    };
    let min = a.min_bytes.unwrap_or(8);
    let max = a
        .max_bytes
        .unwrap_or(if mock { 1 << 20 } else { 128 << 20 });
    // The mock keeps every rank's buffers in this process's memory: bounded so that a large
    // -e is an error, not an allocation failure.
    const MOCK_MAX: usize = 256 << 20;
    if mock && max > MOCK_MAX {
        eprintln!("oxccl perf: -e {max} on the mock world, which holds every rank's buffers in host memory: give -e 256M or less there");
        return ExitCode::from(exit::USAGE);
    }
    let sizes = ops::sweep(min, max, a.factor as usize, a.incr.unwrap_or(0));
    if sizes.is_empty() {
        eprintln!(
            "oxccl perf: -b {min} is above -e {max}: give a smallest size at most the largest"
        );
        return ExitCode::from(exit::USAGE);
    }
    let plan = Plan {
        colls: ops::expand(&a.colls),
        sizes,
        dtype: a.dtype,
        redop: a.redop,
        root: a.root,
        iters: a.iters.unwrap_or(if mock { 5 } else { 20 }) as usize,
        warmup: a.warmup.unwrap_or(if mock { 1 } else { 5 }) as usize,
        check: a.check == 1,
        layers,
    };
    let outcome = if mock {
        run_mock(a, &plan, &why)
    } else {
        nccl::run(a, &plan)
    };
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("oxccl perf: {e}");
            return ExitCode::from(exit::ENV);
        }
    };
    let Some(merged) = outcome.merged else {
        return ExitCode::SUCCESS;
    };
    let rows = report::rows(&plan, &merged, outcome.n);
    if a.json {
        let v = report::to_json(&plan, &rows, outcome.head.clone());
        println!("{}", crate::shown::json(&v));
    } else {
        println!("# {}", crate::info::str_of(&outcome.head["first_line"]));
        print!("{}", report::table(&plan, &rows));
    }
    if let Some(path) = &a.json_out {
        let v = report::to_json(&plan, &rows, outcome.head.clone());
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&v).unwrap_or_default()) {
            eprintln!(
                "oxccl perf: cannot write --json-out {}: {e}",
                oxccl::escaped_path(path)
            );
            return ExitCode::from(exit::ENV);
        }
    }
    if let Some(path) = &a.svg {
        let title = format!(
            "oxccl perf on {} ({} ranks, {})",
            outcome.head["backend"].as_str().unwrap_or("?"),
            outcome.n,
            plan.dtype.name()
        );
        if let Err(e) = std::fs::write(path, svg::chart(&rows, &title)) {
            eprintln!(
                "oxccl perf: cannot write --svg {}: {e}",
                oxccl::escaped_path(path)
            );
            return ExitCode::from(exit::ENV);
        }
    }
    if report::wrong_total(&rows) > 0 {
        eprintln!(
            "oxccl perf: {} wrong elements: the results do not match the host reference",
            report::wrong_total(&rows)
        );
        return ExitCode::from(exit::FAILED);
    }
    ExitCode::SUCCESS
}

/// NCCL or the mock, and why (for the first line).
pub fn choose(
    backend: BackendSel,
    library: Option<&std::path::Path>,
) -> Result<(bool, String), String> {
    // (why not, what to do about it) when NCCL cannot run here.
    let probe = || -> Result<(), (String, String)> {
        oxccl::loader::Library::load_from(library).map_err(|e| {
            let why = match e {
                // The list of places tried is long: `oxccl info` prints it.
                oxccl::loader::LoadError::NothingFound { .. } => {
                    "no NCCL library found (`oxccl info` lists the places tried)".to_owned()
                }
                e => format!("no NCCL library: {e}"),
            };
            (why, crate::info::GET_ONE.to_owned())
        })?;
        oxccl::nccl::require_driver().map_err(|_| {
            (
                "no GPU: the CUDA driver is not installed".to_owned(),
                "run on a machine with NVIDIA GPUs, or --backend mock".to_owned(),
            )
        })
    };
    match (backend, probe()) {
        (BackendSel::Mock, _) => Ok((false, "--backend mock".to_owned())),
        (_, Ok(())) => Ok((true, String::new())),
        (BackendSel::Nccl, Err((why, todo))) => Err(format!("{why}; {todo}")),
        (BackendSel::Auto, Err((why, _))) => Ok((false, why)),
    }
}

/// The `pg` layer of one mock rank: `CommBuf` buffers in a group under the tune table of -R
/// or --tuned, else plain buffers; rank 0's results corrupted with --inject-error.
fn mock_layers(
    a: &PerfArgs,
    plan: &Plan,
    pg: &ProcessGroup<MockBackend>,
    rank: u32,
) -> Vec<Box<dyn Layer>> {
    let corrupt = a.inject_error && rank == 0;
    vec![if modes::pg_tuned() {
        modes::pg_layer(pg, plan.dtype, corrupt, a.graphs)
    } else {
        crate::with_dtype!(plan.dtype, T => Box::new(PgLayer::<MockBackend, T>::new(pg.clone()).corrupting(corrupt).graphs(a.graphs)))
    }]
}

/// The `pg` layer on the mock world: `n` ranks as threads over one `MockBackend`, or, under
/// torchrun, srun or mpirun, a rank per launched process (see `processes`).
pub fn run_mock(a: &PerfArgs, plan: &Plan, why: &str) -> Result<Outcome, String> {
    if processes::launched() {
        return processes::run_mock(a, plan, why);
    }
    let n = a.gpus.unwrap_or(2);
    if plan.root >= n {
        return Err(format!(
            "-r {} is not a rank of {n}: give a root below -g",
            plan.root
        ));
    }
    let per_rank = mock_world(n, |pg, rank| {
        let mut layers = mock_layers(a, plan, pg, rank);
        let barrier_pg = pg.clone();
        let sync = move || barrier_pg.barrier()?.wait();
        sweep(plan, &mut layers, n, rank, &sync, rank == 0)
    })?;
    let first = format!("mock world (no NCCL run: {why}): {n} ranks as threads, pg layer only, host memory: times measure oxccl's host path, not a network");
    Ok(Outcome {
        head: json!({"backend": "mock", "reason": why, "ranks": n, "first_line": first}),
        merged: Some(merge(&per_rank)),
        n,
    })
}

/// Runs `body` on `n` mock ranks, a thread and a process group each; the ranks' results.
pub fn mock_world<R: Send>(
    n: u32,
    body: impl Fn(&ProcessGroup<MockBackend>, u32) -> oxccl::Result<R> + Sync,
) -> Result<Vec<R>, String> {
    mock_world_of(MockBackend::new(), n, body)
}

/// [`mock_world`] over `backend` (a mock of another NCCL release, say).
pub fn mock_world_of<R: Send>(
    backend: MockBackend,
    n: u32,
    body: impl Fn(&ProcessGroup<MockBackend>, u32) -> oxccl::Result<R> + Sync,
) -> Result<Vec<R>, String> {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let start = Arc::new(Barrier::new(n as usize));
    let stopper = stop::Stopper::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (backend, store, body, start, stopper) = (
                    backend.clone(),
                    store.clone(),
                    &body,
                    start.clone(),
                    &stopper,
                );
                s.spawn(move || {
                    let opts = PgOptions {
                        bound_device: Some(oxccl::Device(r)),
                        ..PgOptions::default()
                    };
                    start.wait();
                    let pg = ProcessGroup::new(backend, store, r, n, opts)?;
                    let aborts = pg.clone();
                    stopper.on_stop(Box::new(move |why| aborts.abort(why)));
                    let out = body(&pg, r);
                    if let Err(e) = &out {
                        stopper.stop(&format!("rank {r} failed: {e}"));
                    }
                    pg.destroy();
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(r, h)| match h.join() {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(format!("rank {r}: {e}")),
                Err(_) => Err(format!("rank {r}: its thread panicked")),
            })
            .collect()
    })
}

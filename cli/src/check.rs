//! `oxccl check`: every collective × data type × reduce operator × placement on the chosen
//! backend, each rank's output against the host reference; a table, and exit 1 on any
//! mismatch. Cases the loaded library cannot run (fp8 reductions before NCCL 2.24.3) are
//! listed as skipped, with the reason, instead of failing the run.

use crate::elem::with_dtype;
use crate::exit;
use crate::expect::Case;
use crate::ops::{self, Coll, Dtype, Redop};
use crate::perf::backend::{choose, BackendSel};
use crate::perf::layer::{Layer, LayerKind, PgLayer};
use crate::perf::mock_world::mock_world_of;
use clap::Args;
use oxccl::core::Backend;
use oxccl::mock::MockBackend;
use oxccl::{FeatureSet, Version};
use serde_json::json;
use std::process::ExitCode;

/// Options of `oxccl check`.
#[derive(Args)]
#[command(after_help = "Examples:
  oxccl check                         everything, 2 ranks (mock world without a GPU)
  oxccl check all_reduce -d float16 -g 4 --json")]
pub struct CheckArgs {
    /// Collectives (default: all).
    #[arg(value_enum, default_values_t = [Coll::All])]
    colls: Vec<Coll>,
    /// Data types (default: every one).
    #[arg(short = 'd', long = "datatype", value_enum)]
    dtypes: Vec<Dtype>,
    /// Reduce operators (default: every one).
    #[arg(short = 'o', long = "op", value_enum)]
    redops: Vec<Redop>,
    /// Ranks (threads).
    #[arg(short = 'g', long = "ngpus", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    gpus: u32,
    /// Elements per operation (the whole array; a multiple of the ranks is used).
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Root of rooted collectives.
    #[arg(short = 'r', long, default_value_t = 0)]
    root: u32,
    /// One JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Backend: NCCL checks the process group and the `Comm` path (both placements) on a
    /// thread per GPU.
    #[arg(long, value_enum, default_value_t = BackendSel::Auto)]
    backend: BackendSel,
    /// NCCL library to load (instead of the search).
    #[arg(long, value_name = "PATH")]
    library: Option<std::path::PathBuf>,
    /// Test hook: corrupt one element of rank 0's output in every case.
    #[arg(long, hide = true)]
    inject_error: bool,
    /// Test hook: the mock world imitates this NCCL release (its features), e.g. 2.23.4.
    #[arg(long, hide = true, value_parser = parse_version)]
    mock_version: Option<Version>,
}

fn parse_version(s: &str) -> Result<Version, String> {
    let parts: Vec<u32> = s
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("a version as MAJOR.MINOR.PATCH, got {s:?}"))?;
    match parts[..] {
        [a, b, c] => Ok(Version::new(a, b, c)),
        _ => Err(format!("a version as MAJOR.MINOR.PATCH, got {s:?}")),
    }
}

/// Why the library with `features` cannot run a case on `ranks` ranks, if it cannot: the
/// core's own checks of the element type and the operator (the ones every operation passes
/// before the library is called), so what is skipped here is exactly what would be refused.
fn lacking(
    features: &FeatureSet,
    ranks: u32,
    coll: Coll,
    dtype: Dtype,
    redop: Redop,
) -> Option<String> {
    use oxccl::core::check;
    let ctx = oxccl::core::CheckCtx {
        rank: 0,
        size: ranks,
        features,
    };
    let dt = dtype.data_type();
    check::dtype(&ctx, dt, coll.reduces())
        .and_then(|()| {
            if coll.reduces() {
                check::reduce_op(&ctx, dt, &redop.reduce_op())
            } else {
                Ok(())
            }
        })
        .err()
        .map(|e| e.to_string())
}

/// One case's verdict.
struct Verdict {
    layer: LayerKind,
    coll: Coll,
    dtype: Dtype,
    redop: Option<Redop>,
    placement: &'static str,
    wrong: u64,
}

/// Runs `oxccl check` on the mock world (the process group's path, every placement it has).
pub fn run(a: &CheckArgs) -> ExitCode {
    if a.root >= a.gpus {
        eprintln!(
            "oxccl check: -r {} is not a rank of {}: give a root below -g",
            a.root, a.gpus
        );
        return ExitCode::from(exit::USAGE);
    }
    let (nccl, why) = match choose(a.backend, a.library.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("oxccl check: {e}");
            return ExitCode::from(exit::ENV);
        }
    };
    let layers: Vec<LayerKind> = if nccl {
        vec![LayerKind::Pg, LayerKind::Comm]
    } else {
        vec![LayerKind::Pg]
    };
    let colls = ops::expand(&a.colls);
    let dtypes = if a.dtypes.is_empty() {
        Dtype::ALL.to_vec()
    } else {
        a.dtypes.clone()
    };
    let redops = if a.redops.is_empty() {
        Redop::ALL.to_vec()
    } else {
        a.redops.clone()
    };
    let lib = if nccl {
        if let Err(e) = crate::perf::nccl::local_gpus(Some(a.gpus)) {
            eprintln!("oxccl check: {e}");
            return ExitCode::from(exit::ENV);
        }
        match crate::perf::nccl::load(a.library.as_deref()) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("oxccl check: {e}");
                return ExitCode::from(exit::ENV);
            }
        }
    } else {
        None
    };
    let mock = match a.mock_version {
        Some(v) => MockBackend::with_options(
            FeatureSet::for_version(v),
            oxccl::mock::FaultPlan::new(),
            1,
            std::time::Duration::from_secs(60),
        ),
        None => MockBackend::new(),
    };
    let features = match &lib {
        Some(l) => *l.features(),
        None => *mock.features(),
    };
    let mut cases = Vec::new();
    let mut skipped: Vec<(Coll, Dtype, Option<Redop>, String)> = Vec::new();
    for c in &colls {
        for d in &dtypes {
            for r in if c.reduces() {
                redops.clone()
            } else {
                vec![Redop::Sum]
            } {
                // One rank has no fp8 avg (NCCL's rule; the core check refuses it).
                let fp8 = matches!(d, Dtype::F8e4m3 | Dtype::F8e5m2);
                if a.gpus == 1 && fp8 && r == Redop::Avg {
                    continue;
                }
                if let Some(why) = lacking(&features, a.gpus, *c, *d, r) {
                    skipped.push((*c, *d, c.reduces().then_some(r), why));
                    continue;
                }
                for p in [false, true] {
                    for l in &layers {
                        if supported(*l, *c, p) {
                            cases.push((*l, *c, *d, r, p));
                        }
                    }
                }
            }
        }
    }
    let n = a.gpus;
    let run_cases =
        |mk: &dyn Fn(LayerKind, Dtype) -> Box<dyn Layer>, rank: u32| -> oxccl::Result<Vec<u64>> {
            let mut out = Vec::new();
            for (layer, coll, dtype, redop, p) in &cases {
                let count = coll.count_for(a.count * dtype.size(), dtype.size(), n);
                let case = Case {
                    coll: *coll,
                    count,
                    dtype: *dtype,
                    redop: *redop,
                    root: a.root,
                    n,
                    rank,
                };
                let mut l = mk(*layer, *dtype);
                l.setup(&case, *p)?;
                out.push(l.check()?);
                l.teardown()?;
            }
            Ok(out)
        };
    let corrupt = a.inject_error;
    let (res, first) = if let Some(lib) = &lib {
        let body = |pg: &oxccl::pg::ProcessGroup<oxccl::Nccl>,
                    comm: &std::rc::Rc<std::cell::RefCell<oxccl::Comm>>,
                    rank: u32| {
            let mk = |layer: LayerKind, d: Dtype| {
                crate::perf::nccl::nccl_layer(
                    layer,
                    d,
                    lib,
                    pg,
                    comm,
                    &crate::perf::nccl::LayerOpts {
                        corrupt: corrupt && rank == 0,
                        ..Default::default()
                    },
                )
            };
            run_cases(&mk, rank)
        };
        let first = format!("NCCL {}: {n} GPUs, a thread each, the process group and Comm paths, {} cases against the host reference", lib.version(), cases.len());
        let setup = oxccl::peer_policy_from_env().map(|kernels| crate::perf::nccl::RankSetup {
            blocking: true,
            kernels,
        });
        let world = setup
            .map_err(|e| e.to_string())
            .and_then(|s| crate::perf::nccl::thread_world(lib, n, s, &body));
        (world, first)
    } else {
        let res = mock_world_of(mock.clone(), n, |pg, rank| {
            let mk = |_: LayerKind, d: Dtype| -> Box<dyn Layer> {
                with_dtype!(d, T => Box::new(PgLayer::<MockBackend, T>::new(pg.clone()).corrupting(corrupt && rank == 0)))
            };
            run_cases(&mk, rank)
        });
        let first = format!("mock world ({why}): {n} ranks as threads, the process group over host memory, {} cases against the host reference", cases.len());
        let first = match a.mock_version {
            Some(v) => format!("{first}; imitating NCCL {v}"),
            None => first,
        };
        (res, first)
    };
    let per_rank = match res {
        Ok(r) => r,
        Err(e) => {
            eprintln!("oxccl check: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let verdicts: Vec<Verdict> = cases
        .iter()
        .enumerate()
        .map(|(i, (layer, coll, dtype, redop, p))| Verdict {
            layer: *layer,
            coll: *coll,
            dtype: *dtype,
            redop: coll.reduces().then_some(*redop),
            placement: if *p { "in-place" } else { "out-of-place" },
            wrong: per_rank.iter().map(|r| r[i]).sum(),
        })
        .collect();
    let failed = verdicts.iter().filter(|v| v.wrong > 0).count();
    if a.json {
        let v = json!({
            "backend": if nccl { "nccl" } else { "mock" }, "ranks": n, "first_line": first, "cases": verdicts.len(), "failed": failed,
            "results": verdicts.iter().map(|v| json!({
                "layer": v.layer.name(), "collective": v.coll.name(), "type": v.dtype.name(), "redop": v.redop.map(Redop::name),
                "placement": v.placement, "wrong": v.wrong, "ok": v.wrong == 0,
            })).collect::<Vec<_>>(),
            "skipped": skipped.iter().map(|(c, d, r, why)| json!({
                "collective": c.name(), "type": d.name(), "redop": r.map(Redop::name), "why": why,
            })).collect::<Vec<_>>(),
        });
        println!("{}", crate::shown::json(&v));
    } else {
        println!("# {first}");
        println!(
            "# {:>5} {:<14} {:>8} {:>6} {:>13} {:>8}  result",
            "layer", "collective", "type", "redop", "placement", "#wrong"
        );
        for v in &verdicts {
            println!(
                "  {:>5} {:<14} {:>8} {:>6} {:>13} {:>8}  {}",
                v.layer.name(),
                v.coll.name(),
                v.dtype.name(),
                v.redop.map_or("none", Redop::name),
                v.placement,
                v.wrong,
                if v.wrong == 0 { "ok" } else { "WRONG" }
            );
        }
        for (c, d, r, why) in &skipped {
            println!(
                "  {:>5} {:<14} {:>8} {:>6} {:>13} {:>8}  skipped: {why}",
                "-",
                c.name(),
                d.name(),
                r.map_or("none", Redop::name),
                "-",
                "-"
            );
        }
        println!("# {} of {} cases wrong", failed, verdicts.len());
        if !skipped.is_empty() {
            println!(
                "# {} cases skipped: the library cannot run them (see above)",
                skipped.len()
            );
        }
    }
    if failed > 0 {
        eprintln!("oxccl check: {failed} cases gave wrong results (see the table)");
        return ExitCode::from(exit::FAILED);
    }
    ExitCode::SUCCESS
}

/// Whether `layer` has `coll` in this placement: the process group's one placement per
/// collective; the `Comm` path out of place always, in place where NCCL defines it.
fn supported(layer: LayerKind, coll: Coll, in_place: bool) -> bool {
    match layer {
        LayerKind::Pg => PgLayer::<MockBackend, f32>::supports(coll, in_place),
        _ => {
            !in_place
                || matches!(
                    coll,
                    Coll::AllReduce
                        | Coll::Broadcast
                        | Coll::Reduce
                        | Coll::AllGather
                        | Coll::ReduceScatter
                )
        }
    }
}

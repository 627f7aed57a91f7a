//! `oxccl tune`: measures every tuned collective at every size of the sweep in each buffer
//! mode (plain, registered, symmetric window), through the process group itself, and writes
//! the tune table the process group reads (`OXCCL_TUNE_FILE`): per collective and size the
//! fastest mode, the slowest rank's median deciding.
//!
//! All-reduce also times oxccl's kernels (`kernels`): the table then gets a `kernels`
//! line for the group size, and the base group runs NCCL alone so the modes time NCCL.
//!
//! Small-message times swing by tens of percent from one loop to the next, so the modes are
//! measured round by round, alternating (R0 R1 R2, then R1 R2 R0, …), each round a share of
//! `-n`, and the median of the rounds is kept: drift hits every mode alike.

mod args;
mod kernels;

use crate::elem::with_dtype;
use crate::expect::Case;
use crate::ops::{self, Coll};
use crate::perf::backend::Ground;
use crate::perf::layer::Layer;
use crate::perf::modes::{self, ModeLayer};
use crate::perf::plan::{Failure, Sweep};
use crate::perf::rank::Rank;
use crate::perf::world::World;
pub use args::TuneArgs;

use oxccl::core::peer_kernels::PeerPolicy;
use oxccl::core::Backend as _;
use oxccl::pg::{PgBackend, ProcessGroup, RegMode, TuneTable};
use oxccl::rules::tune::build::{self, Measured};
use oxccl::{Feature, Result};
use std::process::ExitCode;

/// Medians of one rank: `[collective][size][variant]` seconds per operation (variants: the
/// three modes, then the kernels), NaN where the variant did not run (not in the library,
/// wrong results, a size too small to split, no kernels, not the kernel's collective).
pub type Medians = Vec<f64>;

/// Variants per point: the three buffer modes and the kernels.
const VARIANTS: usize = kernels::FIRST + kernels::COUNT;

/// The index of (collective c, size s, variant v).
fn at(plan: &Sweep, c: usize, s: usize, v: usize) -> usize {
    (c * plan.sizes.len() + s) * VARIANTS + v
}

/// The modes the library has: plain always, registered from 2.19, windows from 2.27.
pub fn modes_of(features: &oxccl::FeatureSet) -> Result<Vec<RegMode>> {
    features.require(Feature::MemAlloc)?;
    let mut m = vec![RegMode::Plain];
    if features.has(Feature::BufferRegistration) {
        m.push(RegMode::Registered);
    }
    if features.has(Feature::WindowRegistration) {
        m.push(RegMode::Window);
    }
    Ok(m)
}

/// Runs the measurement on this rank; every rank calls it with the same plan.
fn measure_rank<B: PgBackend>(
    plan: &Sweep,
    pg: &ProcessGroup<B>,
    rank: u32,
    n: u32,
    rounds: usize,
) -> Result<Medians>
where
    oxccl::buffer::StreamOf<B>: oxccl::core::Capture,
{
    let modes = modes_of(pg.backend().features())?;
    let mut layers: Vec<(usize, Box<dyn Layer>)> = Vec::new();
    for m in &modes {
        let l: Box<dyn Layer> =
            with_dtype!(plan.dtype, T => Box::new(ModeLayer::<B, T>::new(pg.clone(), *m)));
        layers.push((usize::from(m.level()), l));
    }
    layers.extend(kernels::layers(pg, plan.dtype, &plan.colls));
    let sync = || pg.barrier()?.wait();
    let rounds = rounds.max(1);
    let per = (plan.iters / rounds).max(1);
    let mut out = vec![f64::NAN; plan.colls.len() * plan.sizes.len() * VARIANTS];
    for (c, coll) in plan.colls.iter().enumerate() {
        let in_place = ModeLayer::<B, f32>::supports(*coll, true);
        for (s, bytes) in plan.sizes.iter().enumerate() {
            let case = Case {
                coll: *coll,
                count: coll.count_for(*bytes, plan.dtype.size(), n),
                dtype: plan.dtype,
                redop: plan.redop,
                root: plan.root,
                n,
                rank,
            };
            let mut active = Vec::new();
            for (i, (v, l)) in layers.iter_mut().enumerate() {
                if !kernels::runs(*v, *coll) {
                    continue;
                }
                if l.setup(&case, in_place)? {
                    l.arm(plan.warmup)?;
                    l.run(plan.warmup)?;
                    // A kernel's group that could not set them up runs NCCL: not measured.
                    // (Every rank decides alike: the set-up is collective.)
                    if *v >= kernels::FIRST && l.peer_kernels().is_none() {
                        l.teardown()?;
                        continue;
                    }
                    active.push(i);
                }
            }
            let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); layers.len()];
            for round in 0..rounds {
                for k in 0..active.len() {
                    let i = active[(k + round) % active.len()];
                    let l = &mut layers[i].1;
                    l.arm(per)?;
                    sync()?;
                    let t = std::time::Instant::now();
                    let ops = l.run(per)?;
                    times[i].push(t.elapsed().as_secs_f64() / ops.max(1) as f64);
                }
            }
            for &i in &active {
                let (m, l) = &mut layers[i];
                let wrong = if plan.check { l.check()? } else { 0 };
                l.teardown()?;
                // A mode with wrong results is never chosen.
                out[at(plan, c, s, *m)] = if wrong == 0 {
                    median(&mut times[i])
                } else {
                    log::warn!(
                        "{} at {} B in variant {m}: {wrong} wrong elements",
                        coll.name(),
                        bytes
                    );
                    f64::NAN
                };
            }
        }
    }
    Ok(out)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One measured point: the sweep's size and what was measured there.
#[derive(Debug, Clone)]
pub struct Point {
    /// The collective.
    pub coll: Coll,
    /// The sweep's size (nccl-tests' column).
    pub size: usize,
    /// Each mode's and kernel's time, and the op's bytes as the process group looks them up.
    pub m: Measured,
    /// The fastest mode (ties go to the simpler one).
    pub best: RegMode,
}

/// The points of the merged medians (sizes no mode ran are left out).
pub fn points(plan: &Sweep, merged: &Medians, n: u32) -> Vec<Point> {
    let mut out = Vec::new();
    for (c, coll) in plan.colls.iter().enumerate() {
        let Some(kind) = modes::kind_of(*coll) else {
            continue;
        };
        for (s, size) in plan.sizes.iter().enumerate() {
            let get = |v| merged.get(at(plan, c, s, v)).copied().unwrap_or(f64::NAN);
            let count = coll.count_for(*size, plan.dtype.size(), n);
            let (sn, rn) = coll.shape(count, n, 0, plan.root);
            let m = Measured {
                coll: kind,
                op_bytes: (sn.max(rn) * plan.dtype.size()) as u64,
                modes: [0, 1, 2].map(get),
                kernels: std::array::from_fn(|k| get(kernels::FIRST + k)),
            };
            let Some(best) = m.best() else { continue };
            out.push(Point {
                coll: *coll,
                size: *size,
                m,
                best,
            });
        }
    }
    out
}

/// The table of the points on `n ranks` ([`build::table_of`]).
pub fn table(points: &[Point], n: u32) -> Result<TuneTable> {
    let measured: Vec<Measured> = points.iter().map(|p| p.m).collect();
    build::table_of(&measured, n)
}

/// The report on stdout and the file's comment lines: every point with each mode's time.
pub fn report(points: &[Point]) -> String {
    let us = |t: f64| {
        if t.is_finite() {
            format!("{:>10.2}", t * 1e6)
        } else {
            format!("{:>10}", "N/A")
        }
    };
    let kernels = points
        .iter()
        .any(|p| p.m.kernels.iter().any(|t| t.is_finite()));
    let mut s = String::from("# collective          size   plain(us)  regist(us)  window(us)");
    if kernels {
        s.push_str("  1shot(us)  2shot(us) gather(us)");
    }
    s.push_str("  best\n");
    for p in points {
        s.push_str(&format!(
            "# {:<14} {:>10} {} {} {}",
            p.coll.name(),
            ops::human(p.size),
            us(p.m.modes[0]),
            us(p.m.modes[1]),
            us(p.m.modes[2]),
        ));
        if kernels {
            s.push_str(&format!(
                " {} {} {}",
                us(p.m.kernels[0]),
                us(p.m.kernels[1]),
                us(gather_kernel(p))
            ));
        }
        s.push_str(&format!("  {}\n", p.best.name()));
    }
    s
}

/// The time of the all-gather or reduce-scatter kernel at `p` (NaN on other collectives).
fn gather_kernel(p: &Point) -> f64 {
    use oxccl::core::peer_kernels::KernelAlgo;
    match p.coll {
        Coll::AllGather => p.m.kernels[KernelAlgo::AllGather.index()],
        Coll::ReduceScatter => p.m.kernels[KernelAlgo::ReduceScatter.index()],
        _ => f64::NAN,
    }
}

/// The file `oxccl tune` writes: a header saying how it was measured, the report, the table.
pub fn file_text(head: &str, points: &[Point], t: &TuneTable) -> String {
    format!("# {head}\n{}{t}", report(points))
}

/// The tuned collectives among `colls`; refused when there is none.
pub fn tuned_colls(colls: &[Coll]) -> std::result::Result<Vec<Coll>, Failure> {
    let c: Vec<Coll> = colls
        .iter()
        .copied()
        .filter(|c| modes::TUNED.contains(c))
        .collect();
    if c.is_empty() {
        return Err(Failure::usage("none of the collectives given is tuned by the process group (all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall)"));
    }
    Ok(c)
}

/// Runs `oxccl tune`.
pub fn run(a: &TuneArgs) -> ExitCode {
    measure(a).unwrap_or_else(|f| f.exit("tune"))
}

/// The measurement on its world, decided and written by rank 0.
fn measure(a: &TuneArgs) -> std::result::Result<ExitCode, Failure> {
    crate::output::check("--out", &a.out).map_err(Failure::usage)?;
    let ground = Ground::of(a.world.backend, a.world.library.as_deref()).map_err(Failure::env)?;
    let mut plan = Sweep::of(&a.case, &a.sweep, ground.is_mock())?;
    plan.colls = tuned_colls(&plan.colls)?;
    let rounds = (a.rounds as usize).clamp(1, plan.iters.max(1));
    // The modes time NCCL; the kernels are timed through groups that force them.
    let world = World::of(
        &ground,
        a.world.gpus,
        a.blocking == 1,
        Some(PeerPolicy::Nccl),
    )
    .map_err(Failure::env)?;
    world.has_root(plan.root).map_err(Failure::env)?;
    let n = world.ranks();
    let merged = world
        .run(|rank, r| {
            let medians = match rank {
                Rank::Mock(pg) => measure_rank(&plan, pg, r, n, rounds)?,
                Rank::Nccl(pg, ..) => measure_rank(&plan, pg, r, n, rounds)?,
            };
            merge(rank, &medians)
        })
        .map_err(Failure::env)?;
    let Some(merged) = merged else {
        return Ok(ExitCode::SUCCESS);
    };
    let on = match (&ground, world.launcher()) {
        (Ground::Mock(why), None) => format!("mock world ({why}): {n} ranks as threads, host memory: a table for tests, not for a machine"),
        (Ground::Mock(why), Some(l)) => format!("mock world ({why}): {n} ranks, a process per rank ({l:?}), host memory: a table for tests, not for a machine"),
        (Ground::Nccl(lib), None) => format!(
            "NCCL {} at {}: {n} GPUs, a thread per GPU",
            lib.version(),
            oxccl::escaped_path(lib.library().path())
        ),
        (Ground::Nccl(lib), Some(_)) => format!(
            "NCCL {} at {}: {n} ranks, a process per GPU",
            lib.version(),
            oxccl::escaped_path(lib.library().path())
        ),
    };
    write(a, &plan, &merged, n, &on, rounds)
}

/// Every rank's medians merged through the world: the slowest rank's, NaN where any rank has
/// none. Every rank calls it.
fn merge(rank: &Rank<'_>, m: &Medians) -> Result<Medians> {
    // NaN travels as +inf, which the max keeps.
    let enc: Vec<f64> = m
        .iter()
        .map(|v| if v.is_nan() { f64::INFINITY } else { *v })
        .collect();
    let got = rank.all_reduce(&enc, oxccl::ReduceOp::Max)?;
    Ok(got
        .into_iter()
        .map(|v| if v.is_finite() { v } else { f64::NAN })
        .collect())
}

/// Decides, writes the table to `--out` and prints it.
fn write(
    a: &TuneArgs,
    plan: &Sweep,
    merged: &Medians,
    n: u32,
    head: &str,
    rounds: usize,
) -> std::result::Result<ExitCode, Failure> {
    let pts = points(plan, merged, n);
    let t = table(&pts, n).map_err(|e| Failure::env(e.to_string()))?;
    let head = format!(
        "oxccl tune on {head}; {} {}, {} iterations in {rounds} alternating rounds, medians, slowest rank",
        plan.dtype.name(),
        plan.redop.name(),
        plan.iters
    );
    let text = file_text(&head, &pts, &t);
    let out = &a.out;
    crate::output::write("--out", out, text.as_bytes()).map_err(Failure::env)?;
    if a.json {
        let v = json_of(&head, &pts, &t, out);
        println!("{}", crate::shown::json(&v));
        return Ok(ExitCode::SUCCESS);
    }
    print!("{text}");
    println!(
        "# written to {} (give it to every rank: OXCCL_TUNE_FILE={})",
        oxccl::escaped_path(out),
        oxccl::escaped_path(out)
    );
    Ok(ExitCode::SUCCESS)
}

/// `oxccl tune --json`: what the file says, as one object: the measurement, every point with its
/// modes' times (µs, null where not measured) and choice, the table's rows, the file written.
pub fn json_of(
    head: &str,
    points: &[Point],
    t: &TuneTable,
    out: &std::path::Path,
) -> serde_json::Value {
    use serde_json::json;
    let us = |x: f64| x.is_finite().then_some(x * 1e6);
    let pts: Vec<_> = points
        .iter()
        .map(|p| {
            json!({
                "collective": p.coll.name(),
                "size": p.size,
                "op_bytes": p.m.op_bytes,
                "plain_us": us(p.m.modes[0]),
                "registered_us": us(p.m.modes[1]),
                "window_us": us(p.m.modes[2]),
                "one_shot_us": us(p.m.kernels[0]),
                "two_shot_us": us(p.m.kernels[1]),
                "gather_kernel_us": us(gather_kernel(p)),
                "best": p.best.name(),
            })
        })
        .collect();
    let rows: Vec<_> = t
        .rows()
        .iter()
        .map(|r| {
            json!({
                "collective": r.coll.map(|k| k.name()),
                "dtype": r.dtype.map(|d| format!("{d:?}")),
                "min_bytes": r.min_bytes,
                "max_bytes": r.max_bytes,
                "mode": r.mode.name(),
            })
        })
        .collect();
    let kernels: Vec<_> = t
        .kernels()
        .iter()
        .map(|k| {
            json!({
                "ranks": k.ranks,
                "one_shot_max": k.one_shot_max,
                "two_shot_max": k.two_shot_max,
                "all_gather_max": k.all_gather_max,
                "reduce_scatter_max": k.reduce_scatter_max,
            })
        })
        .collect();
    json!({"measured": head, "points": pts, "table": rows, "kernels": kernels, "written_to": out.display().to_string()})
}

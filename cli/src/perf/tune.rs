//! `oxccl perf --tune`: measures every tuned collective at every size of the sweep in each
//! buffer mode (plain, registered, symmetric window), through the process group itself, and
//! writes the tune table the process group reads (`OXCCL_TUNE_FILE`): per collective and size
//! the fastest mode, the slowest rank's median deciding.
//!
//! All-reduce also times oxccl's kernels (`tune_kernels`): the table then gets a `kernels`
//! line for the group size, and the base group runs NCCL alone so the modes time NCCL.
//!
//! Small-message times swing by tens of percent from one loop to the next, so the modes are
//! measured round by round, alternating (R0 R1 R2, then R1 R2 R0, …), each round a share of
//! `-n`, and the median of the rounds is kept: drift hits every mode alike.

use super::args::PerfArgs;
use super::drive::Plan;
use super::layer::Layer;
use super::mock_world::mock_world;
use super::modes::{self, ModeLayer};
use super::tune_kernels;
use crate::elem::with_dtype;
use crate::exit;
use crate::expect::Case;
use crate::ops::{self, Coll};
use oxccl::buffer::Memory;
use oxccl::core::tune::TuneRow;
use oxccl::pg::{ProcessGroup, RegMode, TuneTable};
use oxccl::{Feature, Result};
use std::process::ExitCode;

/// Medians of one rank: `[collective][size][variant]` seconds per operation (variants: the
/// three modes, then the kernels), NaN where the variant did not run (not in the library,
/// wrong results, a size too small to split, no kernels, not the kernel's collective).
pub type Medians = Vec<f64>;

/// Variants per point: the three buffer modes and the kernels.
const VARIANTS: usize = tune_kernels::FIRST + tune_kernels::COUNT;

/// The index of (collective c, size s, variant v).
fn at(plan: &Plan, c: usize, s: usize, v: usize) -> usize {
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
pub fn rank<B: Memory>(
    plan: &Plan,
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
        let l: Box<dyn Layer> = with_dtype!(plan.dtype, T => Box::new(ModeLayer::<B, T>::new(pg.clone(), *m, modes::name_of(*m))));
        layers.push((usize::from(m.level()), l));
    }
    layers.extend(tune_kernels::layers(pg, plan.dtype, &plan.colls));
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
                if !tune_kernels::runs(*v, *coll) {
                    continue;
                }
                if l.setup(&case, in_place)? {
                    l.arm(plan.warmup)?;
                    l.run(plan.warmup)?;
                    // A kernel's group that could not set them up runs NCCL: not measured.
                    // (Every rank decides alike: the set-up is collective.)
                    if *v >= tune_kernels::FIRST && l.peer_kernels().is_none() {
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

/// The ranks' medians merged: the slowest rank's, NaN when any rank has none.
pub fn merge(per_rank: &[Medians]) -> Medians {
    let len = per_rank.first().map_or(0, Vec::len);
    (0..len)
        .map(|i| {
            per_rank
                .iter()
                .map(|r| r.get(i).copied().unwrap_or(f64::NAN))
                .fold(f64::NEG_INFINITY, |a, x| {
                    if x.is_nan() || a.is_nan() {
                        f64::NAN
                    } else {
                        a.max(x)
                    }
                })
        })
        .collect()
}

/// One measured point of the decision: the op's bytes as the process group looks them up,
/// and each mode's time.
#[derive(Debug, Clone)]
pub struct Point {
    /// The collective.
    pub coll: Coll,
    /// The sweep's size (nccl-tests' column).
    pub size: usize,
    /// Bytes of the op's larger buffer, as [`oxccl::pg::ProcessGroup`] looks up the table.
    pub op_bytes: u64,
    /// Seconds per op by mode level; NaN: not measured.
    pub secs: [f64; 3],
    /// Seconds per op on each of oxccl's kernels (by `KernelAlgo::index`); NaN: not
    /// measured, or not this collective's kernel.
    pub kernels: [f64; tune_kernels::COUNT],
    /// The fastest mode (ties go to the simpler one).
    pub best: RegMode,
}

/// The points of the merged medians (sizes no mode ran are left out).
pub fn points(plan: &Plan, merged: &Medians, n: u32) -> Vec<Point> {
    let mut out = Vec::new();
    for (c, coll) in plan.colls.iter().enumerate() {
        for (s, size) in plan.sizes.iter().enumerate() {
            let get = |v| merged.get(at(plan, c, s, v)).copied().unwrap_or(f64::NAN);
            let secs = [0, 1, 2].map(get);
            let kernels = std::array::from_fn(|k| get(tune_kernels::FIRST + k));
            let mut best: Option<(RegMode, f64)> = None;
            for m in RegMode::ALL {
                let t = secs[usize::from(m.level())];
                if t.is_finite() && best.is_none_or(|(_, b)| t < b) {
                    best = Some((m, t));
                }
            }
            let Some((best, _)) = best else { continue };
            let count = coll.count_for(*size, plan.dtype.size(), n);
            let (sn, rn) = coll.shape(count, n, 0, plan.root);
            out.push(Point {
                coll: *coll,
                size: *size,
                op_bytes: (sn.max(rn) * plan.dtype.size()) as u64,
                secs,
                kernels,
                best,
            });
        }
    }
    out
}

/// The table of the points on `n` ranks: per collective, each measured size covers the bytes
/// above the previous one up to itself (the first from 0, the last to the end), neighbours of
/// one mode merged into one row; and the kernels' line when they were measured.
pub fn table(points: &[Point], n: u32) -> Result<TuneTable> {
    let mut rows: Vec<TuneRow> = Vec::new();
    for coll in modes::TUNED {
        let Some(kind) = modes::kind_of(coll) else {
            continue;
        };
        let mut ps: Vec<&Point> = points.iter().filter(|p| p.coll == coll).collect();
        ps.sort_by_key(|p| p.op_bytes);
        ps.dedup_by_key(|p| p.op_bytes);
        let mut lo = 0u64;
        for (i, p) in ps.iter().enumerate() {
            let hi = if i + 1 == ps.len() {
                u64::MAX
            } else {
                p.op_bytes
            };
            match rows.last_mut() {
                Some(r) if r.coll == Some(kind) && r.mode == p.best => r.max_bytes = hi,
                _ => rows.push(TuneRow {
                    coll: Some(kind),
                    dtype: None,
                    min_bytes: lo,
                    max_bytes: hi,
                    mode: p.best,
                }),
            }
            lo = hi.saturating_add(1);
        }
    }
    let kernels: Vec<tune_kernels::KernelPoint> = points
        .iter()
        .map(|p| tune_kernels::KernelPoint {
            coll: p.coll,
            op_bytes: p.op_bytes,
            nccl: p
                .secs
                .iter()
                .copied()
                .filter(|t| t.is_finite())
                .fold(f64::INFINITY, f64::min),
            kernels: p.kernels,
        })
        .collect();
    TuneTable::new(rows)?.with_kernels(tune_kernels::kernel_row(&kernels, n).into_iter().collect())
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
        .any(|p| p.kernels.iter().any(|t| t.is_finite()));
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
            us(p.secs[0]),
            us(p.secs[1]),
            us(p.secs[2]),
        ));
        if kernels {
            s.push_str(&format!(
                " {} {} {}",
                us(p.kernels[0]),
                us(p.kernels[1]),
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
        Coll::AllGather => p.kernels[KernelAlgo::AllGather.index()],
        Coll::ReduceScatter => p.kernels[KernelAlgo::ReduceScatter.index()],
        _ => f64::NAN,
    }
}

/// The file `--tune` writes: a header saying how it was measured, the report, the table.
pub fn file_text(head: &str, points: &[Point], t: &TuneTable) -> String {
    format!("# {head}\n{}{t}", report(points))
}

/// Checks `--tune`'s arguments against the plan: at least one tuned collective.
pub fn tuned_colls(colls: &[Coll]) -> std::result::Result<Vec<Coll>, String> {
    let c: Vec<Coll> = colls
        .iter()
        .copied()
        .filter(|c| modes::TUNED.contains(c))
        .collect();
    if c.is_empty() {
        return Err("none of the collectives given is tuned by the process group (all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall)".to_owned());
    }
    Ok(c)
}

/// Where `--tune` writes when `--out` is not given.
pub const DEFAULT_OUT: &str = "oxccl.tune";

/// The rounds of `--tune`: at least 1, at most the iterations.
pub fn rounds(a: &PerfArgs, iters: usize) -> usize {
    (a.rounds as usize).clamp(1, iters.max(1))
}

/// Runs `oxccl perf --tune` (`use_nccl`, `why`: what [`super::backend::choose`] found).
pub fn main(a: &PerfArgs, use_nccl: bool, why: &str) -> ExitCode {
    match measure(a, use_nccl, why) {
        Ok(code) => code,
        Err((code, msg)) => {
            eprintln!("oxccl perf --tune: {msg}");
            ExitCode::from(code)
        }
    }
}

fn measure(a: &PerfArgs, use_nccl: bool, why: &str) -> std::result::Result<ExitCode, (u8, String)> {
    let usage = |m: String| (exit::USAGE, m);
    let env = |m: String| (exit::ENV, m);
    if a.graphs > 0 || a.registration > 0 {
        return Err(usage(
            "-G and -R do not combine with --tune (it measures every mode itself, without graphs)"
                .to_owned(),
        ));
    }
    let colls = tuned_colls(&ops::expand(&a.colls)).map_err(usage)?;
    let mock = !use_nccl;
    let min = a.min_bytes.unwrap_or(8);
    let max = a
        .max_bytes
        .unwrap_or(if mock { 1 << 20 } else { 128 << 20 });
    // The mock holds every rank's buffers in this process (as `oxccl perf` bounds it).
    if mock && max > 256 << 20 {
        return Err(usage(format!(
            "-e {max} on the mock world: give -e 256M or less there"
        )));
    }
    let sizes = ops::sweep(min, max, a.factor as usize, a.incr.unwrap_or(0));
    if sizes.is_empty() {
        return Err(usage(format!(
            "-b {min} is above -e {max}: give a smallest size at most the largest"
        )));
    }
    let iters = a.iters.unwrap_or(if mock { 5 } else { 20 }) as usize;
    let plan = Plan {
        colls,
        sizes,
        dtype: a.dtype,
        redop: a.redop,
        root: a.root,
        iters,
        warmup: a.warmup.unwrap_or(if mock { 1 } else { 5 }) as usize,
        check: a.check == 1,
        layers: RegMode::ALL.iter().map(|m| modes::name_of(*m)).collect(),
    };
    let rounds = rounds(a, iters);
    let (per_rank, n, head) = if mock {
        let n = a.gpus.unwrap_or(2);
        let per = mock_world(n, |pg, r| rank(&plan, pg, r, n, rounds)).map_err(env)?;
        (per, n, format!("mock world ({why}): {n} ranks as threads, host memory: a table for tests, not for a machine"))
    } else {
        let lib = super::nccl::load(a.library.as_deref()).map_err(env)?;
        let envv = oxccl::launch::EnvVars::from_process();
        if oxccl::launch::LaunchInfo::detect(|k| envv.get(k)).is_ok() {
            // A process per GPU (torchrun, srun, mpirun): every rank measures, the medians
            // are merged through the group, rank 0 writes.
            let (merged, n, r) = launched(&lib, &plan, rounds).map_err(|e| env(e.to_string()))?;
            if r != 0 {
                return Ok(ExitCode::SUCCESS);
            }
            let head = format!(
                "NCCL {} at {}: {n} ranks, a process per GPU",
                oxccl::core::Backend::version(&lib),
                oxccl::escaped_path(lib.library().path())
            );
            return write(a, &plan, &merged, n, &head, iters, rounds);
        }
        let n = super::nccl::local_gpus(a.gpus).map_err(env)?;
        let body = |pg: &ProcessGroup<oxccl::Nccl>,
                    _: &std::rc::Rc<std::cell::RefCell<oxccl::Comm>>,
                    r: u32| { rank(&plan, pg, r, n, rounds) };
        // The modes time NCCL; the kernels are timed through groups that force them.
        let setup = super::nccl::RankSetup {
            blocking: a.blocking == 1,
            kernels: oxccl::core::peer_kernels::PeerPolicy::Nccl,
        };
        let per = super::nccl::thread_world(&lib, n, setup, &body).map_err(env)?;
        (
            per,
            n,
            format!(
                "NCCL {} at {}: {n} GPUs, a thread per GPU",
                oxccl::core::Backend::version(&lib),
                oxccl::escaped_path(lib.library().path())
            ),
        )
    };
    write(a, &plan, &merge(&per_rank), n, &head, iters, rounds)
}

/// One rank of a launched job: its group from the launcher's variables, its medians, and
/// the merge (slowest rank; NaN where any rank has none) through that group.
fn launched(lib: &oxccl::Nccl, plan: &Plan, rounds: usize) -> Result<(Medians, u32, u32)> {
    let boot = oxccl::launch::Bootstrap::from_env()?;
    let (r, n) = (boot.rank, boot.world_size);
    let opts = oxccl::pg::PgOptions {
        bound_device: Some(boot.device),
        // The modes time NCCL; the kernels are timed through groups that force them.
        peer_kernels: oxccl::core::peer_kernels::PeerPolicy::Nccl,
        ..oxccl::pg::PgOptions::default()
    };
    let pg = ProcessGroup::new(lib.clone(), boot.group_store(), r, n, opts)?;
    let out = rank(plan, &pg, r, n, rounds).and_then(|m| {
        // NaN travels as +inf, which the max keeps.
        let enc: Vec<f64> = m
            .iter()
            .map(|v| if v.is_nan() { f64::INFINITY } else { *v })
            .collect();
        let mut b = pg.upload(&enc)?;
        pg.all_reduce(&mut b, oxccl::ReduceOp::Max)?.wait()?;
        let got = pg.download(&b)?;
        Ok(got
            .into_iter()
            .map(|v| if v.is_finite() { v } else { f64::NAN })
            .collect())
    });
    pg.destroy();
    Ok((out?, n, r))
}

/// Decides, writes the table to `--out` and prints it.
fn write(
    a: &PerfArgs,
    plan: &Plan,
    merged: &Medians,
    n: u32,
    head: &str,
    iters: usize,
    rounds: usize,
) -> std::result::Result<ExitCode, (u8, String)> {
    let env = |m: String| (exit::ENV, m);
    let pts = points(plan, merged, n);
    let t = table(&pts, n).map_err(|e| env(e.to_string()))?;
    let head = format!(
        "oxccl perf --tune on {head}; {} {}, {iters} iterations in {rounds} alternating rounds, medians, slowest rank",
        plan.dtype.name(),
        plan.redop.name()
    );
    let text = file_text(&head, &pts, &t);
    let out = a.out.clone().unwrap_or_else(|| DEFAULT_OUT.into());
    std::fs::write(&out, &text).map_err(|e| {
        env(format!(
            "cannot write --out {}: {e}",
            oxccl::escaped_path(&out)
        ))
    })?;
    if a.json {
        let v = json_of(&head, &pts, &t, &out);
        println!("{}", crate::shown::json(&v));
        return Ok(ExitCode::SUCCESS);
    }
    print!("{text}");
    println!(
        "# written to {} (give it to every rank: OXCCL_TUNE_FILE={})",
        oxccl::escaped_path(&out),
        oxccl::escaped_path(&out)
    );
    Ok(ExitCode::SUCCESS)
}

/// `--tune --json`: what the file says, as one object: the measurement, every point with its
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
                "op_bytes": p.op_bytes,
                "plain_us": us(p.secs[0]),
                "registered_us": us(p.secs[1]),
                "window_us": us(p.secs[2]),
                "one_shot_us": us(p.kernels[0]),
                "two_shot_us": us(p.kernels[1]),
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

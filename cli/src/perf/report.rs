//! The sweep's results as nccl-tests prints them (one table, a layer column in front, the
//! average bus bandwidth per layer at the end), as JSON and as a chart, and the exit code
//! they earn.

use super::backend::Ground;
use super::drive::Sample;
use super::layer::{pg_placement, LayerKind};
use super::plan::{Failure, Plan, SweepPoint};
use super::svg;
use super::world::World;
use crate::exit;
use crate::ops::Coll;
use oxccl::core::Backend as _;
use serde_json::{json, Value};
use std::io::Write;
use std::process::ExitCode;

/// Where the run was, for the report: the JSON head (backend, ranks, and why this backend)
/// and the line the table starts with.
pub fn head(plan: &Plan, world: &World) -> (Value, String) {
    let n = world.ranks();
    let (graphs, registration) = (plan.opts.graphs, plan.opts.registration);
    let (mut v, first) = match (&plan.ground, world.launcher()) {
        (Ground::Mock(why), None) => (
            json!({"backend": "mock", "reason": why, "ranks": n}),
            format!("mock world (no NCCL run: {why}): {n} ranks as threads, pg layer only, host memory: times measure oxccl's host path, not a network"),
        ),
        (Ground::Mock(why), Some(launcher)) => (
            json!({"backend": "mock", "reason": why, "mode": "process per rank", "ranks": n, "launcher": format!("{launcher:?}")}),
            format!("mock world (no NCCL run: {why}): {n} ranks, one process per rank ({launcher:?}), pg layer only, host memory: times measure oxccl's host path, not a network"),
        ),
        (Ground::Nccl(lib), None) => (
            json!({"backend": "nccl", "nccl_version": lib.version().to_string(), "mode": "thread per GPU", "ranks": n, "graphs": graphs, "registration": registration}),
            format!(
                "NCCL {} at {}: {n} GPUs, a thread per GPU, graphs {graphs}, registration {registration}",
                lib.version(),
                oxccl::escaped_path(lib.library().path())
            ),
        ),
        (Ground::Nccl(lib), Some(launcher)) => (
            json!({"backend": "nccl", "nccl_version": lib.version().to_string(), "mode": "process per GPU", "ranks": n, "graphs": graphs, "registration": registration}),
            format!(
                "NCCL {}: {n} ranks, one process per GPU ({launcher:?}), graphs {graphs}, registration {registration}",
                lib.version()
            ),
        ),
    };
    v["first_line"] = json!(first);
    (v, first)
}

/// Writes `text` to stdout and flushes it, so that a pipe or a log (`| tee`, a launcher's
/// capture) gets each line when it is made, as a terminal does. A write that fails does not
/// stop the run (a closed pipe ends the process through SIGPIPE).
pub fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Prints what the table starts with: the line saying where the run is, then the column
/// heads. The first rank prints it before measuring, and each point's rows
/// ([`print_point_rows`]) as it ends.
pub fn print_opening(plan: &Plan, world: &World) {
    print(&format!("# {}\n{}", head(plan, world).1, column_heads()));
}

/// Prints the table's lines of one point's merged samples: a row per layer that ran it.
pub fn print_point_rows(plan: &Plan, point: &SweepPoint, merged: &[Sample]) {
    let lines: String = rows(plan, std::slice::from_ref(point), merged)
        .iter()
        .map(|r| row_line(plan, r))
        .collect();
    print(&lines);
}

/// Ends the report of the samples merged at `points`: the table's last lines (its rows are
/// printed as they are measured), or the JSON object with --json; writes --json-out and
/// --svg, and says how the run ends: 1 when a result is wrong.
pub fn deliver(
    plan: &Plan,
    world: &World,
    points: &[SweepPoint],
    merged: &[Sample],
) -> Result<ExitCode, Failure> {
    let rows = rows(plan, points, merged);
    let (head, _) = head(plan, world);
    let json = to_json(plan, &rows, head);
    let wrong = wrong_total(&rows);
    let out = &plan.output;
    let svg = out.svg.as_ref().map(|path| {
        let lines = series(&rows);
        let title = format!(
            "oxccl perf on {} ({} ranks, {})",
            json["backend"].as_str().unwrap_or("?"),
            world.ranks(),
            plan.sweep.dtype.name()
        );
        (path, svg::chart(&lines, &title))
    });
    if out.json {
        print(&format!("{}\n", crate::shown::json(&json)));
    } else {
        print(&footer(plan, &rows));
    }
    let write = |what: &str, path: &std::path::Path, text: String| {
        crate::output::write(what, path, text.as_bytes()).map_err(Failure::env)
    };
    if let Some(path) = &out.json_out {
        write(
            "--json-out",
            path,
            serde_json::to_string_pretty(&json).unwrap_or_default(),
        )?;
    }
    if let Some((path, chart)) = svg {
        write("--svg", path, chart)?;
    }
    match wrong {
        0 => Ok(ExitCode::SUCCESS),
        wrong => Err(Failure {
            code: exit::FAILED,
            why: format!("{wrong} wrong elements: the results do not match the host reference"),
        }),
    }
}

/// One placement of one row: time in µs, bandwidths in GB/s, wrong elements (-1: unchecked).
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    /// Microseconds per operation.
    pub time_us: f64,
    /// Size / time, GB/s.
    pub algbw: f64,
    /// algbw × the collective's bus factor, GB/s.
    pub busbw: f64,
    /// Wrong elements, or -1 when not checked.
    pub wrong: i64,
}

/// One row: a collective at one size through one layer.
#[derive(Clone, Debug)]
pub struct Row {
    /// The layer.
    pub layer: LayerKind,
    /// Collective.
    pub coll: Coll,
    /// Bytes (nccl-tests' size: the whole array).
    pub bytes: usize,
    /// Elements of the whole array.
    pub count: usize,
    /// Out-of-place and in-place cells (None: the layer has no such call).
    pub cells: [Option<Cell>; 2],
}

/// The rows of a merged sweep at `points` (the samples in the order [`super::drive::sweep`]
/// files them): a row per point and layer that ran in either placement.
pub fn rows(plan: &Plan, points: &[SweepPoint], merged: &[Sample]) -> Vec<Row> {
    let mut out = Vec::new();
    let per_point = merged.chunks_exact(2 * plan.layers.len());
    for (point, samples) in points.iter().zip(per_point) {
        for (layer, pair) in plan.layers.iter().zip(samples.chunks_exact(2)) {
            let cell = |smp: &Sample| {
                (!smp.secs.is_nan()).then(|| {
                    let algbw = if smp.secs > 0.0 {
                        point.bytes as f64 / smp.secs / 1e9
                    } else {
                        0.0
                    };
                    Cell {
                        time_us: smp.secs * 1e6,
                        algbw,
                        busbw: algbw * point.bus_factor,
                        wrong: smp.wrong,
                    }
                })
            };
            let cells = [cell(&pair[0]), cell(&pair[1])];
            if cells.iter().any(Option::is_some) {
                out.push(Row {
                    layer: *layer,
                    coll: point.coll,
                    bytes: point.bytes,
                    count: point.count,
                    cells,
                });
            }
        }
    }
    out
}

/// The chart's lines: a layer's collective over its sizes, each in the placement every layer
/// has (the process group reduces and broadcasts in place, the rest out of place).
fn series(rows: &[Row]) -> Vec<svg::Series> {
    let mut out: Vec<svg::Series> = Vec::new();
    for r in rows {
        let in_place = pg_placement(r.coll, true);
        let Some(c) = r.cells[usize::from(in_place)].or(r.cells[usize::from(!in_place)]) else {
            continue;
        };
        let (layer, coll) = (r.layer.name(), r.coll.name());
        let point = (r.bytes.max(1) as f64, c.busbw, c.time_us);
        match out.iter_mut().find(|s| (s.layer, s.coll) == (layer, coll)) {
            Some(s) => s.points.push(point),
            None => out.push(svg::Series {
                layer,
                coll,
                points: vec![point],
            }),
        }
    }
    out
}

/// Average busbw per layer over every cell it has, in the plan's layer order.
pub fn averages(plan: &Plan, rows: &[Row]) -> Vec<(LayerKind, f64)> {
    plan.layers
        .iter()
        .filter_map(|l| {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| r.layer == *l)
                .flat_map(|r| r.cells.iter().flatten().map(|c| c.busbw))
                .collect();
            (!v.is_empty()).then(|| (*l, v.iter().sum::<f64>() / v.len() as f64))
        })
        .collect()
}

/// Wrong elements over every checked cell.
pub fn wrong_total(rows: &[Row]) -> i64 {
    rows.iter()
        .flat_map(|r| r.cells.iter().flatten())
        .map(|c| c.wrong.max(0))
        .sum()
}

/// The nccl-tests-style table's column heads.
fn column_heads() -> &'static str {
    "\
#                                                              out-of-place                       in-place
#  layer  collective        size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#                            (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"
}

/// One row of the table, with its line end.
fn row_line(plan: &Plan, r: &Row) -> String {
    let sweep = &plan.sweep;
    let redop = if r.coll.reduces() {
        sweep.redop.name()
    } else {
        "none"
    };
    let root = if r.coll.rooted() {
        sweep.root as i64
    } else {
        -1
    };
    let mut s = format!(
        "{:>8}  {:<14} {:>10}  {:>12}  {:>8}  {:>6}  {:>6}",
        r.layer.name(),
        r.coll.name(),
        r.bytes,
        r.count,
        sweep.dtype.name(),
        redop,
        root
    );
    for c in &r.cells {
        match c {
            Some(c) => {
                let wrong = if c.wrong < 0 {
                    "N/A".to_owned()
                } else {
                    c.wrong.to_string()
                };
                s += &format!(
                    "  {:>7.2}  {:>6.2}  {:>6.2}  {:>5}",
                    c.time_us, c.algbw, c.busbw, wrong
                );
            }
            None => s += &format!("  {:>7}  {:>6}  {:>6}  {:>5}", "N/A", "N/A", "N/A", "N/A"),
        }
    }
    s.push('\n');
    s
}

/// The table's last lines: the average bus bandwidth per layer and the wrong elements.
fn footer(plan: &Plan, rows: &[Row]) -> String {
    let mut s = String::new();
    for (l, avg) in averages(plan, rows) {
        s += &format!("# Avg bus bandwidth ({}) : {avg:.4} GB/s\n", l.name());
    }
    s += &format!(
        "# wrong elements: {}{}\n",
        wrong_total(rows),
        if plan.sweep.check {
            ""
        } else {
            " (results not checked: -c 1 checks)"
        }
    );
    s
}

fn cell_json(c: &Option<Cell>) -> Value {
    match c {
        None => Value::Null,
        Some(c) => {
            json!({"time_us": c.time_us, "algbw_gbps": c.algbw, "busbw_gbps": c.busbw, "wrong": if c.wrong < 0 { Value::Null } else { json!(c.wrong) }})
        }
    }
}

/// The report as JSON: the run's settings, every row, the averages and the wrong total.
pub fn to_json(plan: &Plan, rows: &[Row], head: Value) -> Value {
    let sweep = &plan.sweep;
    let mut v = head;
    v["dtype"] = json!(sweep.dtype.name());
    v["redop"] = json!(sweep.redop.name());
    v["root"] = json!(sweep.root);
    v["iters"] = json!(sweep.iters);
    v["warmup"] = json!(sweep.warmup);
    v["check"] = json!(sweep.check);
    v["layers"] = plan.layers.iter().map(|l| l.name()).collect();
    v["results"] = rows
        .iter()
        .map(|r| {
            json!({
                "layer": r.layer.name(), "collective": r.coll.name(), "size": r.bytes, "count": r.count,
                "type": sweep.dtype.name(),
                "redop": if r.coll.reduces() { sweep.redop.name() } else { "none" },
                "root": if r.coll.rooted() { json!(sweep.root) } else { Value::Null },
                "out_of_place": cell_json(&r.cells[0]), "in_place": cell_json(&r.cells[1]),
            })
        })
        .collect();
    v["avg_busbw_gbps"] = Value::Object(
        averages(plan, rows)
            .into_iter()
            .map(|(l, a)| (l.name().to_owned(), json!(a)))
            .collect(),
    );
    v["wrong_total"] = json!(wrong_total(rows));
    v
}

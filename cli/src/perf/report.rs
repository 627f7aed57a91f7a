//! The sweep's results as nccl-tests prints them (one table, a layer column in front, the
//! average bus bandwidth per layer at the end) and as JSON.

use super::drive::{index, Plan, Sample};
use crate::ops::{human, Coll};
use serde_json::{json, Value};

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
    /// Layer name.
    pub layer: &'static str,
    /// Collective.
    pub coll: Coll,
    /// Bytes (nccl-tests' size: the whole array).
    pub bytes: usize,
    /// Elements of the whole array.
    pub count: usize,
    /// Out-of-place and in-place cells (None: the layer has no such call).
    pub cells: [Option<Cell>; 2],
}

/// The rows of a merged sweep on `n` ranks.
pub fn rows(plan: &Plan, merged: &[Sample], n: u32) -> Vec<Row> {
    let mut out = Vec::new();
    for (c, coll) in plan.colls.iter().enumerate() {
        for (s, size) in plan.sizes.iter().enumerate() {
            let count = coll.count_for(*size, plan.dtype.size(), n);
            let bytes = count * plan.dtype.size();
            for (l, layer) in plan.layers.iter().enumerate() {
                let cell = |p: bool| {
                    let smp = merged[index(plan, c, s, l, p)];
                    (!smp.secs.is_nan()).then(|| {
                        let algbw = if smp.secs > 0.0 {
                            bytes as f64 / smp.secs / 1e9
                        } else {
                            0.0
                        };
                        Cell {
                            time_us: smp.secs * 1e6,
                            algbw,
                            busbw: algbw * coll.bus_factor(n),
                            wrong: smp.wrong,
                        }
                    })
                };
                let cells = [cell(false), cell(true)];
                if cells.iter().any(Option::is_some) {
                    out.push(Row {
                        layer,
                        coll: *coll,
                        bytes,
                        count,
                        cells,
                    });
                }
            }
        }
    }
    out
}

/// Average busbw per layer over every cell it has, in the plan's layer order.
pub fn averages(plan: &Plan, rows: &[Row]) -> Vec<(&'static str, f64)> {
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

/// The nccl-tests-style table (without the first line, which says where it ran).
pub fn table(plan: &Plan, rows: &[Row]) -> String {
    let mut s = String::new();
    s += "#                                                              out-of-place                       in-place\n";
    s += "#  layer  collective        size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";
    s += "#                            (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n";
    for r in rows {
        let redop = if r.coll.reduces() {
            plan.redop.name()
        } else {
            "none"
        };
        let root = if r.coll.rooted() {
            plan.root as i64
        } else {
            -1
        };
        s += &format!(
            "{:>8}  {:<14} {:>10}  {:>12}  {:>8}  {:>6}  {:>6}",
            r.layer,
            r.coll.name(),
            r.bytes,
            r.count,
            plan.dtype.name(),
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
    }
    for (l, avg) in averages(plan, rows) {
        s += &format!("# Avg bus bandwidth ({l}) : {avg:.4} GB/s\n");
    }
    s += &format!(
        "# wrong elements: {}{}\n",
        wrong_total(rows),
        if plan.check {
            ""
        } else {
            " (results not checked: -c 1 checks)"
        }
    );
    let _ = human;
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
    let mut v = head;
    v["dtype"] = json!(plan.dtype.name());
    v["redop"] = json!(plan.redop.name());
    v["root"] = json!(plan.root);
    v["iters"] = json!(plan.iters);
    v["warmup"] = json!(plan.warmup);
    v["check"] = json!(plan.check);
    v["layers"] = json!(plan.layers);
    v["results"] = rows
        .iter()
        .map(|r| {
            json!({
                "layer": r.layer, "collective": r.coll.name(), "size": r.bytes, "count": r.count,
                "type": plan.dtype.name(),
                "redop": if r.coll.reduces() { plan.redop.name() } else { "none" },
                "root": if r.coll.rooted() { json!(plan.root) } else { Value::Null },
                "out_of_place": cell_json(&r.cells[0]), "in_place": cell_json(&r.cells[1]),
            })
        })
        .collect();
    v["avg_busbw_gbps"] = Value::Object(
        averages(plan, rows)
            .into_iter()
            .map(|(l, a)| (l.to_owned(), json!(a)))
            .collect(),
    );
    v["wrong_total"] = json!(wrong_total(rows));
    v
}

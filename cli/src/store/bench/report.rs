//! The bench's report: a column per server (or its error), the ratios oxccl/torch when both
//! ran; as a plain-text table or one JSON object with the same rows.

use super::args::Plan;
use super::error::BenchError;
use super::fanin::FanIn;
use super::server::ServerKind;
use serde_json::{json, Map, Value};

/// What one server's run measured beyond the fan-in.
#[derive(Debug)]
pub struct Measured {
    /// The fan-in.
    pub fanin: FanIn,
    /// Whether the server holds N at every round's counter afterwards.
    pub stored_counts: bool,
    /// The server's largest resident set over its life, KiB.
    pub peak_rss_kib: u64,
    /// Set and get per second (`None`: not measured).
    pub ops_per_s: Option<f64>,
}

impl Measured {
    /// Whether every rank joined and every round finished with exact counts.
    pub fn complete(&self, plan: &Plan) -> bool {
        let f = &self.fanin;
        f.joined == plan.ranks
            && f.rounds_completed == plan.rounds
            && f.rounds_exact == plan.rounds
            && self.stored_counts
    }
}

/// One server's column.
pub struct Column {
    /// The server.
    pub kind: ServerKind,
    /// What it measured, or why it could not.
    pub result: Result<Measured, BenchError>,
}

const MIB: f64 = 1024.0;

/// A numeric row: its label, its JSON key, its value, its decimals in the table.
struct Row {
    label: &'static str,
    key: &'static str,
    value: fn(&Measured) -> Option<f64>,
    decimals: usize,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

const ROWS: &[Row] = &[
    Row {
        label: "join s",
        key: "join_s",
        value: |m| Some(m.fanin.join_s),
        decimals: 3,
    },
    Row {
        label: "barrier mean ms",
        key: "barrier_mean_ms",
        value: |m| mean(&m.fanin.barrier_s).map(|s| s * 1e3),
        decimals: 2,
    },
    Row {
        label: "barrier max ms",
        key: "barrier_max_ms",
        value: |m| {
            m.fanin
                .barrier_s
                .iter()
                .copied()
                .reduce(f64::max)
                .map(|s| s * 1e3)
        },
        decimals: 2,
    },
    Row {
        label: "leave s",
        key: "leave_s",
        value: |m| m.fanin.leave_s,
        decimals: 3,
    },
    Row {
        label: "base RSS MiB",
        key: "base_rss_mib",
        value: |m| Some(m.fanin.base_rss_kib as f64 / MIB),
        decimals: 1,
    },
    Row {
        label: "idle RSS MiB",
        key: "idle_rss_mib",
        value: |m| Some(m.fanin.idle_rss_kib as f64 / MIB),
        decimals: 1,
    },
    Row {
        label: "RSS/conn KiB",
        key: "rss_per_conn_kib",
        value: |m| {
            let grown = m.fanin.idle_rss_kib as f64 - m.fanin.base_rss_kib as f64;
            (m.fanin.joined > 0).then(|| grown / m.fanin.joined as f64)
        },
        decimals: 2,
    },
    Row {
        label: "peak RSS MiB",
        key: "peak_rss_mib",
        value: |m| Some(m.peak_rss_kib as f64 / MIB),
        decimals: 1,
    },
    Row {
        label: "CPU s",
        key: "cpu_s",
        value: |m| Some(m.fanin.cpu_s),
        decimals: 2,
    },
    Row {
        label: "ops/s",
        key: "ops_per_s",
        value: |m| m.ops_per_s,
        decimals: 0,
    },
];

/// oxccl's value over torch's, where both columns have one.
fn ratio(cols: &[Column], row: &Row) -> Option<f64> {
    let get = |k| {
        cols.iter()
            .find(|c| c.kind == k)
            .and_then(|c| c.result.as_ref().ok())
            .and_then(|m| (row.value)(m))
    };
    let (o, t) = (get(ServerKind::Oxccl)?, get(ServerKind::Torch)?);
    (t != 0.0).then(|| o / t)
}

fn both_ran(cols: &[Column]) -> bool {
    [ServerKind::Oxccl, ServerKind::Torch]
        .iter()
        .all(|k| cols.iter().any(|c| c.kind == *k))
}

/// The report as a plain-text table, then each failed server's error.
pub fn text(plan: &Plan, cols: &[Column]) -> String {
    let mut out = format!(
        "oxccl store bench: {} ranks, {} rounds, {} client processes, descriptor limit {}\n",
        plan.ranks,
        plan.rounds,
        plan.shares.len(),
        plan.fd_limit
    );
    let ratios = both_ran(cols);
    let mut line = |label: &str, cells: Vec<String>, r: String| {
        out.push_str(&format!("{label:<18}"));
        for c in cells {
            out.push_str(&format!("{c:>12}"));
        }
        if ratios {
            out.push_str(&format!("{r:>14}"));
        }
        out.push('\n');
    };
    let names = cols.iter().map(|c| c.kind.name().to_string()).collect();
    line("", names, "oxccl/torch".into());
    let cell = |c: &Column, f: &dyn Fn(&Measured) -> String| match &c.result {
        Ok(m) => f(m),
        Err(_) => "failed".into(),
    };
    let joined = cols
        .iter()
        .map(|c| cell(c, &|m| m.fanin.joined.to_string()))
        .collect();
    line("ranks joined", joined, String::new());
    let rounds = cols
        .iter()
        .map(|c| {
            cell(c, &|m| {
                let ok = m.fanin.rounds_exact.min(m.fanin.rounds_completed);
                let stored = if m.stored_counts { "" } else { " !" };
                format!("{ok}/{}{stored}", plan.rounds)
            })
        })
        .collect();
    line("rounds exact", rounds, String::new());
    for row in ROWS {
        let label = match row.key {
            "ops_per_s" => format!("ops/s ({} cl.)", plan.ops_clients),
            _ => row.label.to_string(),
        };
        let cells = cols
            .iter()
            .map(|c| {
                cell(c, &|m| match (row.value)(m) {
                    Some(v) => format!("{v:.*}", row.decimals),
                    None => "-".into(),
                })
            })
            .collect();
        let r = ratio(cols, row).map_or_else(|| "-".into(), |r| format!("{r:.2}"));
        line(&label, cells, r);
    }
    for c in cols {
        if let Err(e) = &c.result {
            out.push_str(&format!("{}: {e}\n", c.kind.name()));
        }
    }
    out
}

/// The report as one JSON object.
pub fn json(plan: &Plan, cols: &[Column]) -> Value {
    let mut servers = Map::new();
    for c in cols {
        let v = match &c.result {
            Ok(m) => {
                let mut o = Map::new();
                o.insert("ok".into(), json!(m.complete(plan)));
                o.insert("ranks_joined".into(), json!(m.fanin.joined));
                o.insert("rounds_completed".into(), json!(m.fanin.rounds_completed));
                o.insert("rounds_exact".into(), json!(m.fanin.rounds_exact));
                o.insert("stored_counts".into(), json!(m.stored_counts));
                let ms: Vec<f64> = m.fanin.barrier_s.iter().map(|s| s * 1e3).collect();
                o.insert("barrier_ms".into(), json!(ms));
                for row in ROWS {
                    o.insert(row.key.into(), json!((row.value)(m)));
                }
                Value::Object(o)
            }
            Err(BenchError::Failed(f)) => {
                json!({ "ok": false, "error": f.render(), "observed": f.json() })
            }
            Err(e) => json!({ "ok": false, "error": e.to_string() }),
        };
        servers.insert(c.kind.name().into(), v);
    }
    let ratios = both_ran(cols).then(|| {
        let r: Map<String, Value> = ROWS
            .iter()
            .map(|row| (row.key.to_string(), json!(ratio(cols, row))))
            .collect();
        json!({ "oxccl/torch": r })
    });
    json!({
        "ranks": plan.ranks,
        "rounds": plan.rounds,
        "client_procs": plan.shares.len(),
        "fd_limit": plan.fd_limit,
        "ops_clients": plan.ops_clients,
        "servers": servers,
        "ratios": ratios,
    })
}

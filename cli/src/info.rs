//! `oxccl info`: which NCCL was loaded and how it was found, what it can do, the GPUs and
//! their links, the variables in effect (with what the process group makes of PyTorch's names
//! and of values it refuses) and the launcher recognised.

use crate::{exit, gpus};
use clap::Args;
use oxccl::core::text::{Escaped, JsonSafe};
use oxccl::core::Feature;
use oxccl::loader::text::os_text;
use oxccl::loader::{Api, Library, LoadError};
use oxccl::rules::launch::LaunchInfo;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Options of `oxccl info`.
#[derive(Args)]
#[command(after_help = "Examples:
  oxccl info
  oxccl info --json | jq .gpu.links
  oxccl info --library /opt/nccl/lib/libnccl.so.2

Exit code 3 when no library loads (the report still lists the places tried and how to get one).")]
pub struct InfoArgs {
    /// Load this library instead of searching (the only place tried).
    #[arg(long, value_name = "PATH")]
    library: Option<PathBuf>,
    /// One JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// How to get a library, said when none is found: the library's own words, which a program's
/// load error prints too.
pub const GET_ONE: &str = oxccl::core::error::GET_NCCL;

/// Runs `oxccl info`: exit 0 with a library, 3 without one (the rest is reported either way).
pub fn run(a: &InfoArgs) -> ExitCode {
    let start = Instant::now();
    let loaded = Library::load_from(a.library.as_deref());
    let total = start.elapsed();
    let report = json!({
        "library": library_json(&loaded, a.library.is_some(), total.as_secs_f64() * 1e3),
        "gpu": gpus::to_json(&gpus::probe()),
        "environment": env_json(),
        "settings": settings_json(),
        "launcher": launcher_json(),
    });
    if a.json {
        println!("{}", crate::shown::json(&report));
    } else {
        print!("{}", text(&report));
    }
    match loaded {
        Ok(_) => ExitCode::SUCCESS,
        Err(LoadError::NothingFound { tried }) => {
            eprintln!(
                "oxccl info: no NCCL library found ({} places tried); {GET_ONE}",
                tried.len()
            );
            ExitCode::from(exit::ENV)
        }
        Err(e) => {
            eprintln!("oxccl info: {e}; {GET_ONE}");
            ExitCode::from(exit::ENV)
        }
    }
}

fn library_json(loaded: &Result<Library, LoadError>, explicit: bool, total_ms: f64) -> Value {
    match loaded {
        Ok(lib) => {
            let v = lib.version();
            let features: Vec<Value> = Feature::ALL
                .iter()
                .map(|f| {
                    let mut o = json!({
                        "name": f.name(),
                        "since": f.since().to_string(),
                        "available": lib.features().has(*f),
                    });
                    if let Err(why) = lib.features().check(*f) {
                        o["reason"] = json!(why.to_string());
                    }
                    o
                })
                .collect();
            json!({
                "found": true,
                "path": os_text(lib.path().as_os_str()),
                "how": if explicit { "--library" } else if std::env::var_os(oxccl::loader::ENV_LIBRARY).is_some_and(|v| !v.is_empty()) { "OXCCL_NCCL_LIBRARY" } else { "search" },
                "version": v.to_string(),
                "version_code": v.code().unwrap_or(0),
                "load_ms": lib.load_time().as_secs_f64() * 1e3,
                "load_with_discovery_ms": total_ms,
                "functions_exported": lib.api().present_count(),
                "functions_known": Api::SYMBOLS.len(),
                "search_order": search_order(),
                "features": features,
            })
        }
        Err(e) => {
            let tried: Vec<Value> = match e {
                LoadError::NothingFound { tried } => tried
                    .iter()
                    .map(|t| json!({"place": t.place, "reason": t.reason}))
                    .collect(),
                _ => Vec::new(),
            };
            let error = match e {
                LoadError::NothingFound { .. } => "no usable NCCL library found".to_owned(),
                e => e.to_string(),
            };
            json!({"found": false, "error": error, "tried": tried, "how_to_get_one": GET_ONE})
        }
    }
}

/// The places the search tries, in order (the first that loads wins).
fn search_order() -> Vec<String> {
    std::iter::once(format!("{} (when set)", oxccl::loader::ENV_LIBRARY))
        .chain(oxccl::loader::find::places().iter().map(|p| p.describe()))
        .collect()
}

/// Whether `oxccl info` lists a variable: NCCL's, oxccl's, and PyTorch's for its NCCL group.
fn listed(name: &str) -> bool {
    ["NCCL_", "OXCCL_", "TORCH_NCCL_", "TORCH_DIST"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// The variables [`listed`], their bytes that are not UTF-8 as `\xNN` (the rendering of the
/// library's paths, [`os_text`]).
fn env_json() -> Value {
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| (os_text(&k).into_owned(), os_text(&v).into_owned()))
        .filter(|(k, _)| listed(k))
        .collect();
    vars.sort();
    Value::Object(vars.into_iter().map(|(k, v)| (k, json!(v))).collect())
}

/// What the process group makes of this environment: one object per note of
/// [`oxccl::rules::env::resolve`] (a PyTorch name taken, ignored, not honoured or unknown, a
/// value refused), the same function and checks the group applies, by variable name.
fn settings_json() -> Value {
    use oxccl::rules::env::Outcome;
    let vars = oxccl::launch::EnvVars::from_process();
    let settings = oxccl::rules::env::resolve(vars.iter());
    let notes = settings.notes.iter().map(|n| {
        let mut o = json!({
            "variable": n.name,
            "value": n.value,
            "outcome": n.outcome.label(),
            "text": n.to_string(),
        });
        match &n.outcome {
            Outcome::Taken { oxccl, value, .. } => {
                o["as"] = json!(oxccl);
                o["as_value"] = json!(value);
            }
            Outcome::Overridden { by } => o["by"] = json!(by),
            Outcome::NotHonoured(why) => o["why"] = json!(why),
            Outcome::Unknown => {}
            Outcome::Invalid(e) => {
                o["error"] = json!(e.to_string());
                if let oxccl::Error::InvalidArgument { expected, .. } = &**e {
                    o["expected"] = json!(expected.as_str());
                }
            }
        }
        o
    });
    Value::Array(notes.collect())
}

fn launcher_json() -> Value {
    let env = oxccl::launch::EnvVars::from_process();
    const RANK_VARS: [&str; 4] = ["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"];
    if RANK_VARS.iter().all(|v| env.get(v).is_none()) {
        return json!({"recognised": null, "note": "not started by torchrun, srun or mpirun (no RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK)"});
    }
    match LaunchInfo::detect(|k| env.get(k)) {
        Ok(l) => json!({
            "recognised": format!("{:?}", l.launcher),
            "rank": l.rank,
            "world_size": l.world_size,
            "local_rank": l.local_rank,
            "local_world_size": l.local_world_size,
            "master_addr": l.master_addr.as_deref(),
            "master_port": l.master_port,
            "master_port_from": port_origin(&l),
        }),
        Err(e) => json!({"recognised": null, "note": e.to_string()}),
    }
}

/// Where the port of rank 0's store comes from, as `oxccl info` says it.
fn port_origin(l: &LaunchInfo) -> Value {
    match (l.master_port, l.derived_port) {
        (_, Some(step)) => json!(format!(
            "derived from Slurm job {} step {} by {} (MASTER_PORT unset)",
            step.job_id,
            step.step_id,
            oxccl::rules::launch::SLURM_PORT_RULE
        )),
        (Some(_), None) => json!("MASTER_PORT"),
        (None, None) => Value::Null,
    }
}

fn text(r: &Value) -> String {
    let mut s = String::new();
    let lib = &r["library"];
    if lib["found"] == json!(true) {
        s += &format!(
            "library:   {} (found by {})\n",
            str_of(&lib["path"]),
            str_of(&lib["how"])
        );
        s += &format!(
            "version:   NCCL {} (code {})\n",
            str_of(&lib["version"]),
            lib["version_code"]
        );
        s += &format!(
            "load time: {:.3} ms, {:.3} ms with discovery; {} of the {} functions of nccl.h exported\n",
            lib["load_ms"].as_f64().unwrap_or(0.0),
            lib["load_with_discovery_ms"].as_f64().unwrap_or(0.0),
            lib["functions_exported"],
            lib["functions_known"]
        );
        if lib["how"] == json!("search") {
            s += "search:    ";
            s += &lib["search_order"]
                .as_array()
                .into_iter()
                .flatten()
                .map(str_of)
                .collect::<Vec<_>>()
                .join(", ");
            s += "\n";
        }
        s += "features:\n";
        for f in lib["features"].as_array().into_iter().flatten() {
            let state = match f.get("reason") {
                None => "available".to_owned(),
                Some(why) => format!("unavailable: {}", str_of(why)),
            };
            s += &format!(
                "  {:<20} since {:<7} {state}\n",
                str_of(&f["name"]),
                str_of(&f["since"])
            );
        }
    } else {
        s += &format!("library:   none found ({})\n", str_of(&lib["error"]));
        for t in lib["tried"].as_array().into_iter().flatten() {
            s += &format!(
                "  tried {}: {}\n",
                str_of(&t["place"]),
                str_of(&t["reason"])
            );
        }
        s += &format!("  {GET_ONE}\n");
    }
    let g = &r["gpu"];
    match g.get("error") {
        Some(e) => s += &format!("gpus:      {}\n", str_of(e)),
        None => {
            s += "gpus:\n";
            for d in g["gpus"].as_array().into_iter().flatten() {
                let gib = d["memory_bytes"].as_f64().unwrap_or(0.0) / f64::from(1u32 << 30);
                s += &format!("  {}: {} ({gib:.1} GiB)\n", d["index"], str_of(&d["name"]));
            }
            let nvml = str_of(&g["nvml"]);
            for l in g["links"].as_array().into_iter().flatten() {
                let nv = match (l["nvlinks"].as_u64(), l["through_nvswitch"].as_bool()) {
                    (Some(n), Some(true)) => format!("; {n} NVLinks through NVSwitch"),
                    (Some(n), _) => format!("; {n} NVLinks"),
                    (None, _) if nvml == "ok" => "; no NVLink (NVML)".to_owned(),
                    (None, _) => format!("; NVLink count unknown: {nvml}"),
                };
                s += &format!(
                    "  {} <-> {}: {} (P2P rank {}){nv}\n",
                    l["a"],
                    l["b"],
                    str_of(&l["kind"]),
                    l["perf_rank"]
                );
            }
        }
    }
    let env = r["environment"].as_object();
    if env.is_none_or(|m| m.is_empty()) {
        s += "variables: no NCCL_*, OXCCL_* or TORCH_NCCL_* set\n";
    } else {
        s += "variables:\n";
        for (k, v) in env.into_iter().flatten() {
            s += &format!("  {}={}\n", Escaped(k), str_of(v));
        }
    }
    let notes = r["settings"].as_array().filter(|a| !a.is_empty());
    if let Some(notes) = notes {
        s += "settings:  what the process group makes of them (docs/ENVIRONMENT.md)\n";
        for n in notes {
            s += &format!("  {}\n", str_of(&n["text"]));
        }
    }
    let l = &r["launcher"];
    if l["recognised"].is_null() {
        s += &format!("launcher:  none recognised ({})\n", str_of(&l["note"]));
    } else {
        let local = match &l["local_rank"] {
            serde_json::Value::Null => "not given by the launcher".to_owned(),
            v => v.to_string(),
        };
        s += &format!(
            "launcher:  {}: rank {} of {}, local rank {local}\n",
            str_of(&l["recognised"]),
            l["rank"],
            l["world_size"],
        );
        let addr = match &l["master_addr"] {
            Value::Null => "MASTER_ADDR unset".to_owned(),
            v => str_of(v),
        };
        let port = match &l["master_port_from"] {
            Value::Null => "MASTER_PORT unset".to_owned(),
            from => format!("{} ({})", l["master_port"], str_of(from)),
        };
        s += &format!("  store:   rank 0's at {addr}, port {port}\n");
    }
    s
}

/// A JSON string's text (other values as JSON), escaped for a terminal: the report's strings
/// come from outside (paths, variables, device names; see `oxccl::core::text`).
pub fn str_of(v: &Value) -> String {
    match v.as_str() {
        Some(s) => Escaped(s).to_string(),
        None => JsonSafe(&v.to_string()).to_string(),
    }
}

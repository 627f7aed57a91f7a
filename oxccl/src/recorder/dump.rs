//! One rank's flight-recorder dump, in PyTorch's format: the same keys, values and nesting as
//! its `FlightRecorder::dump` (pickled) and `dump_json`, so PyTorch's analyzer reads oxccl's
//! dumps.
//!
//! Two files per rank, written side by side in one directory, each atomically (a hidden temp
//! file renamed into place, so a reader never sees half a dump):
//! - `trace_<rank>`: the pickle, named as PyTorch's default writer names it
//!   (`TORCH_FR_DUMP_TEMP_FILE` + rank); `torchfrtrace DIR` loads these.
//! - `rank_<rank>.json`: the JSON form, read by `oxccl trace DIR`. Its name must not contain
//!   the pickles' prefix: torchfrtrace takes every file whose name contains `trace_` as a dump
//!   and parses the rest of its name as the rank, so `trace_0.json` would stop it.

use super::json::to_json;
use super::note::{DumpNote, NOTE_KEY};
use super::pickle::to_pickle;
use super::value::DumpValue;
use oxccl_core::DataType;
use oxccl_rules::recorder::{FlightRecorder, PgConfig, TraceEntry, TraceState};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The dump format written: PyTorch's current one (the rules' `TRACE_FORMAT_VERSION`). Its
/// field set is a superset of the older versions'; the analyzer picks its matching rules by
/// this number (from 2.7 it matches coalesced collectives, not only coalesced p2p).
pub const DUMP_FORMAT_VERSION: &str = oxccl_rules::recorder::TRACE_FORMAT_VERSION;

/// The prefix of the pickled dumps' names (`trace_<rank>`).
pub const PICKLE_PREFIX: &str = "trace_";

/// The variable naming the dump directory.
pub const TRACE_DIR_VAR: &str = "OXCCL_TRACE_DIR";

/// Who wrote a dump. Besides PyTorch's keys, the dump carries these at its top level
/// (`rank`, `world_size`, `hostname`, `pid`, and the note under `oxccl_dump`), so that `oxccl trace` knows which ranks never
/// dumped; PyTorch's analyzer ignores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpMeta {
    /// The global rank of the process dumping.
    pub rank: u32,
    /// The number of ranks of the job.
    pub world_size: u32,
    /// The host it runs on.
    pub hostname: String,
    /// Its process id.
    pub pid: u32,
    /// The communication library's version ("2.21.5"; empty when unknown), PyTorch's
    /// `comm_lib_version`.
    pub comm_lib_version: String,
    /// What it knew of the other ranks' dumps when it wrote this one (see [`DumpNote`]);
    /// `None`: no note is written.
    pub note: Option<DumpNote>,
}

impl DumpMeta {
    /// `rank` of `world_size`, with this host's name and this process's id.
    pub fn new(rank: u32, world_size: u32) -> DumpMeta {
        DumpMeta {
            rank,
            world_size,
            hostname: hostname(),
            pid: std::process::id(),
            comm_lib_version: String::new(),
            note: None,
        }
    }
}

/// The two files of one dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpFiles {
    /// `rank_<rank>.json`.
    pub json: PathBuf,
    /// `trace_<rank>` (pickle).
    pub pickle: PathBuf,
}

/// The name of a rank's JSON dump.
pub fn json_file_name(rank: u32) -> String {
    format!("rank_{rank}.json")
}

/// The name of a rank's pickled dump.
pub fn pickle_file_name(rank: u32) -> String {
    format!("{PICKLE_PREFIX}{rank}")
}

/// The dump directory from `OXCCL_TRACE_DIR`; `None` when unset or empty (no dumps).
pub fn dump_dir_from_env() -> Option<PathBuf> {
    std::env::var_os(TRACE_DIR_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Writes `meta.rank`'s dump of `recorder` into `dir` (created if needed): the JSON and the
/// pickled form, each atomically. With `only_active`, only entries not seen completed (as
/// PyTorch's `onlyActive`); `pg_status` always covers the whole ring.
///
/// Errors: `InvalidInput` naming the argument for an empty `dir`, a zero world size or a rank
/// outside it; otherwise the I/O error of the step that failed (no temp file is left behind).
pub fn write_dump(
    dir: &Path,
    meta: &DumpMeta,
    recorder: &FlightRecorder,
    only_active: bool,
) -> io::Result<DumpFiles> {
    if dir.as_os_str().is_empty() {
        return Err(invalid("dir: empty path"));
    }
    if meta.world_size == 0 {
        return Err(invalid("meta.world_size: must be at least 1"));
    }
    if meta.rank >= meta.world_size {
        return Err(invalid(&format!(
            "meta.rank: {} is outside world size {}",
            meta.rank, meta.world_size
        )));
    }
    std::fs::create_dir_all(dir)?;
    let files = DumpFiles {
        json: dir.join(json_file_name(meta.rank)),
        pickle: dir.join(pickle_file_name(meta.rank)),
    };
    let pickled = to_pickle(&dump_value(meta, recorder, only_active, Form::Pickle));
    let json = dump_json(meta, recorder, only_active);
    write_atomic(&files.pickle, &pickled, meta.rank, "pickle")?;
    write_atomic(&files.json, json.as_bytes(), meta.rank, "json")?;
    Ok(files)
}

/// The JSON form of `meta.rank`'s dump of `recorder`: the text [`write_dump`] writes into
/// `rank_<rank>.json`.
pub fn dump_json(meta: &DumpMeta, recorder: &FlightRecorder, only_active: bool) -> String {
    to_json(&dump_value(meta, recorder, only_active, Form::Json))
}

/// Where PyTorch's two writers differ, and oxccl follows each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// Times not seen are `None`; `pg_status` values are ints.
    Pickle,
    /// Times not seen are 0; `pg_status` values are decimal strings.
    Json,
}

/// The dump as one value (both forms are built from it).
pub(crate) fn dump_value(
    meta: &DumpMeta,
    recorder: &FlightRecorder,
    only_active: bool,
    form: Form,
) -> DumpValue {
    let pgs = pg_configs(meta, recorder);
    let entries: Vec<DumpValue> = recorder
        .dump(only_active)
        .iter()
        .map(|e| entry_value(e, &pgs, form))
        .collect();
    let mut top = vec![
        ("version", DumpValue::str(DUMP_FORMAT_VERSION)),
        ("comm_lib_version", DumpValue::str(&*meta.comm_lib_version)),
        ("pg_config", pg_config_value(&pgs)),
        ("pg_status", pg_status_value(recorder, &pgs, form)),
        ("entries", DumpValue::List(entries)),
        ("rank", DumpValue::int(meta.rank)),
        ("world_size", DumpValue::int(meta.world_size)),
        ("hostname", DumpValue::str(&*meta.hostname)),
        ("pid", DumpValue::int(meta.pid)),
    ];
    if let Some(note) = &meta.note {
        top.push((NOTE_KEY, note.value()));
    }
    DumpValue::dict(top)
}

/// The recorder's groups, plus one for every group id an entry names that was never added
/// (name = its id, desc "undefined", all ranks): the analyzer needs every entry's group in
/// `pg_config`.
fn pg_configs(meta: &DumpMeta, recorder: &FlightRecorder) -> Vec<PgConfig> {
    let mut pgs: Vec<PgConfig> = recorder.pg_configs().to_vec();
    for e in recorder.entries() {
        if !pgs.iter().any(|p| p.id == e.record.pg_id) {
            pgs.push(PgConfig {
                id: e.record.pg_id,
                name: e.record.pg_id.to_string(),
                desc: "undefined".into(),
                ranks: (0..meta.world_size).collect(),
            });
        }
    }
    pgs
}

fn pg_config_value(pgs: &[PgConfig]) -> DumpValue {
    DumpValue::Dict(
        pgs.iter()
            .map(|p| {
                let info = DumpValue::dict([
                    ("name", DumpValue::str(&*p.name)),
                    ("desc", DumpValue::str(&*p.desc)),
                    ("ranks", DumpValue::Str(ranks_text(&p.ranks))),
                ]);
                (DumpValue::str(&*p.name), info)
            })
            .collect(),
    )
}

/// PyTorch writes a group's ranks as the text of a list ("[0, 1]"); the analyzer evaluates it.
fn ranks_text(ranks: &[u32]) -> String {
    let parts: Vec<String> = ranks.iter().map(u32::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// Per group id: the last collective seq enqueued, seen started and seen completed (-1 for
/// none), from the ring (PyTorch keeps these counters in the group; the ring holds the same
/// facts for every op it still has).
fn pg_status_value(recorder: &FlightRecorder, pgs: &[PgConfig], form: Form) -> DumpValue {
    let status = |pg: u64, at_least: TraceState| -> i128 {
        recorder
            .entries()
            .filter(|e| e.record.pg_id == pg && !e.record.is_p2p && e.state >= at_least)
            .map(|e| i128::from(e.record.collective_seq))
            .max()
            .unwrap_or(-1)
    };
    let num = |v: i128| match form {
        Form::Pickle => DumpValue::Int(v),
        Form::Json => DumpValue::Str(v.to_string()),
    };
    DumpValue::Dict(
        pgs.iter()
            .map(|p| {
                let s = DumpValue::dict([
                    (
                        "last_enqueued_collective",
                        num(status(p.id, TraceState::Scheduled)),
                    ),
                    (
                        "last_started_collective",
                        num(status(p.id, TraceState::Started)),
                    ),
                    (
                        "last_completed_collective",
                        num(status(p.id, TraceState::Completed)),
                    ),
                ]);
                (DumpValue::Str(p.id.to_string()), s)
            })
            .collect(),
    )
}

fn entry_value(e: &TraceEntry, pgs: &[PgConfig], form: Form) -> DumpValue {
    let r = &e.record;
    let (name, desc) = pgs
        .iter()
        .find(|p| p.id == r.pg_id)
        .map(|p| (p.name.clone(), p.desc.clone()))
        .unwrap_or_else(|| (r.pg_id.to_string(), "undefined".into()));
    let time = |t: Option<u64>| match (t, form) {
        (Some(t), _) => DumpValue::int(t),
        (None, Form::Pickle) => DumpValue::None,
        (None, Form::Json) => DumpValue::Int(0),
    };
    let sizes = |ts: &[oxccl_rules::recorder::TensorMeta]| {
        DumpValue::List(
            ts.iter()
                .map(|t| DumpValue::List(t.sizes.iter().map(|&s| DumpValue::int(s)).collect()))
                .collect(),
        )
    };
    let dtypes = |ts: &[oxccl_rules::recorder::TensorMeta]| {
        DumpValue::List(
            ts.iter()
                .map(|t| DumpValue::str(torch_dtype_name(t.dtype)))
                .collect(),
        )
    };
    let mut items = vec![
        ("record_id", DumpValue::int(e.id)),
        ("pg_id", DumpValue::int(r.pg_id)),
        (
            "process_group",
            DumpValue::Tuple(vec![DumpValue::Str(name), DumpValue::Str(desc)]),
        ),
        ("collective_seq_id", DumpValue::int(r.collective_seq)),
        ("p2p_seq_id", DumpValue::int(r.p2p_seq)),
        ("op_id", DumpValue::int(r.op_id)),
        ("profiling_name", DumpValue::str(&*r.profiling_name)),
        ("time_created_ns", DumpValue::int(r.time_created_ns)),
    ];
    if let Some(d) = e.duration_ns {
        // PyTorch keeps the duration as a float of milliseconds.
        items.push(("duration_ms", DumpValue::Float(d as f64 / 1e6)));
    }
    items.extend([
        ("input_sizes", sizes(&r.inputs)),
        ("input_dtypes", dtypes(&r.inputs)),
        ("output_sizes", sizes(&r.outputs)),
        ("output_dtypes", dtypes(&r.outputs)),
        ("state", DumpValue::str(e.state.name())),
        (
            "time_discovered_started_ns",
            time(e.time_discovered_started_ns),
        ),
        (
            "time_discovered_completed_ns",
            time(e.time_discovered_completed_ns),
        ),
        ("retired", DumpValue::Bool(e.retired)),
        ("timeout_ms", DumpValue::int(r.timeout_ms)),
        ("is_p2p", DumpValue::Bool(r.is_p2p)),
        // No stack capture: an empty list, as PyTorch writes without stack traces.
        ("frames", DumpValue::List(Vec::new())),
    ]);
    DumpValue::dict(items)
}

/// PyTorch's name of an element type (`c10::toString(ScalarType)`), as dumps write dtypes.
pub fn torch_dtype_name(d: DataType) -> &'static str {
    match d {
        DataType::Int8 => "Char",
        DataType::Uint8 => "Byte",
        DataType::Int32 => "Int",
        DataType::Uint32 => "UInt32",
        DataType::Int64 => "Long",
        DataType::Uint64 => "UInt64",
        DataType::Float16 => "Half",
        DataType::Float32 => "Float",
        DataType::Float64 => "Double",
        DataType::Bfloat16 => "BFloat16",
        DataType::Float8E4M3 => "Float8_e4m3fn",
        DataType::Float8E5M2 => "Float8_e5m2",
    }
}

fn write_atomic(path: &Path, bytes: &[u8], rank: u32, kind: &str) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    // Hidden, and ending in letters: neither analyzer takes a temp file for a dump.
    let tmp = dir.join(format!(
        ".oxccl-part-{}-{rank}-{kind}.tmp",
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.to_string())
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname writes at most that many
    // and we read only up to the first NUL (or the whole buffer if it truncated without one).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
#[path = "dump_tests.rs"]
mod tests;

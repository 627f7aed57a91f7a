//! Reading JSON dumps back: one [`RankDump`] per rank, from oxccl's writer (and, field for
//! field, PyTorch's `dump_json`, whose files carry no rank: it is then taken from the name).

use super::note::parse_note;
use crate::recorder::{DumpNote, NOTE_KEY};
use oxccl_core::text::Escaped;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One entry of a dump, as the analysis needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpEntry {
    /// `record_id`.
    pub record_id: u64,
    /// `pg_id`.
    pub pg_id: u64,
    /// `process_group[0]`: the group's name.
    pub pg_name: String,
    /// `process_group[1]`: its description.
    pub pg_desc: String,
    /// `collective_seq_id`.
    pub collective_seq: u64,
    /// `p2p_seq_id`.
    pub p2p_seq: u64,
    /// `op_id`.
    pub op_id: u64,
    /// `profiling_name` ("nccl:all_reduce").
    pub profiling_name: String,
    /// `input_sizes`.
    pub input_sizes: Vec<Vec<u64>>,
    /// `input_dtypes`.
    pub input_dtypes: Vec<String>,
    /// `output_sizes`.
    pub output_sizes: Vec<Vec<u64>>,
    /// `output_dtypes`.
    pub output_dtypes: Vec<String>,
    /// `state`: "scheduled", "started" or "completed".
    pub state: String,
    /// `is_p2p`.
    pub is_p2p: bool,
    /// `retired`.
    pub retired: bool,
    /// `time_created_ns`.
    pub time_created_ns: u64,
    /// `timeout_ms`.
    pub timeout_ms: u64,
}

impl DumpEntry {
    /// Whether it was seen completed.
    pub fn completed(&self) -> bool {
        self.state == "completed"
    }
}

/// A group as one rank's `pg_config` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpPg {
    /// Its name (the key).
    pub name: String,
    /// Its description.
    pub desc: String,
    /// Its global ranks.
    pub ranks: Vec<u32>,
}

/// One rank's dump.
#[derive(Debug, Clone, PartialEq)]
pub struct RankDump {
    /// The rank that wrote it.
    pub rank: u32,
    /// The job's world size, when the dump says (oxccl's do).
    pub world_size: Option<u32>,
    /// The host, when the dump says.
    pub hostname: Option<String>,
    /// The format version.
    pub version: String,
    /// The groups it knows.
    pub pgs: Vec<DumpPg>,
    /// Its entries, oldest first.
    pub entries: Vec<DumpEntry>,
    /// What it knew of the other ranks' dumps (oxccl's dumps carry it).
    pub note: Option<DumpNote>,
}

/// Why a dump could not be read. `Display` escapes what came from the file (a group's name
/// in a field's path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON.
    Json(String),
    /// A field is missing or has the wrong type.
    Field(String, &'static str),
    /// No rank in the dump nor in the file name.
    NoRank,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Json(e) => write!(f, "not JSON: {}", Escaped(e)),
            ParseError::Field(field, why) => write!(f, "field `{}`: {why}", Escaped(field)),
            ParseError::NoRank => {
                f.write_str("no `rank` field and no rank at the end of the file name")
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// Parses one JSON dump; `fallback_rank` (from the file name) when it carries no `rank`.
pub fn parse_dump(text: &str, fallback_rank: Option<u32>) -> Result<RankDump, ParseError> {
    let v: Value = serde_json::from_str(text).map_err(|e| ParseError::Json(e.to_string()))?;
    let top = v
        .as_object()
        .ok_or(ParseError::Field("(top level)".into(), "not an object"))?;
    let rank = match top.get("rank") {
        Some(r) => as_u32(r, "rank")?,
        None => fallback_rank.ok_or(ParseError::NoRank)?,
    };
    let world_size = top
        .get("world_size")
        .map(|w| as_u32(w, "world_size"))
        .transpose()?;
    let version = match top.get("version") {
        Some(Value::String(s)) => s.clone(),
        _ => {
            return Err(ParseError::Field(
                "version".into(),
                "missing or not a string",
            ))
        }
    };
    let mut pgs = Vec::new();
    if let Some(cfg) = top.get("pg_config") {
        let cfg = cfg
            .as_object()
            .ok_or(ParseError::Field("pg_config".into(), "not an object"))?;
        for (key, info) in cfg {
            let field = |f: &str| format!("pg_config.{key}.{f}");
            let desc = info
                .get("desc")
                .and_then(Value::as_str)
                .ok_or_else(|| ParseError::Field(field("desc"), "missing or not a string"))?;
            let ranks = info
                .get("ranks")
                .and_then(Value::as_str)
                .and_then(parse_ranks)
                .ok_or_else(|| {
                    ParseError::Field(field("ranks"), "not a list text like \"[0, 1]\"")
                })?;
            pgs.push(DumpPg {
                name: key.clone(),
                desc: desc.to_string(),
                ranks,
            });
        }
    }
    let entries = match top.get("entries") {
        // PyTorch's JSON writer leaves the key out when there are no entries.
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, e)| parse_entry(e, i))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ParseError::Field("entries".into(), "not a list")),
    };
    Ok(RankDump {
        rank,
        world_size,
        hostname: top
            .get("hostname")
            .and_then(Value::as_str)
            .map(str::to_string),
        version,
        pgs,
        entries,
        note: top.get(NOTE_KEY).and_then(parse_note),
    })
}

fn parse_entry(e: &Value, i: usize) -> Result<DumpEntry, ParseError> {
    let name = |f: &str| format!("entries[{i}].{f}");
    let get = |f: &str| {
        e.get(f)
            .ok_or_else(|| ParseError::Field(name(f), "missing"))
    };
    let uint = |f: &str| -> Result<u64, ParseError> {
        get(f)?
            .as_u64()
            .ok_or_else(|| ParseError::Field(name(f), "not a non-negative integer"))
    };
    // Optional in older formats: 0 / false / empty when absent.
    let opt_uint = |f: &str| e.get(f).and_then(Value::as_u64).unwrap_or(0);
    let text = |f: &str| -> Result<String, ParseError> {
        get(f)?
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ParseError::Field(name(f), "not a string"))
    };
    let pg = get("process_group")?
        .as_array()
        .filter(|a| a.len() == 2)
        .ok_or_else(|| ParseError::Field(name("process_group"), "not a [name, desc] pair"))?;
    let pg_text = |v: &Value| {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| ParseError::Field(name("process_group"), "not strings"))
    };
    let sizes = |f: &str| -> Result<Vec<Vec<u64>>, ParseError> {
        match e.get(f) {
            None => Ok(Vec::new()),
            Some(v) => v
                .as_array()
                .and_then(|ts| {
                    ts.iter()
                        .map(|t| t.as_array()?.iter().map(Value::as_u64).collect())
                        .collect()
                })
                .ok_or_else(|| ParseError::Field(name(f), "not a list of lists of sizes")),
        }
    };
    let dtypes = |f: &str| -> Result<Vec<String>, ParseError> {
        match e.get(f) {
            None => Ok(Vec::new()),
            Some(v) => v
                .as_array()
                .and_then(|ds| ds.iter().map(|d| d.as_str().map(str::to_string)).collect())
                .ok_or_else(|| ParseError::Field(name(f), "not a list of strings")),
        }
    };
    let state = text("state")?;
    if !matches!(state.as_str(), "scheduled" | "started" | "completed") {
        return Err(ParseError::Field(
            name("state"),
            "not scheduled, started or completed",
        ));
    }
    Ok(DumpEntry {
        record_id: uint("record_id")?,
        pg_id: uint("pg_id")?,
        pg_name: pg_text(&pg[0])?,
        pg_desc: pg_text(&pg[1])?,
        collective_seq: uint("collective_seq_id")?,
        p2p_seq: uint("p2p_seq_id")?,
        op_id: opt_uint("op_id"),
        profiling_name: text("profiling_name")?,
        input_sizes: sizes("input_sizes")?,
        input_dtypes: dtypes("input_dtypes")?,
        output_sizes: sizes("output_sizes")?,
        output_dtypes: dtypes("output_dtypes")?,
        state,
        is_p2p: e.get("is_p2p").and_then(Value::as_bool).unwrap_or(false),
        retired: e.get("retired").and_then(Value::as_bool).unwrap_or(false),
        time_created_ns: opt_uint("time_created_ns"),
        timeout_ms: opt_uint("timeout_ms"),
    })
}

fn as_u32(v: &Value, field: &str) -> Result<u32, ParseError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| ParseError::Field(field.into(), "not a 32-bit non-negative integer"))
}

/// "[0, 1, 2]" → [0, 1, 2]; also "[]".
fn parse_ranks(s: &str) -> Option<Vec<u32>> {
    let inner = s.trim().strip_prefix('[')?.strip_suffix(']')?.trim();
    if inner.is_empty() {
        return Some(Vec::new());
    }
    inner.split(',').map(|p| p.trim().parse().ok()).collect()
}

/// The digits ending a file stem ("rank_12.json" → 12).
fn rank_from_name(path: &Path) -> Option<u32> {
    let stem = path.file_stem()?.to_str()?;
    let digits: String = stem
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// The largest file taken for a dump: a full ring of 2,000 entries is well under 2 MiB; far
/// larger files are not dumps, and reading them whole could exhaust memory.
pub const MAX_DUMP_BYTES: u64 = 256 << 20;

/// What reading a directory gave: the dumps (by rank), and the files that could not be read.
#[derive(Debug, Default)]
pub struct DirDumps {
    /// The dumps read, in rank order.
    pub dumps: Vec<RankDump>,
    /// Files that looked like dumps (`*.json`) but could not be read or parsed, with why.
    pub unreadable: Vec<(PathBuf, String)>,
}

/// Reads every `*.json` file directly in `dir` as a dump (hidden files, such as a writer's
/// temp files, are skipped). Two files of one rank: the later one in name order is reported
/// unreadable. Fails only when `dir` itself cannot be listed.
pub fn read_dump_dir(dir: &Path) -> std::io::Result<DirDumps> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    paths.sort();
    let mut out = DirDumps::default();
    for p in paths {
        let parsed = std::fs::metadata(&p)
            .map_err(|e| e.to_string())
            .and_then(|m| {
                if !m.is_file() {
                    // A FIFO named like a dump would block the read for ever.
                    Err("not a regular file".to_string())
                } else if m.len() > MAX_DUMP_BYTES {
                    Err(format!("{} bytes, more than a dump holds", m.len()))
                } else {
                    std::fs::read_to_string(&p).map_err(|e| e.to_string())
                }
            })
            .and_then(|t| parse_dump(&t, rank_from_name(&p)).map_err(|e| e.to_string()));
        match parsed {
            Ok(d) if out.dumps.iter().any(|o| o.rank == d.rank) => out
                .unreadable
                .push((p, format!("a second dump of rank {}", d.rank))),
            Ok(d) => out.dumps.push(d),
            Err(e) => out.unreadable.push((p, e)),
        }
    }
    out.dumps.sort_by_key(|d| d.rank);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_named_like_a_dump_is_reported_not_read() {
        let dir = std::env::temp_dir().join(format!("oxccl-trace-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("rank_0.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        // On a thread, so a read that blocks fails the test instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.clone();
        std::thread::spawn(move || {
            let _ = tx.send(read_dump_dir(&d).map(|r| r.unreadable));
        });
        let unreadable = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the FIFO is passed over, not read")
            .unwrap();
        assert_eq!(unreadable, vec![(fifo, "not a regular file".to_string())]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ranks_text_and_names() {
        assert_eq!(parse_ranks("[0, 1, 2]"), Some(vec![0, 1, 2]));
        assert_eq!(parse_ranks("[]"), Some(vec![]));
        assert_eq!(parse_ranks("[0, x]"), None);
        assert_eq!(parse_ranks("0, 1"), None);
        assert_eq!(rank_from_name(Path::new("/d/rank_12.json")), Some(12));
        assert_eq!(
            rank_from_name(Path::new("/d/nccl_trace_rank_3.json")),
            Some(3)
        );
        assert_eq!(rank_from_name(Path::new("/d/x.json")), None);
    }

    #[test]
    fn bad_dumps_name_the_field() {
        assert!(matches!(parse_dump("{", None), Err(ParseError::Json(_))));
        assert_eq!(
            parse_dump(r#"{"version":"2.10"}"#, None),
            Err(ParseError::NoRank)
        );
        assert_eq!(
            parse_dump(r#"{"rank":0}"#, None),
            Err(ParseError::Field(
                "version".into(),
                "missing or not a string"
            ))
        );
        let bad_state = r#"{"rank":0,"version":"2.10","entries":[{"record_id":0,"pg_id":0,
            "process_group":["0","default_pg"],"collective_seq_id":1,"p2p_seq_id":0,
            "profiling_name":"nccl:all_reduce","state":"lost"}]}"#;
        assert_eq!(
            parse_dump(bad_state, None),
            Err(ParseError::Field(
                "entries[0].state".into(),
                "not scheduled, started or completed"
            ))
        );
        let bad_sizes = bad_state
            .replace("\"lost\"", "\"started\"")
            .replace("\"state\"", "\"input_sizes\":[[-1]],\"state\"");
        assert_eq!(
            parse_dump(&bad_sizes, None),
            Err(ParseError::Field(
                "entries[0].input_sizes".into(),
                "not a list of lists of sizes"
            ))
        );
        // PyTorch's own JSON (no rank, no entries key when empty) takes the name's rank.
        let d = parse_dump(
            r#"{"version":"2.10","pg_config":{},"pg_status":{}}"#,
            Some(4),
        )
        .unwrap();
        assert_eq!((d.rank, d.world_size, d.entries.len()), (4, None, 0));
    }
}

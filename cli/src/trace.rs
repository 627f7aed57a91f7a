//! `oxccl trace DIR`: reads every rank's flight-recorder dump in DIR (`rank_<r>.json`, written
//! by the process group on a timeout or on request) and says which ranks stopped and at which
//! collective, what the others were doing, mismatched collectives, ranks that never dumped, and
//! the culprits. In words, or with `--json` as one JSON object. The reading and the diagnosis
//! are the library's (`oxccl::recorder::reader`); this is the command around them.
//!
//! Exit codes: 0 no hang found, 1 a hang or a culprit found, 2 usage or unreadable dumps.

use clap::Args;
use oxccl::core::text::Escaped;
use oxccl::escaped_path;
use oxccl::recorder::reader::{analyze, read_dump_dir, render_text, report_json};
use oxccl::recorder::{DumpTrigger, DUMP_REQUEST_FILE};
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `oxccl trace`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  OXCCL_TRACE_DIR=/tmp/fr OXCCL_DUMP_ON_TIMEOUT=1 torchrun --nproc-per-node 8 train.py
                                      a job whose ranks dump to /tmp/fr on a timeout
  oxccl trace /tmp/fr --request       ask that job's ranks to dump now (a hang in progress)
  oxccl trace /tmp/fr                 which ranks stopped, at which collective, the culprits
  oxccl trace /tmp/fr --json | jq .culprits

Each rank's process group writes DIR/rank_<r>.json (and trace_<r> for PyTorch's torchfrtrace)
where OXCCL_TRACE_DIR says: on a collective's timeout with OXCCL_DUMP_ON_TIMEOUT=1, before
its error handling ends the process, and on --request.

Exit codes: 0 no hang found, 1 a hang or a culprit found, 2 usage, no dump or unreadable dumps.")]
pub struct TraceArgs {
    /// The dump directory (OXCCL_TRACE_DIR of the job).
    pub dir: PathBuf,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Ask every rank watching DIR to dump now (creates DIR/dump_request), then exit.
    #[arg(long, conflicts_with = "json")]
    pub request: bool,
}

/// Runs `oxccl trace`.
pub fn run(args: &TraceArgs) -> ExitCode {
    if args.request {
        return match DumpTrigger::request(&args.dir) {
            Ok(()) => {
                emit(&format!(
                    "dump requested: {}\n",
                    escaped_path(&args.dir.join(DUMP_REQUEST_FILE))
                ));
                ExitCode::SUCCESS
            }
            Err(e) => {
                warn(format!(
                    "oxccl trace: --request: {}: {e}",
                    escaped_path(&args.dir)
                ));
                ExitCode::from(2)
            }
        };
    }
    let read = match read_dump_dir(&args.dir) {
        Ok(r) => r,
        Err(e) => {
            warn(format!("oxccl trace: DIR {}: {e}", escaped_path(&args.dir)));
            return ExitCode::from(2);
        }
    };
    for (path, why) in &read.unreadable {
        warn(format!(
            "oxccl trace: unreadable dump {}: {}",
            escaped_path(path),
            Escaped(why)
        ));
    }
    if read.dumps.is_empty() {
        warn(format!(
            "oxccl trace: DIR {}: no readable dump (rank_<r>.json)",
            escaped_path(&args.dir)
        ));
        if read.unreadable.is_empty() {
            warn(how_dumps_are_made(&args.dir));
        }
        return ExitCode::from(2);
    }
    let analysis = analyze(&read.dumps);
    if args.json {
        let mut v = report_json(&analysis);
        if let Some(obj) = v.as_object_mut() {
            let bad: Vec<serde_json::Value> = read
                .unreadable
                .iter()
                .map(
                    |(p, why)| serde_json::json!({ "path": p.display().to_string(), "error": why }),
                )
                .collect();
            obj.insert("unreadable".into(), serde_json::Value::Array(bad));
        }
        emit(&format!("{}\n", crate::shown::json(&v)));
    } else {
        emit(&render_text(&analysis));
    }
    if !read.unreadable.is_empty() {
        ExitCode::from(2)
    } else if analysis.hang_found() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// How a job writes dumps into `dir`, for a folder that has none: the variables its ranks
/// need and the request that makes running ones dump.
fn how_dumps_are_made(dir: &std::path::Path) -> String {
    use oxccl::recorder::TRACE_DIR_VAR;
    use oxccl::rules::env::{ASYNC_ERROR_HANDLING, DUMP_ON_TIMEOUT, TRACE_BUFFER_SIZE};
    let dir = escaped_path(dir);
    format!(
        "oxccl trace: dumps are written there by a job whose ranks run with {TRACE_DIR_VAR}={dir}:
  each rank's process group dumps its flight recorder on a collective's timeout when
  {DUMP_ON_TIMEOUT}=1, before its error handling ({ASYNC_ERROR_HANDLING}) ends the process,
  and when asked while the job runs: oxccl trace {dir} --request (touches {dir}/{DUMP_REQUEST_FILE}).
  The recorder is on unless {TRACE_BUFFER_SIZE}=0."
    )
}

/// Writes the report to stdout; a closed pipe (`oxccl trace DIR | head`) is not an error.
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Writes a diagnostic line to stderr; a closed stderr is not an error either.
fn warn(line: String) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

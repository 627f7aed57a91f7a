//! `oxccl perf` and `oxccl ping-pong` with stdout a pipe (a log, `| tee`, a launcher's
//! capture), on the mock world: the table's head comes at once and each row as its size ends,
//! not all at the end; and a stderr that is not a terminal gets plain progress lines.
//!
//! The sweeps end with a size far larger than the others, so that most of the run comes after
//! the first rows: the assertions compare arrival times with the run's length, which a loaded
//! machine stretches alike.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Instant;

/// What a run wrote: each stdout line with the seconds from the start at which it was read,
/// the seconds at which stdout closed (the run's end), the exit code and stderr.
struct Timed {
    lines: Vec<(f64, String)>,
    end: f64,
    code: Option<i32>,
    stderr: String,
}

impl Timed {
    /// The arrival time of the first line that `is` picks, and of the last.
    fn first_last(&self, is: impl Fn(&str) -> bool) -> (f64, f64) {
        let t: Vec<f64> = self
            .lines
            .iter()
            .filter(|(_, l)| is(l))
            .map(|(t, _)| *t)
            .collect();
        (t[0], t[t.len() - 1])
    }

    fn text(&self) -> String {
        self.lines
            .iter()
            .map(|(t, l)| format!("{t:7.3} {l}\n"))
            .collect()
    }
}

/// Runs the tool with stdout and stderr piped, reading stdout line by line as it comes.
fn timed(args: &[&str]) -> Timed {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("oxccl starts");
    let mut err = child.stderr.take().expect("stderr piped");
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).expect("stderr reads");
        s
    });
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().expect("stdout piped")).lines() {
        lines.push((start.elapsed().as_secs_f64(), line.expect("stdout is text")));
    }
    let end = start.elapsed().as_secs_f64();
    let code = child.wait().expect("oxccl ends").code();
    Timed {
        lines,
        end,
        code,
        stderr: stderr.join().expect("stderr thread"),
    }
}

#[test]
fn perf_prints_its_head_at_once_and_each_row_as_its_size_ends() {
    // 8 B to 16 MiB by ×8: the last size holds most of the run's work.
    let run = timed(&[
        "perf",
        "all_reduce",
        "--backend",
        "mock",
        "-b",
        "8",
        "-e",
        "16M",
        "-f",
        "8",
        "-n",
        "6",
        "-w",
        "1",
        "-c",
        "0",
    ]);
    let text = run.text();
    assert_eq!(run.code, Some(0), "{text}{}", run.stderr);
    assert!(run.lines[0].1.starts_with("# mock world"), "{text}");
    let is_row = |l: &str| l.trim_start().starts_with("pg ");
    let rows: Vec<&str> = run
        .lines
        .iter()
        .map(|(_, l)| l.as_str())
        .filter(|l| is_row(l))
        .collect();
    assert_eq!(rows.len(), 8, "{text}");
    let sizes: Vec<&str> = rows
        .iter()
        .map(|r| r.split_whitespace().nth(2).unwrap_or_default())
        .collect();
    assert_eq!(
        sizes,
        ["8", "64", "512", "4096", "32768", "262144", "2097152", "16777216"]
    );
    // The head and the column heads come before any measuring ends.
    let heads = run.lines.iter().take_while(|(_, l)| !is_row(l)).count();
    assert_eq!(
        heads, 4,
        "where it runs, then 3 lines of column heads: {text}"
    );
    let head = run.lines[heads - 1].0;
    let (first_row, last_row) = run.first_last(is_row);
    assert!(
        head < run.end / 4.0,
        "the head came {head:.2} s into a {:.2} s run:\n{text}",
        run.end
    );
    // The first rows come while the largest size is still to run, which takes most of it.
    assert!(
        first_row < run.end / 2.0,
        "the first row came {first_row:.2} s into a {:.2} s run:\n{text}",
        run.end
    );
    assert!(
        last_row - first_row > run.end / 4.0,
        "the rows came together, from {first_row:.2} s to {last_row:.2} s of {:.2} s:\n{text}",
        run.end
    );
    // The table's end follows the last row.
    let last = &run.lines[run.lines.len() - 1].1;
    assert!(last.starts_with("# wrong elements: 0"), "{text}");
    // Stderr, not a terminal, gets progress lines only (10 s apart: a loaded machine may
    // take that long).
    assert!(
        run.stderr
            .lines()
            .all(|l| l.starts_with("# oxccl perf: all_reduce ")),
        "{}",
        run.stderr
    );
}

#[test]
fn ping_pong_prints_its_head_at_once_and_each_row_as_its_size_ends() {
    // 8 B to 16 MiB by ×8, a thousand rounds each: the last size holds most of the run.
    let run = timed(&[
        "ping-pong",
        "--backend",
        "mock",
        "-b",
        "8",
        "-e",
        "16M",
        "-f",
        "8",
        "-n",
        "1000",
        "-w",
        "1",
    ]);
    let text = run.text();
    assert_eq!(run.code, Some(0), "{text}{}", run.stderr);
    let is_row = |l: &str| {
        l.split_whitespace()
            .next()
            .is_some_and(|w| w.parse::<u64>().is_ok())
    };
    let heads = run.lines.iter().take_while(|(_, l)| !is_row(l)).count();
    assert_eq!(heads, 3, "the mock world, the unit, the columns: {text}");
    assert!(run.lines[1].1.starts_with("# half round trip"), "{text}");
    let rows = run.lines.iter().filter(|(_, l)| is_row(l)).count();
    assert_eq!(rows, 8, "{text}");
    let head = run.lines[heads - 1].0;
    let (first_row, last_row) = run.first_last(is_row);
    assert!(
        head < run.end / 4.0,
        "head at {head:.2} s of {:.2} s:\n{text}",
        run.end
    );
    assert!(
        first_row < run.end / 2.0,
        "the first row came {first_row:.2} s into a {:.2} s run:\n{text}",
        run.end
    );
    assert!(
        last_row - first_row > run.end / 4.0,
        "the rows came together, from {first_row:.2} s to {last_row:.2} s of {:.2} s:\n{text}",
        run.end
    );
}

#[test]
fn a_stderr_that_is_not_a_terminal_gets_plain_progress_lines() {
    // --progress-every 0: a line per size (10 s apart by default, too long for a test).
    let run = timed(&[
        "perf",
        "all_reduce",
        "all_gather",
        "--backend",
        "mock",
        "-b",
        "8",
        "-e",
        "64",
        "-n",
        "1",
        "-w",
        "0",
        "--progress-every",
        "0",
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    let want = [
        "all_reduce 8B  1/8 sizes",
        "all_reduce 16B  2/8 sizes",
        "all_reduce 32B  3/8 sizes",
        "all_reduce 64B  4/8 sizes",
        "all_gather 8B  5/8 sizes",
        "all_gather 16B  6/8 sizes",
        "all_gather 32B  7/8 sizes",
        "all_gather 64B  8/8 sizes",
    ];
    assert_eq!(lines.len(), want.len(), "{}", run.stderr);
    for (line, want) in lines.iter().zip(want) {
        // Plain lines, with no terminal control, that a table parser skips as comments.
        assert!(
            line.starts_with(&format!("# oxccl perf: {want}  ")) && line.ends_with(" s"),
            "{line:?}, not {want:?}"
        );
        assert!(!line.contains(['\r', '\x1b']), "{line:?}");
    }
    // The same with --json: stdout is the JSON object alone, the progress still on stderr.
    let run = timed(&[
        "perf",
        "--backend",
        "mock",
        "-b",
        "8",
        "-e",
        "16",
        "-n",
        "1",
        "--json",
        "--progress-every",
        "0",
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let out: String = run.lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["results"].as_array().map(Vec::len), Some(2), "{out}");
    assert_eq!(run.stderr.lines().count(), 2, "{}", run.stderr);
}

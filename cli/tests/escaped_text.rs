//! No input makes oxccl write control characters to a terminal: paths, variables, host names,
//! store keys and names read from dumps are shown escaped (`\e`, `\a`, `\x7f`, `\u{9b}`,
//! `\u{202e}`; the rule is `oxccl::core::text`'s) in the tool's output, its JSON and the
//! library's errors.

use oxccl::loader::{Library, LoadError, Tried};
use oxccl::store::{FileStore, MemStore, Store};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The path of the issue: an escape sequence that turns the terminal red, and a bell.
const RED: &str = "/x\x1b[31mRED\x07";
/// How it shows.
const RED_SHOWN: &str = r"/x\e[31mRED\a";

/// Panics when `bytes` hold a control character other than a line feed (C0, DEL, C1 as
/// UTF-8) or a bidi embedding, override or isolate, byte by byte (independent of the code
/// under test).
fn assert_terminal_safe(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for (i, w) in bytes.windows(3).enumerate() {
        let bidi = w[0] == 0xE2
            && ((w[1] == 0x80 && (0xAA..=0xAE).contains(&w[2]))
                || (w[1] == 0x81 && (0xA6..=0xA9).contains(&w[2])));
        let c1 = w[0] == 0xC2 && (0x80..=0x9F).contains(&w[1]);
        assert!(!bidi && !c1, "{what}: raw C1 or bidi at byte {i}: {text:?}");
    }
    for (i, &b) in bytes.iter().enumerate() {
        assert!(
            b == b'\n' || (b >= 0x20 && b != 0x7f),
            "{what}: raw byte {b:#04x} at {i}: {text:?}"
        );
    }
}

/// `oxccl args…` with only `vars` in its environment (and PATH).
fn oxccl(args: &[&str], vars: &[(&OsStr, &OsStr)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl"));
    cmd.args(args).env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().expect("oxccl runs")
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8(bytes.to_vec())
        .expect("UTF-8 output")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxccl-escape-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A variable with a control in its name, and DEL, a C1 control and a bidi override in its
/// value.
const ODD_NAME: &str = "NCCL_E\x1bX";
const ODD_VALUE: &str = "v\x7f\u{9b}\u{202e}";

#[test]
fn info_shows_a_library_path_with_controls_escaped() {
    let out = oxccl(
        &["info"],
        &[
            ("OXCCL_NCCL_LIBRARY".as_ref(), RED.as_ref()),
            (ODD_NAME.as_ref(), ODD_VALUE.as_ref()),
        ],
    );
    assert_terminal_safe("stdout", &out.stdout);
    assert_terminal_safe("stderr", &out.stderr);
    assert_eq!(out.status.code(), Some(3), "no library loads");
    let stdout = lines(&out.stdout);
    for want in [
        format!("library:   none found ({RED_SHOWN}: no such file)"),
        "variables:".to_owned(),
        r"  NCCL_E\eX=v\x7f\u{9b}\u{202e}".to_owned(),
        format!("  OXCCL_NCCL_LIBRARY={RED_SHOWN}"),
    ] {
        assert!(stdout.contains(&want), "{want:?} not in {stdout:#?}");
    }
    assert_eq!(
        lines(&out.stderr),
        [format!(
            "oxccl info: {RED_SHOWN}: no such file; {}",
            oxccl::core::error::GET_NCCL
        )]
    );
}

#[test]
fn info_json_keeps_exact_values_with_nothing_raw() {
    let out = oxccl(
        &["info", "--json"],
        &[
            ("OXCCL_NCCL_LIBRARY".as_ref(), RED.as_ref()),
            (ODD_NAME.as_ref(), ODD_VALUE.as_ref()),
        ],
    );
    assert_terminal_safe("stdout", &out.stdout);
    assert_terminal_safe("stderr", &out.stderr);
    let text = String::from_utf8(out.stdout).unwrap();
    // serde_json escapes C0 controls; DEL, C1 and bidi are escaped too, as JSON escapes.
    assert!(
        text.contains(r#""NCCL_E\u001bX": "v\u007f\u009b\u202e""#),
        "{text}"
    );
    assert!(
        text.contains(r#""OXCCL_NCCL_LIBRARY": "/x\u001b[31mRED\u0007""#),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(v["environment"]["OXCCL_NCCL_LIBRARY"], RED);
    assert_eq!(v["environment"][ODD_NAME], ODD_VALUE);
    // The error is a message: escaped as the text report shows it.
    assert_eq!(
        v["library"]["error"],
        format!("{RED_SHOWN}: no such file").as_str()
    );
}

#[test]
fn load_errors_show_paths_and_loader_texts_escaped() {
    let e = Library::open(RED).unwrap_err();
    assert_eq!(e.to_string(), format!("{RED_SHOWN}: no such file"));
    // Bytes that are not UTF-8 show as hex rather than as replacement characters.
    let e = Library::open(Path::new(OsStr::from_bytes(b"/x\xff\x1b\xc2\x9b"))).unwrap_err();
    assert_eq!(e.to_string(), r"/x\xff\e\u{9b}: no such file");
    let e = LoadError::NotLoadable {
        path: PathBuf::from(RED),
        reason: format!("{RED}: invalid ELF header\n"),
    };
    assert_eq!(
        e.to_string(),
        format!("{RED_SHOWN}: not a loadable shared library: {RED_SHOWN}: invalid ELF header\\n")
    );
    // The list keeps its own line breaks; the places and reasons in it are escaped.
    let e = LoadError::NothingFound {
        tried: vec![
            Tried {
                place: "OXCCL_NCCL_LIBRARY".into(),
                reason: "not set".into(),
            },
            Tried {
                place: "/opt/\u{202e}os.2/libnccl.so.2".into(),
                reason: "not loadable: \r\x1b[2Kgone".into(),
            },
        ],
    };
    assert_eq!(
        e.to_string(),
        "no usable NCCL library found; tried:\n  - OXCCL_NCCL_LIBRARY: not set\n  \
         - /opt/\\u{202e}os.2/libnccl.so.2: not loadable: \\r\\e[2Kgone"
    );
}

#[test]
fn environment_and_init_errors_quote_values_escaped() {
    let e =
        oxccl::rules::EnvConfig::from_lookup(|k| (k == "OXCCL_TIMEOUT_MS").then_some("1\x1b[2J"))
            .unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"invalid argument `OXCCL_TIMEOUT_MS`: expected a decimal integer in 1..=1000000000000, got "1\e[2J""#
    );
    let e = oxccl::launch::InitMethod::parse("tcp://h\x1b]0;owned\x07:0").unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"invalid argument `init_method`: expected env://, tcp://host:port or file:///path: a port in 1..=65535, got "tcp://h\e]0;owned\a:0""#
    );
    let e = oxccl::rules::LaunchInfo::detect(|k| match k {
        "RANK" => Some("0"),
        "WORLD_SIZE" => Some("1"),
        "MASTER_ADDR" => Some("host\x1b[2J"),
        _ => None,
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"invalid argument `MASTER_ADDR`: expected a host name or address of 1 to 255 bytes without spaces, got "host\e[2J""#
    );
}

#[test]
fn store_errors_show_keys_values_and_paths_escaped() {
    let s = MemStore::new();
    s.set("k\x1b[2J", b"v\x07\xff").unwrap();
    let e = s.add("k\x1b[2J", 1).unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"invalid argument `key`: expected `k\e[2J` to hold a decimal integer to add to, got "v\a\xff""#
    );
    let e = s
        .wait(&["gone\u{9b}"], Duration::from_millis(1))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        r"timed out after 1 ms: store keys [gone\u{9b}] to be set"
    );
    let e = FileStore::new("/nonexistent\x1b[2J/store", None).unwrap_err();
    assert_eq!(
        e.to_string(),
        r"invalid argument `path`: expected a file the store can open: /nonexistent\e[2J/store: No such file or directory (os error 2)"
    );
}

#[test]
fn the_store_tool_shows_a_bad_address_escaped() {
    let out = oxccl(&["store", "--host", "no\x1b[2Jhost", "--port", "0"], &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
    assert_terminal_safe("stderr", &out.stderr);
    let err = lines(&out.stderr);
    assert_eq!(err.len(), 1, "{err:?}");
    // Between the two: the resolver's own words, which differ between systems.
    assert!(
        err[0].starts_with(
            r"oxccl store: invalid argument `host`: expected a resolvable host, got `no\e[2Jhost`: "
        ),
        "{err:?}"
    );
    assert!(
        err[0].ends_with(" (choose another --port, or 0 for a free one)"),
        "{err:?}"
    );
}

#[test]
fn usage_errors_quote_arguments_escaped() {
    let out = oxccl(&["store", "--port", "1\x1b[2J\x07\u{202e}"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_terminal_safe("stderr", &out.stderr);
    assert_eq!(
        lines(&out.stderr),
        [
            r"error: invalid value '1\e[2J\a\u{202e}' for '--port <PORT>': invalid digit found in string",
            "",
            "For more information, try '--help'.",
        ]
    );
}

/// A hand-written dump of `rank` (of 3; rank 2 never dumps): one group of ranks 0 and 1 whose
/// name, description, operation, dtype and host name hold controls; `stuck` adds a second
/// collective, left started, and a note of a store error holding controls too.
fn write_dump(dir: &Path, rank: u32, stuck: bool) {
    let entry = |seq: u64, state: &str| {
        serde_json::json!({
            "record_id": seq - 1, "pg_id": 0, "process_group": ["pg\x1b[2J", "desc\x07"],
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
            "profiling_name": "nccl:all_reduce\u{202e}", "state": state,
            "input_sizes": [[4]], "input_dtypes": ["Float\x7f"],
            "output_sizes": [[4]], "output_dtypes": ["Float\x7f"],
        })
    };
    let mut entries = vec![entry(1, "completed")];
    if stuck {
        entries.push(entry(2, "started"));
    }
    let mut dump = serde_json::json!({
        "rank": rank, "world_size": 3, "hostname": "node\x1b]0;title\x07", "version": "2.10",
        "pg_config": { "pg\x1b[2J": { "desc": "desc\x07", "ranks": "[0, 1]" } },
        "entries": entries,
    });
    if stuck {
        dump["oxccl_dump"] = serde_json::json!({
            "cause": "own failure", "store_error": "refused\r\x1b[2K", "wait_end": null,
        });
    }
    std::fs::write(dir.join(format!("rank_{rank}.json")), dump.to_string()).unwrap();
}

#[test]
fn trace_shows_names_from_dumps_escaped() {
    let dir = tmp_dir("trace");
    write_dump(&dir, 0, true);
    write_dump(&dir, 1, false);
    let arg = dir.to_str().unwrap();
    let out = oxccl(&["trace", arg], &[]);
    assert_terminal_safe("stdout", &out.stdout);
    assert_terminal_safe("stderr", &out.stderr);
    assert_eq!(out.status.code(), Some(1), "a hang is found");
    assert_eq!(
        lines(&out.stdout),
        [
            "2 rank(s) dumped (world size 3): 0-1",
            "never dumped: rank 2",
            r"  rank 2: rank 0 could not reach the store when it dumped (refused\r\e[2K): the store's host was likely gone (under env:// without an agent, rank 0 hosts it), and this rank with it or cut off from the signal",
            r#"group "pg\e[2J" (desc\a), ranks 0-1:"#,
            "  hang at collective seq 2",
            r"  stopped: rank 0 at seq 2 nccl:all_reduce\u{202e} in [[4]] Float\x7f out [[4]] Float\x7f, started",
            "  others: rank 1 completed everything recorded (last collective seq 1)",
            "culprits:",
            r#"  rank 1: never issued collective seq 2 (nccl:all_reduce\u{202e}) of group "pg\e[2J" that the others wait in (its last: seq 1)"#,
        ]
    );

    let out = oxccl(&["trace", "--json", arg], &[]);
    assert_terminal_safe("stdout", &out.stdout);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    // Exact names in the JSON; the culprit's text is a message, escaped.
    let g = &v["groups"][0];
    assert_eq!(g["pg"], "pg\x1b[2J");
    assert_eq!(g["desc"], "desc\x07");
    assert_eq!(
        g["statuses"][0]["stopped_at"]["op"],
        "nccl:all_reduce\u{202e}"
    );
    assert_eq!(
        g["statuses"][0]["stopped_at"]["input_dtypes"][0],
        "Float\x7f"
    );
    assert_eq!(v["culprits"][0]["pg"], "pg\x1b[2J");
    assert_eq!(v["missing_why"][0]["error"], "refused\r\x1b[2K");
    assert_eq!(
        v["culprits"][0]["text"],
        r#"rank 1: never issued collective seq 2 (nccl:all_reduce\u{202e}) of group "pg\e[2J" that the others wait in (its last: seq 1)"#
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_shows_an_unreadable_dump_escaped() {
    let dir = tmp_dir("unreadable");
    let bad = serde_json::json!({
        "rank": 0, "version": "2.10", "pg_config": { "k\x1b[2J": { "ranks": "[0]" } },
    });
    std::fs::write(dir.join("rank_\x1b[2J0.json"), bad.to_string()).unwrap();
    let arg = dir.to_str().unwrap();
    let out = oxccl(&["trace", arg], &[]);
    assert!(out.stdout.is_empty());
    assert_terminal_safe("stderr", &out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        lines(&out.stderr),
        [
            format!(
                r"oxccl trace: unreadable dump {arg}/rank_\e[2J0.json: field `pg_config.k\e[2J.desc`: missing or not a string"
            ),
            format!("oxccl trace: DIR {arg}: no readable dump (rank_<r>.json)"),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

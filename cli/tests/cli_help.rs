//! The tool's help and usage errors: every subcommand's `--help` ends with examples of that
//! subcommand, and the usage line after a usage error is the one `--help` shows (no option
//! given, or suggested, shown as if it were required).

mod common;

use common::oxccl;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The subcommands `oxccl --help` lists (without `help`), each with the subcommands its own
/// `--help` lists (`store bench`).
fn subcommands() -> Vec<Vec<String>> {
    fn listed(path: &[String]) -> Vec<String> {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = text(&oxccl(&args).stdout);
        help.lines()
            .skip_while(|l| *l != "Commands:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| *name != "help")
            .map(str::to_owned)
            .collect()
    }
    let mut out = Vec::new();
    for top in listed(&[]) {
        let path = vec![top];
        for sub in listed(&path) {
            out.push(vec![path[0].clone(), sub]);
        }
        out.push(path);
    }
    out
}

/// The usage section of `--help` or of a usage error: "Usage:" and its continuation lines.
fn usage(s: &str) -> Vec<String> {
    s.lines()
        .skip_while(|l| !l.starts_with("Usage:"))
        .take_while(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_subcommand_help_has_examples_of_itself() {
    let all = subcommands();
    let names: Vec<String> = all.iter().map(|p| p.join(" ")).collect();
    for want in [
        "info",
        "perf",
        "tune",
        "ping-pong",
        "check",
        "store",
        "store bench",
        "trace",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    for path in &all {
        let name = path.join(" ");
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let o = oxccl(&args);
        assert_eq!(o.status.code(), Some(0), "oxccl {name} --help");
        let help = text(&o.stdout);
        let examples: Vec<&str> = help
            .lines()
            .skip_while(|l| *l != "Examples:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        assert!(
            examples
                .iter()
                .any(|l| l.contains(&format!("oxccl {name}"))),
            "oxccl {name} --help has no example of `oxccl {name}`:\n{help}"
        );
    }
}

#[test]
fn usage_after_an_error_is_the_usage_of_help() {
    // An unknown flag after options given: clap's own usage line listed them (and the flag it
    // suggests) as if they were required.
    let o = oxccl(&["perf", "-r", "1", "--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.starts_with("error: unexpected argument '--bogus'"),
        "{err}"
    );
    assert_eq!(
        usage(&err),
        ["Usage: oxccl perf [OPTIONS] [COLLS]..."],
        "{err}"
    );
    for path in subcommands() {
        let name = path.join(" ");
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = usage(&text(&oxccl(&args).stdout));
        assert!(!help.is_empty(), "oxccl {name} --help has no usage");
        // Every optional part of the help's usage is in brackets: `--port` of the server
        // is the one option required (without a subcommand).
        for line in &help {
            let bare: Vec<&str> = line
                .split_whitespace()
                .filter(|w| w.starts_with("--") || w.starts_with('-'))
                .collect();
            assert!(
                bare.iter().all(|w| name == "store" && *w == "--port"),
                "oxccl {name}: {line}"
            );
        }
        args.pop();
        args.push("--bogus");
        let o = oxccl(&args);
        assert_eq!(o.status.code(), Some(2), "oxccl {name} --bogus");
        assert_eq!(
            usage(&text(&o.stderr)),
            help,
            "oxccl {name} --bogus:\n{}",
            text(&o.stderr)
        );
    }
    // A missing argument names it in the message; the usage is still the help's.
    let o = oxccl(&["trace", "--json"]);
    let err = text(&o.stderr);
    assert!(err.contains("<DIR>"), "{err}");
    assert_eq!(usage(&err), ["Usage: oxccl trace [OPTIONS] <DIR>"], "{err}");
    // Errors clap gives without a usage line stay without one.
    let o = oxccl(&["perf", "-g", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(usage(&text(&o.stderr)).is_empty(), "{}", text(&o.stderr));
}

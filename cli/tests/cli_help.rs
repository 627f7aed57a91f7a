//! The tool's help: every subcommand's `--help` ends with examples of that subcommand.

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

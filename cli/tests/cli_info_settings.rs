//! `oxccl info`'s `settings:` section: what became of each of PyTorch's `TORCH_NCCL_*` names
//! set (taken, overridden by an `OXCCL_*` twin, not honoured, unknown) and every value the
//! process group refuses, in the text and the JSON report alike.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

/// `oxccl info` with exactly `vars` (nothing inherited but `PATH`): stdout, and the JSON
/// report's `settings`.
fn info_settings(vars: &[(&str, &str)]) -> (String, serde_json::Value) {
    let run = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_oxccl"));
        c.arg("info").env_clear().env("PATH", "/usr/bin:/bin");
        if json {
            c.arg("--json");
        }
        for (k, v) in vars {
            c.env(k, v);
        }
        let out = c.output().expect("oxccl runs");
        assert_eq!(out.status.signal(), None);
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let json: serde_json::Value = serde_json::from_str(&run(true)).expect("one JSON object");
    (run(false), json["settings"].clone())
}

#[test]
fn info_says_what_became_of_pytorch_names_and_refused_values() {
    let vars = [
        ("TORCH_NCCL_BLOCKING_WAIT", "1"),
        ("TORCH_NCCL_AVOID_RECORD_STREAMS", "1"),
        ("OXCCL_TIMEOUT_MS", "abc"),
    ];
    let (text, settings) = info_settings(&vars);
    let expected_lines = [
        "settings:  what the process group makes of them (docs/ENVIRONMENT.md)",
        "  OXCCL_TIMEOUT_MS=abc: invalid: expected a decimal integer in 1..=1000000000000, got \
         \"abc\"; the process group refuses it",
        "  TORCH_NCCL_AVOID_RECORD_STREAMS=1: not honoured: a setting of PyTorch's caching \
         allocator, which oxccl does not use",
        "  TORCH_NCCL_BLOCKING_WAIT=1: taken as OXCCL_BLOCKING_WAIT=1",
    ];
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == expected_lines[0])
        .unwrap_or_else(|| panic!("no settings section in {text}"));
    assert_eq!(lines[at..at + 4], expected_lines, "{text}");
    // The variables themselves are listed too.
    for v in [
        "  OXCCL_TIMEOUT_MS=abc",
        "  TORCH_NCCL_AVOID_RECORD_STREAMS=1",
        "  TORCH_NCCL_BLOCKING_WAIT=1",
    ] {
        assert!(lines.contains(&v), "{v} not in {text}");
    }
    // The process group refuses this environment with the error the report shows.
    let env = oxccl::launch::EnvVars::from_pairs(vars);
    let refused = oxccl::pg::PgOptions::from_vars(&env, None).unwrap_err();
    assert_eq!(
        settings,
        serde_json::json!([
            {
                "variable": "OXCCL_TIMEOUT_MS",
                "value": "abc",
                "outcome": "invalid",
                "error": refused.to_string(),
                "expected": "a decimal integer in 1..=1000000000000, got \"abc\"",
                "text": expected_lines[1].trim_start(),
            },
            {
                "variable": "TORCH_NCCL_AVOID_RECORD_STREAMS",
                "value": "1",
                "outcome": "not honoured",
                "why": "a setting of PyTorch's caching allocator, which oxccl does not use",
                "text": expected_lines[2].trim_start(),
            },
            {
                "variable": "TORCH_NCCL_BLOCKING_WAIT",
                "value": "1",
                "outcome": "taken",
                "as": "OXCCL_BLOCKING_WAIT",
                "as_value": "1",
                "text": expected_lines[3].trim_start(),
            },
        ])
    );
    assert_eq!(
        refused.to_string(),
        "invalid argument `OXCCL_TIMEOUT_MS`: expected a decimal integer in 1..=1000000000000, \
         got \"abc\""
    );
}

#[test]
fn info_names_a_refused_pytorch_value_the_losers_and_the_unknown() {
    let (text, settings) = info_settings(&[
        ("TORCH_NCCL_BLOCKING_WAIT", "maybe"),
        ("TORCH_NCCL_ENABLE_TIMING", "1"),
        ("OXCCL_ENABLE_TIMING", "0"),
        ("TORCH_NCCL_NOT_A_SETTING", "1"),
    ]);
    for want in [
        "  TORCH_NCCL_BLOCKING_WAIT=maybe: invalid: expected 0, 1, true or false, got \"maybe\"; \
         the process group refuses it",
        "  TORCH_NCCL_ENABLE_TIMING=1: ignored: OXCCL_ENABLE_TIMING is set and wins",
        "  TORCH_NCCL_NOT_A_SETTING=1: unknown: not a PyTorch NCCL setting oxccl knows \
         (docs/ENVIRONMENT.md lists them)",
    ] {
        assert!(text.lines().any(|l| l == want), "{want} not in {text}");
    }
    let outcomes: Vec<(&str, &str)> = settings
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["variable"].as_str().unwrap(),
                n["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("TORCH_NCCL_BLOCKING_WAIT", "invalid"),
            ("TORCH_NCCL_ENABLE_TIMING", "ignored"),
            ("TORCH_NCCL_NOT_A_SETTING", "unknown"),
        ]
    );
    assert_eq!(settings[1]["by"], "OXCCL_ENABLE_TIMING");
    // Nothing to say: no section.
    let (text, settings) = info_settings(&[("OXCCL_BLOCKING_WAIT", "1")]);
    assert!(!text.contains("settings:"), "{text}");
    assert_eq!(settings, serde_json::json!([]));
}

use super::*;

/// A lookup over a fixed list of `(name, value)` pairs.
fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
    move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

fn arg_of(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument { arg, .. } => arg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

fn expected_of(e: &Error) -> &str {
    match e {
        Error::InvalidArgument { expected, .. } => expected.as_str(),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

fn lines(s: &Settings) -> alloc::vec::Vec<alloc::string::String> {
    s.notes.iter().map(|n| alloc::format!("{n}")).collect()
}

#[test]
fn empty_environment_resolves_to_the_defaults_without_notes() {
    let s = resolve([]);
    assert_eq!(s.config, Ok(EnvConfig::default()));
    assert!(s.notes.is_empty());
    assert_eq!(s.value(BLOCKING_WAIT), None);
}

#[test]
fn every_torch_name_with_a_twin_is_taken() {
    let pairs = [
        ("TORCH_NCCL_BLOCKING_WAIT", "1"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2"),
        ("TORCH_NCCL_ENABLE_TIMING", "true"),
        ("TORCH_NCCL_USE_COMM_NONBLOCKING", "1"),
        ("TORCH_NCCL_NONBLOCKING_TIMEOUT", "100"),
        ("TORCH_NCCL_HIGH_PRIORITY", "1"),
        ("TORCH_NCCL_NAN_CHECK", "1"),
        ("TORCH_NCCL_DESYNC_DEBUG", "1"),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
        ("TORCH_NCCL_TRACE_BUFFER_SIZE", "1000"),
        ("TORCH_NCCL_ENABLE_MONITORING", "0"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "30"),
        ("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "5000"),
        ("TORCH_NCCL_COORD_CHECK_MILSEC", "250"),
    ];
    let s = resolve(pairs);
    assert_eq!(
        s.config,
        Ok(EnvConfig {
            blocking_wait: true,
            async_error_handling: ErrorHandling::CleanUpOnly,
            enable_timing: true,
            nonblocking: true,
            nonblocking_timeout: Some(Duration::from_secs(100)),
            high_priority: true,
            nan_check: true,
            desync_debug: true,
            dump_on_timeout: true,
            trace_buffer_size: 1000,
            enable_monitoring: false,
            heartbeat_timeout: Duration::from_secs(30),
            wait_timeout_dump: Duration::from_millis(5000),
            coord_check: Duration::from_millis(250),
            ..EnvConfig::default()
        })
    );
    assert_eq!(
        lines(&s),
        [
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=2: taken as OXCCL_ASYNC_ERROR_HANDLING=2",
            "TORCH_NCCL_BLOCKING_WAIT=1: taken as OXCCL_BLOCKING_WAIT=1",
            "TORCH_NCCL_COORD_CHECK_MILSEC=250: taken as OXCCL_COORD_CHECK_MS=250",
            "TORCH_NCCL_DESYNC_DEBUG=1: taken as OXCCL_DESYNC_DEBUG=1",
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1: taken as OXCCL_DUMP_ON_TIMEOUT=1",
            "TORCH_NCCL_ENABLE_MONITORING=0: taken as OXCCL_ENABLE_MONITORING=0",
            "TORCH_NCCL_ENABLE_TIMING=true: taken as OXCCL_ENABLE_TIMING=true",
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=30: taken as OXCCL_HEARTBEAT_TIMEOUT_SEC=30",
            "TORCH_NCCL_HIGH_PRIORITY=1: taken as OXCCL_HIGH_PRIORITY=1",
            "TORCH_NCCL_NAN_CHECK=1: taken as OXCCL_NAN_CHECK=1",
            "TORCH_NCCL_NONBLOCKING_TIMEOUT=100: taken as OXCCL_NONBLOCKING_TIMEOUT_MS=100000 \
             (seconds to ms)",
            "TORCH_NCCL_TRACE_BUFFER_SIZE=1000: taken as OXCCL_TRACE_BUFFER_SIZE=1000",
            "TORCH_NCCL_USE_COMM_NONBLOCKING=1: taken as OXCCL_NONBLOCKING=1",
            "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=5000: taken as OXCCL_WAIT_TIMEOUT_DUMP_MS=5000",
        ]
    );
    assert_eq!(s.value(NONBLOCKING_TIMEOUT_MS), Some("100000"));
    assert_eq!(s.value(TRACE_BUFFER_SIZE), Some("1000"));
    // Every row with a twin is exercised here, or by its older name below.
    for row in TORCH_VARIABLES.iter().filter(|r| r.twin().is_some()) {
        let alone = resolve([(row.name, "1")]);
        let twin = row.twin().unwrap();
        assert!(
            matches!(
                &alone.notes[..],
                [Note { outcome: Outcome::Taken { oxccl, .. }, .. }] if *oxccl == twin
            ),
            "{}: {:?}",
            row.name,
            alone.notes
        );
        assert!(alone.value(twin).is_some(), "{}", row.name);
    }
}

#[test]
fn older_nccl_names_are_taken_and_lose_to_torch_nccl_names() {
    for (old, new, twin) in [
        (
            "NCCL_BLOCKING_WAIT",
            "TORCH_NCCL_BLOCKING_WAIT",
            BLOCKING_WAIT,
        ),
        (
            "NCCL_ENABLE_TIMING",
            "TORCH_NCCL_ENABLE_TIMING",
            ENABLE_TIMING,
        ),
        ("NCCL_DESYNC_DEBUG", "TORCH_NCCL_DESYNC_DEBUG", DESYNC_DEBUG),
    ] {
        let s = resolve([(old, "1")]);
        assert_eq!(s.value(twin), Some("1"), "{old}");
        assert_eq!(lines(&s), [alloc::format!("{old}=1: taken as {twin}=1")]);
        let s = resolve([(old, "1"), (new, "0")]);
        assert_eq!(s.value(twin), Some("0"), "{old}");
        assert_eq!(
            lines(&s),
            [
                alloc::format!("{old}=1: ignored: {new} is set and wins"),
                alloc::format!("{new}=0: taken as {twin}=0"),
            ]
        );
    }
    let s = resolve([("NCCL_ASYNC_ERROR_HANDLING", "0")]);
    assert_eq!(
        s.config.map(|c| c.async_error_handling),
        Ok(ErrorHandling::NoHandling)
    );
    let s = resolve([
        ("NCCL_ASYNC_ERROR_HANDLING", "0"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    ]);
    assert_eq!(
        s.config.map(|c| c.async_error_handling),
        Ok(ErrorHandling::TearDown)
    );
}

#[test]
fn oxccl_names_win_over_pytorch_names() {
    let s = resolve([
        ("TORCH_NCCL_BLOCKING_WAIT", "1"),
        ("NCCL_BLOCKING_WAIT", "1"),
        (BLOCKING_WAIT, "0"),
        ("TORCH_NCCL_NONBLOCKING_TIMEOUT", "5"),
        (NONBLOCKING_TIMEOUT_MS, "700"),
    ]);
    let c = s.config.clone().unwrap();
    assert!(!c.blocking_wait);
    assert_eq!(c.nonblocking_timeout, Some(Duration::from_millis(700)));
    assert_eq!(
        lines(&s),
        [
            "NCCL_BLOCKING_WAIT=1: ignored: OXCCL_BLOCKING_WAIT is set and wins",
            "TORCH_NCCL_BLOCKING_WAIT=1: ignored: OXCCL_BLOCKING_WAIT is set and wins",
            "TORCH_NCCL_NONBLOCKING_TIMEOUT=5: ignored: OXCCL_NONBLOCKING_TIMEOUT_MS is set and wins",
        ]
    );
    // A value that loses is not used, so it is not refused either.
    let s = resolve([("TORCH_NCCL_BLOCKING_WAIT", "maybe"), (BLOCKING_WAIT, "1")]);
    assert!(s.config.unwrap().blocking_wait);
}

#[test]
fn nonblocking_timeout_converts_seconds_to_milliseconds() {
    let name = "TORCH_NCCL_NONBLOCKING_TIMEOUT";
    for (v, ms, want) in [
        ("100", "100000", Some(Duration::from_secs(100))),
        ("1", "1000", Some(Duration::from_secs(1))),
        ("0", "0", None),
        ("-1", "0", None),
        (
            "1000000000",
            "1000000000000",
            Some(Duration::from_secs(1_000_000_000)),
        ),
    ] {
        let s = resolve([(name, v)]);
        assert_eq!(s.value(NONBLOCKING_TIMEOUT_MS), Some(ms), "{v}");
        assert_eq!(s.config.unwrap().nonblocking_timeout, want, "{v}");
    }
    for v in ["1000000001", "-2", "1.5", "", "abc", "100ms"] {
        let s = resolve([(name, v)]);
        let e = s.config.clone().unwrap_err();
        assert_eq!(arg_of(&e), name, "{v}");
        assert_eq!(
            expected_of(&e),
            alloc::format!("whole seconds in 0..=1000000000, or -1 for no bound, got \"{v}\""),
        );
        assert_eq!(s.value(NONBLOCKING_TIMEOUT_MS), None);
    }
    assert_eq!(
        Conversion::SecondsToMillis.apply(name, "7"),
        Ok("7000".into())
    );
    assert_eq!(Conversion::Same.apply(name, "7"), Ok("7".into()));
}

#[test]
fn invalid_values_are_refused_naming_the_variable_set() {
    let s = resolve([("TORCH_NCCL_BLOCKING_WAIT", "maybe")]);
    let e = s.config.clone().unwrap_err();
    assert_eq!(arg_of(&e), "TORCH_NCCL_BLOCKING_WAIT");
    assert_eq!(expected_of(&e), "0, 1, true or false, got \"maybe\"");
    assert_eq!(
        lines(&s),
        [
            "TORCH_NCCL_BLOCKING_WAIT=maybe: invalid: expected 0, 1, true or false, got \
          \"maybe\"; the process group refuses it"
        ]
    );
    assert_eq!(s.notes[0].outcome, Outcome::Invalid(Box::new(e)));
    // Every refused value gets its note; the config's error is the first in VARIABLES' order.
    let s = resolve([
        ("TORCH_NCCL_BLOCKING_WAIT", "maybe"),
        (TIMEOUT_MS, "abc"),
        ("TORCH_NCCL_TRACE_BUFFER_SIZE", "1048577"),
        ("NCCL_ASYNC_ERROR_HANDLING", "4"),
    ]);
    assert_eq!(arg_of(s.config.as_ref().unwrap_err()), TIMEOUT_MS);
    assert_eq!(
        lines(&s),
        [
            "NCCL_ASYNC_ERROR_HANDLING=4: invalid: expected a decimal integer in 0..=3, got \"4\"; \
             the process group refuses it",
            "OXCCL_TIMEOUT_MS=abc: invalid: expected a decimal integer in 1..=1000000000000, got \
             \"abc\"; the process group refuses it",
            "TORCH_NCCL_BLOCKING_WAIT=maybe: invalid: expected 0, 1, true or false, got \"maybe\"; \
             the process group refuses it",
            "TORCH_NCCL_TRACE_BUFFER_SIZE=1048577: invalid: expected a decimal integer in \
             0..=1048576, got \"1048577\"; the process group refuses it",
        ]
    );
    // A value is shown escaped in the note.
    let s = resolve([("TORCH_NCCL_NAN_CHECK", "1\u{1b}[2J")]);
    assert_eq!(
        lines(&s),
        ["TORCH_NCCL_NAN_CHECK=1\\e[2J: invalid: expected 0, 1, true or false, got \"1\\e[2J\"; \
          the process group refuses it"]
    );
}

#[test]
fn resolve_refuses_what_from_lookup_refuses() {
    // The malformed OXCCL values of `malformed_values_name_their_variable`: the same error.
    for (name, value) in [
        (BACKEND, "gloo"),
        (TIMEOUT_MS, "0"),
        (ASYNC_ERROR_HANDLING, "4"),
        (NONBLOCKING, ""),
        (TRACE_BUFFER_SIZE, "-1"),
        (HEARTBEAT_TIMEOUT_SEC, "1e3"),
        (COORD_CHECK_MS, "0"),
        (PEER_KERNELS, "fast"),
        (MOCK_VERSION, "2.32"),
    ] {
        let pairs = [(name, value)];
        let direct = EnvConfig::from_lookup(env(&pairs)).unwrap_err();
        let s = resolve(pairs);
        assert_eq!(s.config, Err(direct.clone()), "{name}={value:?}");
        assert_eq!(s.notes.len(), 1);
        assert_eq!(s.notes[0].outcome, Outcome::Invalid(Box::new(direct)));
    }
    // And accepts what it accepts, to the same configuration, without notes.
    let pairs = [
        (BACKEND, "mock"),
        (TIMEOUT_MS, "123000"),
        (BLOCKING_WAIT, "1"),
        (PEER_KERNELS, "two-shot"),
        (ELASTIC_WINDOW_MS, "250"),
    ];
    let s = resolve(pairs);
    assert_eq!(s.config, EnvConfig::from_lookup(env(&pairs)));
    assert!(s.notes.is_empty());
}

#[test]
fn names_oxccl_does_not_honour_are_noted() {
    let s = resolve([("TORCH_NCCL_AVOID_RECORD_STREAMS", "1")]);
    assert_eq!(s.config, Ok(EnvConfig::default()));
    assert_eq!(
        lines(&s),
        [
            "TORCH_NCCL_AVOID_RECORD_STREAMS=1: not honoured: a setting of PyTorch's caching \
          allocator, which oxccl does not use"
        ]
    );
    assert!(s.notes[0].is_warning());
    for row in TORCH_VARIABLES {
        if let TorchMeaning::NotHonoured(why) = row.meaning {
            let s = resolve([(row.name, "x")]);
            assert_eq!(s.config, Ok(EnvConfig::default()), "{}", row.name);
            assert_eq!(
                s.notes,
                [Note {
                    name: row.name.into(),
                    value: "x".into(),
                    outcome: Outcome::NotHonoured(why),
                }]
            );
        }
    }
}

#[test]
fn unknown_torch_nccl_names_are_noted_and_other_names_are_not() {
    let s = resolve([
        ("TORCH_NCCL_MADE_UP", "1"),
        ("NCCL_DEBUG", "INFO"),
        ("OXCCL_TRACE_DIR", "/tmp/fr"),
        ("TORCH_SHOW_CPP_STACKTRACES", "1"),
        ("TORCH_DISTRIBUTED_DEBUG", "DETAIL"),
    ]);
    assert_eq!(s.config, Ok(EnvConfig::default()));
    let got = lines(&s);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0]
        .starts_with("TORCH_DISTRIBUTED_DEBUG=DETAIL: not honoured: oxccl has no debug level"));
    assert_eq!(
        got[1],
        "TORCH_NCCL_MADE_UP=1: unknown: not a PyTorch NCCL setting oxccl knows \
         (docs/ENVIRONMENT.md lists them)"
    );
    assert_eq!(s.notes[1].outcome, Outcome::Unknown);
    assert_eq!(s.notes[1].outcome.label(), "unknown");
    // A repeated name counts once, its last value.
    let s = resolve([("TORCH_NCCL_MADE_UP", "1"), ("TORCH_NCCL_MADE_UP", "2")]);
    assert_eq!(s.notes.len(), 1);
    assert_eq!(s.notes[0].value, "2");
    let s = resolve([
        ("TORCH_NCCL_BLOCKING_WAIT", "0"),
        ("TORCH_NCCL_BLOCKING_WAIT", "1"),
    ]);
    assert!(s.config.unwrap().blocking_wait);
}

#[test]
fn outcomes_have_labels_and_levels() {
    let taken = Outcome::Taken {
        oxccl: BLOCKING_WAIT,
        value: "1".into(),
        conversion: Conversion::Same,
    };
    let cases = [
        (taken, "taken", false),
        (Outcome::Overridden { by: BLOCKING_WAIT }, "ignored", false),
        (Outcome::NotHonoured("x"), "not honoured", true),
        (Outcome::Unknown, "unknown", true),
        (
            Outcome::Invalid(Box::new(parse_bool(BLOCKING_WAIT, "x").unwrap_err())),
            "invalid",
            true,
        ),
    ];
    for (outcome, label, warn) in cases {
        assert_eq!(outcome.label(), label);
        let n = Note {
            name: "N".into(),
            value: "v".into(),
            outcome,
        };
        assert_eq!(n.is_warning(), warn, "{label}");
    }
}

#[test]
fn torch_table_is_consistent() {
    for (i, row) in TORCH_VARIABLES.iter().enumerate() {
        assert!(
            TORCH_VARIABLES[..i].iter().all(|r| r.name != row.name),
            "{} twice",
            row.name
        );
        assert!(
            row.name.starts_with("TORCH_") || row.name.starts_with("NCCL_"),
            "{}",
            row.name
        );
        if let Some(twin) = row.twin() {
            assert!(
                VARIABLES.iter().any(|(n, _, _)| *n == twin),
                "{}'s twin {twin} is not read",
                row.name
            );
        }
    }
    // The names the issue lists are all in the table.
    for name in [
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_BLOCKING_WAIT",
        "TORCH_NCCL_ENABLE_TIMING",
        "TORCH_NCCL_USE_COMM_NONBLOCKING",
        "TORCH_NCCL_NONBLOCKING_TIMEOUT",
        "TORCH_NCCL_HIGH_PRIORITY",
        "TORCH_NCCL_NAN_CHECK",
        "TORCH_NCCL_DESYNC_DEBUG",
        "TORCH_NCCL_DUMP_ON_TIMEOUT",
        "TORCH_NCCL_TRACE_BUFFER_SIZE",
        "TORCH_NCCL_ENABLE_MONITORING",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
        "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC",
        "TORCH_NCCL_COORD_CHECK_MILSEC",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
        "NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_BLOCKING_WAIT",
        "TORCH_NCCL_AVOID_RECORD_STREAMS",
        "TORCH_NCCL_CUDA_EVENT_CACHE",
        "TORCH_NCCL_RETHROW_CUDA_ERRORS",
        "TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN",
    ] {
        assert!(
            TORCH_VARIABLES.iter().any(|r| r.name == name),
            "{name} missing"
        );
    }
}

#[test]
fn torch_markdown_table_has_a_row_per_name() {
    let mut out = alloc::string::String::new();
    write_torch_markdown_table(&mut out).unwrap();
    let mut rows = out.lines();
    assert_eq!(
        rows.next(),
        Some("| PyTorch's variable | oxccl's | what oxccl does with it |")
    );
    assert_eq!(rows.next(), Some("|---|---|---|"));
    assert_eq!(
        rows.next(),
        Some("| `TORCH_NCCL_BLOCKING_WAIT` | `OXCCL_BLOCKING_WAIT` | same value |")
    );
    assert_eq!(
        rows.next(),
        Some(
            "| `NCCL_BLOCKING_WAIT` | `OXCCL_BLOCKING_WAIT` | same value; PyTorch's older name: \
             `TORCH_NCCL_BLOCKING_WAIT` wins |"
        )
    );
    assert_eq!(out.lines().count(), 2 + TORCH_VARIABLES.len());
    assert!(out.contains(
        "| `TORCH_NCCL_NONBLOCKING_TIMEOUT` | `OXCCL_NONBLOCKING_TIMEOUT_MS` | seconds × 1000 \
         (PyTorch's -1, no bound, becomes 0) |\n"
    ));
    assert!(out.contains("| `TORCH_NCCL_AVOID_RECORD_STREAMS` | not honoured | "));
}

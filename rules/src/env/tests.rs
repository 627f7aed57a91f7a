use super::*;
use core::cell::RefCell;

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

#[test]
fn booleans_accept_only_0_1_true_false() {
    for (v, want) in [
        ("1", true),
        ("0", false),
        ("true", true),
        ("TRUE", true),
        ("True", true),
        ("false", false),
        ("False", false),
    ] {
        assert_eq!(parse_bool("X", v), Ok(want), "{v}");
    }
    // Seed case 16, and the empty string.
    for v in [
        "abc",
        "-1",
        "2147483647",
        "4294967295",
        "",
        " 1",
        "1 ",
        "01",
        "yes",
    ] {
        let e = parse_bool(BLOCKING_WAIT, v).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    arg: "OXCCL_BLOCKING_WAIT",
                    ..
                }
            ),
            "{v}"
        );
        assert!(
            expected_of(&e).starts_with("0, 1, true or false, got"),
            "{v}"
        );
    }
}

#[test]
fn seed_case_16_blocking_wait_fails_at_construction() {
    for v in ["abc", "-1", "2147483647", "4294967295"] {
        let pairs = [(BLOCKING_WAIT, v)];
        let e = EnvConfig::from_lookup(env(&pairs)).unwrap_err();
        assert_eq!(arg_of(&e), BLOCKING_WAIT);
    }
}

#[test]
fn integers_are_decimal_digits_in_range() {
    assert_eq!(parse_u64("N", "0", 0, 10), Ok(0));
    assert_eq!(parse_u64("N", "10", 0, 10), Ok(10));
    assert_eq!(parse_u64("N", "007", 0, 10), Ok(7));
    assert_eq!(
        parse_u64("N", "18446744073709551615", 0, u64::MAX),
        Ok(u64::MAX)
    );
    for v in [
        "",
        "-1",
        "+1",
        " 1",
        "1 ",
        "0x1",
        "1.5",
        "11",
        "18446744073709551616",
        "é",
    ] {
        let e = parse_u64("N", v, 0, 10).unwrap_err();
        assert_eq!(arg_of(&e), "N", "{v}");
    }
    let e = parse_u64("N", "11", 1, 10).unwrap_err();
    assert_eq!(expected_of(&e), "a decimal integer in 1..=10, got \"11\"");
    assert!(parse_u64("N", "0", 1, 10).is_err());
}

/// A value holding a terminal escape is shown escaped, in the text and in the error's Display.
#[test]
fn malformed_values_are_shown_escaped() {
    let e = EnvConfig::from_lookup(env(&[(TIMEOUT_MS, "1\u{1b}[2J")])).unwrap_err();
    assert_eq!(
        expected_of(&e),
        "a decimal integer in 1..=1000000000000, got \"1\\e[2J\""
    );
    let mut shown = heapless::String::<256>::new();
    core::fmt::write(&mut shown, format_args!("{e}")).unwrap();
    assert_eq!(
        shown.as_str(),
        "invalid argument `OXCCL_TIMEOUT_MS`: expected a decimal integer in 1..=1000000000000, \
         got \"1\\e[2J\""
    );
    let e = EnvConfig::from_lookup(env(&[(BACKEND, "nccl\x07\u{202e}")])).unwrap_err();
    assert_eq!(
        expected_of(&e),
        "nccl, mock or auto, got \"nccl\\a\\u{202e}\""
    );
    let e = EnvConfig::from_lookup(env(&[(NAN_CHECK, "1\r")])).unwrap_err();
    assert_eq!(expected_of(&e), "0, 1, true or false, got \"1\\r\"");
}

#[test]
fn durations_have_units_and_caps() {
    assert_eq!(
        parse_millis("T", "1500", 0, u64::MAX),
        Ok(Duration::from_millis(1500))
    );
    assert_eq!(
        parse_secs("T", "3", 0, u64::MAX),
        Ok(Duration::from_secs(3))
    );
    assert!(parse_millis("T", "0", 1, u64::MAX).is_err());
    assert!(parse_millis("T", "1000000000001", 0, u64::MAX).is_err());
    assert!(parse_secs("T", "1000000001", 0, u64::MAX).is_err());
    assert!(parse_secs("T", "18446744073709551615", 0, u64::MAX).is_err());
}

#[test]
fn empty_environment_gives_pytorch_defaults() {
    let c = EnvConfig::from_lookup(|_| None).unwrap();
    assert_eq!(c, EnvConfig::default());
    assert_eq!(c.backend, None);
    assert_eq!(c.timeout, None);
    assert!(!c.blocking_wait);
    assert_eq!(c.async_error_handling, ErrorHandling::SkipCleanUp);
    assert_eq!(c.error_handling(), ErrorHandling::SkipCleanUp);
    assert!(c.enable_monitoring);
    assert_eq!(c.nonblocking_timeout, Some(Duration::from_secs(1800)));
    assert_eq!(c.trace_buffer_size, 2000);
    assert_eq!(c.heartbeat_timeout, Duration::from_secs(600));
    assert_eq!(c.wait_timeout_dump, Duration::from_millis(60_000));
    assert_eq!(c.coord_check, Duration::from_millis(1000));
}

/// The reads follow VARIABLES' order, so the first refusal is the earliest variable there
/// (what `resolve`, which checks each on its own, reports too).
#[test]
fn variables_are_read_in_the_table_order() {
    let asked: RefCell<alloc::vec::Vec<&str>> = RefCell::new(alloc::vec::Vec::new());
    let _ = EnvConfig::from_lookup(|name| {
        if let Some((n, _, _)) = VARIABLES.iter().find(|(n, _, _)| *n == name) {
            asked.borrow_mut().push(n);
        }
        None
    });
    let table: alloc::vec::Vec<&str> = VARIABLES.iter().map(|(n, _, _)| *n).collect();
    assert_eq!(*asked.borrow(), table);
    let pairs = [
        (PEER_KERNELS, "fast"),
        (COORD_CHECK_MS, "x"),
        (NAN_CHECK, "2"),
    ];
    let e = EnvConfig::from_lookup(env(&pairs)).unwrap_err();
    assert_eq!(arg_of(&e), NAN_CHECK);
    assert_eq!(resolve(pairs).config, Err(e));
}

#[test]
fn every_variable_is_read() {
    let asked: RefCell<heapless::Vec<&'static str, 32>> = RefCell::new(heapless::Vec::new());
    let _ = EnvConfig::from_lookup(|name| {
        if let Some((n, _, _)) = VARIABLES.iter().find(|(n, _, _)| *n == name) {
            let _ = asked.borrow_mut().push(n);
        }
        None
    });
    let asked = asked.borrow();
    for (name, _, _) in VARIABLES {
        assert!(
            asked.contains(name),
            "{name} is in VARIABLES but never read"
        );
    }
    assert_eq!(asked.len(), VARIABLES.len(), "each variable read once");
}

#[test]
fn table_defaults_parse_to_the_default_config() {
    // Variables whose default is a behaviour, not a value, are left unset.
    let lookup = |name: &str| {
        VARIABLES
            .iter()
            .find(|(n, d, _)| *n == name && *d != "unset")
            .map(|(_, d, _)| *d)
    };
    assert_eq!(EnvConfig::from_lookup(lookup), Ok(EnvConfig::default()));
}

#[test]
fn every_variable_is_parsed_into_its_field() {
    let pairs = [
        (BACKEND, "MOCK"),
        (TIMEOUT_MS, "123000"),
        (BLOCKING_WAIT, "true"),
        (ASYNC_ERROR_HANDLING, "2"),
        (ENABLE_TIMING, "1"),
        (NONBLOCKING, "1"),
        (NONBLOCKING_TIMEOUT_MS, "0"),
        (HIGH_PRIORITY, "1"),
        (NAN_CHECK, "1"),
        (DESYNC_DEBUG, "1"),
        (DUMP_ON_TIMEOUT, "1"),
        (TRACE_BUFFER_SIZE, "2000"),
        (ENABLE_MONITORING, "0"),
        (HEARTBEAT_TIMEOUT_SEC, "0"),
        (WAIT_TIMEOUT_DUMP_MS, "5"),
        (COORD_CHECK_MS, "7"),
        (PEER_KERNELS, "two-shot"),
        (ELASTIC, "1"),
        (ELASTIC_WINDOW_MS, "250"),
        (MOCK_VERSION, "2.32.3"),
    ];
    let c = EnvConfig::from_lookup(env(&pairs)).unwrap();
    assert_eq!(
        c,
        EnvConfig {
            backend: Some(BackendChoice::Mock),
            timeout: Some(Duration::from_secs(123)),
            blocking_wait: true,
            async_error_handling: ErrorHandling::CleanUpOnly,
            enable_timing: true,
            nonblocking: true,
            nonblocking_timeout: None,
            high_priority: true,
            nan_check: true,
            desync_debug: true,
            dump_on_timeout: true,
            trace_buffer_size: 2000,
            enable_monitoring: false,
            heartbeat_timeout: Duration::ZERO,
            wait_timeout_dump: Duration::from_millis(5),
            coord_check: Duration::from_millis(7),
            peer_kernels: oxccl_core::peer_kernels::PeerPolicy::Force(
                oxccl_core::peer_kernels::KernelAlgo::TwoShot
            ),
            elastic: true,
            elastic_window: Duration::from_millis(250),
            mock_version: Some(oxccl_core::version::Version::new(2, 32, 3)),
        }
    );
    // Blocking wait forces NoHandling, whatever was asked.
    assert_eq!(c.error_handling(), ErrorHandling::NoHandling);
    let nccl = [(BACKEND, "nccl")];
    assert_eq!(
        EnvConfig::from_lookup(env(&nccl)).unwrap().backend,
        Some(BackendChoice::Nccl)
    );
}

#[test]
fn malformed_values_name_their_variable() {
    let cases: &[(&str, &str)] = &[
        (BACKEND, "gloo"),
        (BACKEND, ""),
        (MOCK_VERSION, "2.32"),
        (MOCK_VERSION, "2.32.3.1"),
        (TIMEOUT_MS, "0"),
        (TIMEOUT_MS, "10s"),
        (ASYNC_ERROR_HANDLING, "4"),
        (ASYNC_ERROR_HANDLING, "-1"),
        (ENABLE_TIMING, "yes"),
        (NONBLOCKING, ""),
        (NONBLOCKING_TIMEOUT_MS, "-5"),
        (HIGH_PRIORITY, "2"),
        (NAN_CHECK, "on"),
        (DESYNC_DEBUG, "1.0"),
        (DUMP_ON_TIMEOUT, "4294967295"),
        (TRACE_BUFFER_SIZE, "1048577"),
        (TRACE_BUFFER_SIZE, "-1"),
        (ENABLE_MONITORING, "abc"),
        (HEARTBEAT_TIMEOUT_SEC, "1e3"),
        (WAIT_TIMEOUT_DUMP_MS, "x"),
        (COORD_CHECK_MS, "0"),
        (PEER_KERNELS, "fast"),
        (PEER_KERNELS, ""),
        (PEER_KERNELS, " auto"),
    ];
    for (name, value) in cases {
        let pairs = [(*name, *value)];
        let e = EnvConfig::from_lookup(env(&pairs)).unwrap_err();
        assert_eq!(arg_of(&e), *name, "{name}={value:?}");
    }
}

#[test]
fn error_handling_codes_round_trip() {
    for code in 0..4u64 {
        let mode = ErrorHandling::from_code(code).unwrap();
        assert_eq!(u64::from(mode.code()), code);
        assert_eq!(effective_error_handling(false, mode), mode);
        assert_eq!(
            effective_error_handling(true, mode),
            ErrorHandling::NoHandling
        );
    }
    assert_eq!(ErrorHandling::from_code(4), None);
    assert_eq!(ErrorHandling::from_code(u64::MAX), None);
}

#[test]
fn seed_case_10_timeout_precedence() {
    let s = Duration::from_secs;
    // Default: 600 s.
    assert_eq!(effective_timeout(None, None, None), s(600));
    // Explicit 123 s → 123.
    assert_eq!(effective_timeout(Some(s(123)), None, None), s(123));
    // A timeout only in the backend options is ignored → 600.
    assert_eq!(effective_timeout(None, Some(s(123)), None), s(600));
    // Options 123 + explicit 1240 → 1240.
    assert_eq!(
        effective_timeout(Some(s(1240)), Some(s(123)), None),
        s(1240)
    );
    // Set at run time: each explicit set replaces the value → 23, then 252.
    let mut current = effective_timeout(Some(s(123)), None, None);
    current = effective_timeout(Some(s(23)), Some(current), None);
    assert_eq!(current, s(23));
    current = effective_timeout(Some(s(252)), Some(current), None);
    assert_eq!(current, s(252));
}

#[test]
fn env_timeout_sits_between_explicit_and_default() {
    let s = Duration::from_secs;
    assert_eq!(effective_timeout(None, None, Some(s(5))), s(5));
    assert_eq!(effective_timeout(None, Some(s(9)), Some(s(5))), s(5));
    assert_eq!(effective_timeout(Some(s(7)), None, Some(s(5))), s(7));
    let pairs = [(TIMEOUT_MS, "5000")];
    let c = EnvConfig::from_lookup(env(&pairs)).unwrap();
    assert_eq!(c.timeout_for(None, None), s(5));
    assert_eq!(c.timeout_for(Some(s(1)), None), s(1));
    assert_eq!(EnvConfig::default().timeout_for(None, Some(s(3))), s(600));
}

#[test]
fn markdown_table_lists_every_variable() {
    let mut out = heapless::String::<4096>::new();
    write_markdown_table(&mut out).unwrap();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("| variable | default | meaning |"));
    assert_eq!(lines.next(), Some("|---|---|---|"));
    assert_eq!(
        lines.next(),
        Some("| `OXCCL_BACKEND` | auto | `nccl`, `mock`, or `auto` (the process group chooses) |")
    );
    assert_eq!(out.lines().count(), 2 + VARIABLES.len());
    assert!(out.contains("| `OXCCL_HEARTBEAT_TIMEOUT_SEC` | 600 | "));
}

#[test]
fn backend_auto_is_unset() {
    let pairs = [(BACKEND, "AUTO")];
    assert_eq!(EnvConfig::from_lookup(env(&pairs)).unwrap().backend, None);
}

// PyTorch's names: `resolve` and `TORCH_VARIABLES`.

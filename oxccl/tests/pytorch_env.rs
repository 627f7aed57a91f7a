//! PyTorch's names for the process group's settings (`TORCH_NCCL_*`, and the older `NCCL_*`
//! ones) reach a group built from an environment, given as a map of variables as a launcher
//! would set them: taken where the `OXCCL_*` twin is unset, losing to it where it is set, a
//! refused value an error naming the variable set, and each note logged once per process.

use oxccl::launch::EnvVars;
use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::env::{ErrorHandling, Outcome};
use oxccl::store::{MemStore, Store};
use oxccl::{Error, ReduceOp};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn one_rank(o: PgOptions) -> ProcessGroup<MockBackend> {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    ProcessGroup::new(MockBackend::new(), store, 0, 1, o).unwrap()
}

#[test]
fn a_group_built_from_pytorch_names_gets_their_settings() {
    let vars = EnvVars::from_pairs([
        ("OXCCL_TIMEOUT_MS", "30000"),
        ("TORCH_NCCL_BLOCKING_WAIT", "1"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2"),
        ("TORCH_NCCL_ENABLE_TIMING", "1"),
        ("TORCH_NCCL_USE_COMM_NONBLOCKING", "1"),
        ("TORCH_NCCL_NONBLOCKING_TIMEOUT", "100"),
        ("TORCH_NCCL_HIGH_PRIORITY", "1"),
        ("TORCH_NCCL_NAN_CHECK", "1"),
        ("TORCH_NCCL_DESYNC_DEBUG", "1"),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
        ("TORCH_NCCL_ENABLE_MONITORING", "1"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "42"),
        ("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "1234"),
        ("TORCH_NCCL_COORD_CHECK_MILSEC", "250"),
        ("TORCH_NCCL_AVOID_RECORD_STREAMS", "1"),
    ]);
    let o = PgOptions::from_vars(&vars, None).unwrap();
    let pg = one_rank(o);
    let got = pg.options();
    assert_eq!(pg.timeout(), Duration::from_secs(30));
    // Blocking wait forces NoHandling over the 2 asked, as in PyTorch.
    assert_eq!(got.error_handling, ErrorHandling::NoHandling);
    assert!(got.timing);
    assert!(got.config.is_nonblocking());
    assert_eq!(got.nonblocking_timeout, Some(Duration::from_secs(100)));
    assert!(got.high_priority);
    assert!(got.nan_check);
    assert!(got.desync_debug);
    assert!(got.dump_on_timeout);
    assert_eq!(got.heartbeat, Some(Duration::from_secs(42)));
    assert_eq!(got.wait_timeout_dump, Duration::from_millis(1234));
    assert_eq!(got.coord_check, Duration::from_millis(250));
    // The group works with them: a nonblocking communicator, timing, the NaN check.
    let mut b = pg.upload(&[1.0f32, 2.0]).unwrap();
    let work = pg.all_reduce(&mut b, ReduceOp::Sum).unwrap();
    work.wait().unwrap();
    assert!(work.duration().is_ok(), "timing is on");
    assert_eq!(pg.download(&b).unwrap(), vec![1.0, 2.0]);
    pg.destroy();

    // The same without blocking wait: the mode asked is the mode in effect.
    let vars = EnvVars::from_pairs([("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")]);
    let o = PgOptions::from_vars(&vars, None).unwrap();
    assert_eq!(o.error_handling, ErrorHandling::CleanUpOnly);
    // PyTorch's older name.
    let vars = EnvVars::from_pairs([("NCCL_ASYNC_ERROR_HANDLING", "0")]);
    let o = PgOptions::from_vars(&vars, None).unwrap();
    assert_eq!(o.error_handling, ErrorHandling::NoHandling);
}

#[test]
fn oxccl_names_win_in_the_group() {
    let vars = EnvVars::from_pairs([
        ("TORCH_NCCL_ENABLE_TIMING", "1"),
        ("OXCCL_ENABLE_TIMING", "0"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "42"),
        ("OXCCL_HEARTBEAT_TIMEOUT_SEC", "7"),
        ("TORCH_NCCL_ENABLE_MONITORING", "0"),
        ("OXCCL_ENABLE_MONITORING", "1"),
    ]);
    let o = PgOptions::from_vars(&vars, None).unwrap();
    assert!(!o.timing);
    assert_eq!(o.heartbeat, Some(Duration::from_secs(7)));
    let s = vars.settings();
    let ignored: Vec<(&str, &Outcome)> = s
        .notes
        .iter()
        .map(|n| (n.name.as_str(), &n.outcome))
        .collect();
    assert_eq!(
        ignored,
        [
            (
                "TORCH_NCCL_ENABLE_MONITORING",
                &Outcome::Overridden {
                    by: "OXCCL_ENABLE_MONITORING"
                }
            ),
            (
                "TORCH_NCCL_ENABLE_TIMING",
                &Outcome::Overridden {
                    by: "OXCCL_ENABLE_TIMING"
                }
            ),
            (
                "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
                &Outcome::Overridden {
                    by: "OXCCL_HEARTBEAT_TIMEOUT_SEC"
                }
            ),
        ]
    );
}

#[test]
fn a_refused_pytorch_value_is_the_groups_error_naming_it() {
    let vars = EnvVars::from_pairs([("TORCH_NCCL_BLOCKING_WAIT", "maybe")]);
    match PgOptions::from_vars(&vars, None) {
        Err(Error::InvalidArgument { arg, expected }) => {
            assert_eq!(arg, "TORCH_NCCL_BLOCKING_WAIT");
            assert_eq!(expected.as_str(), "0, 1, true or false, got \"maybe\"");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let vars = EnvVars::from_pairs([("TORCH_NCCL_NONBLOCKING_TIMEOUT", "10s")]);
    match PgOptions::from_vars(&vars, None) {
        Err(Error::InvalidArgument { arg, expected }) => {
            assert_eq!(arg, "TORCH_NCCL_NONBLOCKING_TIMEOUT");
            assert_eq!(
                expected.as_str(),
                "whole seconds in 0..=1000000000, or -1 for no bound, got \"10s\""
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The log records of this process, kept.
struct Kept(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Kept {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        if let Ok(mut v) = self.0.lock() {
            v.push((r.level(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

static KEPT: Kept = Kept(Mutex::new(Vec::new()));

#[test]
fn each_note_is_logged_once_at_its_level() {
    log::set_logger(&KEPT).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Trace);
    // Values no other test of this binary uses, so their notes are new to the process.
    let vars = EnvVars::from_pairs([
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "4321"),
        ("TORCH_NCCL_CUDA_EVENT_CACHE", "4321"),
        ("TORCH_NCCL_MADE_UP", "4321"),
        ("OXCCL_TIMEOUT_MS", "4321s"),
    ]);
    for _ in 0..3 {
        let _ = vars.settings();
        let _ = PgOptions::from_vars(&vars, None);
    }
    let kept = KEPT.0.lock().unwrap().clone();
    for (level, line) in [
        (
            log::Level::Info,
            "oxccl environment: TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=4321: taken as \
             OXCCL_HEARTBEAT_TIMEOUT_SEC=4321",
        ),
        (
            log::Level::Warn,
            "oxccl environment: TORCH_NCCL_CUDA_EVENT_CACHE=4321: not honoured: oxccl has no \
             such switch",
        ),
        (
            log::Level::Warn,
            "oxccl environment: TORCH_NCCL_MADE_UP=4321: unknown: not a PyTorch NCCL setting \
             oxccl knows (docs/ENVIRONMENT.md lists them)",
        ),
        (
            log::Level::Warn,
            "oxccl environment: OXCCL_TIMEOUT_MS=4321s: invalid: expected a decimal integer in \
             1..=1000000000000, got \"4321s\"; the process group refuses it",
        ),
    ] {
        let found: Vec<_> = kept.iter().filter(|(_, l)| l == line).collect();
        assert_eq!(found.len(), 1, "{line}: {kept:#?}");
        assert_eq!(found[0].0, level, "{line}");
    }
}

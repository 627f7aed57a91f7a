//! A frozen store (every call blocks past the whole ending): the rank that times out has its
//! dump on disk at once, as does a rank that saw the dump request just before the store froze,
//! and each note ends up with the store's error.

use super::{dump_dir, DEADLINE, TIMEOUT_MS};
use oxccl::mock::{FaultPlan, MockBackend};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::env::ErrorHandling;
use oxccl::store::{MemStore, Store};
use oxccl::{ReduceOp, Result};
use oxccl_testkit::ranks::{self, wait_all};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Set in the child of a frozen-store case: its dump directory.
const FROZEN_CHILD: &str = "OXCCL_DUMP_ENDING_FROZEN_CHILD";
/// Set in the child of a frozen-store case: what it dumps for, `timeout` (its own operation
/// times out) or `signal` (another rank's signal, seen just before the store froze).
const FROZEN_HOW: &str = "OXCCL_DUMP_ENDING_FROZEN_HOW";
/// The frozen-store cases' limit on a failure's ending (`OXCCL_WAIT_TIMEOUT_DUMP_MS`): a
/// store call bounded by it gives up this long after the failure.
const FROZEN_WAIT: Duration = Duration::from_secs(8);
/// How soon after the failure (or the signal) the dump must be on disk: well before any
/// store call could have given up.
const FROZEN_DUMP_BOUND: Duration = Duration::from_secs(3);
/// How long a call to the frozen store blocks before it fails (as a client's timeout would):
/// past the whole ending, so no store call of the ending ever returns.
const FROZEN_STORE_TIMEOUT: Duration = Duration::from_secs(60);

/// A store that answers until frozen, then blocks every call for [`FROZEN_STORE_TIMEOUT`] and
/// fails: a client of a store whose host was stopped. With `watch_answered`, a check still
/// answers: a TCP store's client answers the dump request's check from its watch, which the
/// server answered before it froze.
#[derive(Default)]
struct Freezable {
    inner: MemStore,
    frozen: AtomicBool,
    watch_answered: AtomicBool,
    /// The dump request's key as the coordination check asks for it (under the group's
    /// namespace), once it asked.
    signal_key: std::sync::Mutex<Option<String>>,
}

impl Freezable {
    fn hold(&self) -> Result<()> {
        if self.frozen.load(Ordering::SeqCst) {
            // Nothing sets this key: the timeout's own error comes back.
            self.inner
                .wait(&["frozen/never-set"], FROZEN_STORE_TIMEOUT)?;
        }
        Ok(())
    }
}

impl Store for Freezable {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.hold()?;
        self.inner.set(key, value)
    }
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.hold()?;
        self.inner.get(key, timeout)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.hold()?;
        self.inner.add(key, delta)
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.hold()?;
        self.inner.wait(keys, timeout)
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        if let [key] = keys {
            if key.ends_with(oxccl::rules::watchdog::DUMP_REQUEST_KEY) {
                *self.signal_key.lock().unwrap() = Some(key.to_string());
            }
        }
        if !self.watch_answered.load(Ordering::SeqCst) {
            self.hold()?;
        }
        self.inner.check(keys)
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.hold()?;
        self.inner.compare_set(key, expected, desired)
    }
    fn delete(&self, key: &str) -> Result<bool> {
        self.hold()?;
        self.inner.delete(key)
    }
    fn num_keys(&self) -> Result<u64> {
        self.hold()?;
        self.inner.num_keys()
    }
    fn timeout(&self) -> Duration {
        FROZEN_STORE_TIMEOUT
    }
}

/// The note (`oxccl_dump`) of the JSON dump `text`.
fn dump_note(text: &str) -> serde_json::Value {
    let dump: serde_json::Value = serde_json::from_str(text).expect("a JSON dump");
    dump[oxccl::recorder::NOTE_KEY].clone()
}

/// The note of rank 0's dump in `dir`, once one is there (written atomically: a file there
/// is a whole dump).
fn note_in(dir: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join(oxccl::recorder::json_file_name(0))).ok()?;
    Some(dump_note(&text))
}

/// A frozen-store case's one rank, on the mock with its dumps in the directory `FROZEN_CHILD`
/// names; its store answers until the first all_reduce is done. `FROZEN_HOW=timeout`: then
/// the store freezes and the second all_reduce hangs and times out; the mode keeps the
/// process, so the error comes back here at once while the watchdog's ending runs, and the
/// exit waits for the ending. `FROZEN_HOW=signal`: rank 1's dump request is set, then the
/// store freezes (but for the signal's check); the rank waits until its dump's note holds a
/// store error (its rewrite at the end). Either way the rank says how long after the failure
/// (or the signal) its dump appeared, and whether that first dump held a store error.
#[test]
fn frozen_store_child() {
    let (Ok(dir), Ok(how)) = (std::env::var(FROZEN_CHILD), std::env::var(FROZEN_HOW)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let store = Arc::new(Freezable::default());
    let backend = MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::mock::DEFAULT_VERSION),
        FaultPlan::new().hang_op(0, 1),
        1,
        Duration::from_secs(60),
    );
    let opts = PgOptions {
        timeout: Duration::from_millis(TIMEOUT_MS),
        error_handling: ErrorHandling::CleanUpOnly,
        dump_on_timeout: true,
        trace_dir: Some(dir.clone()),
        wait_timeout_dump: FROZEN_WAIT,
        coord_check: Duration::from_millis(200),
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(backend, store.clone(), 0, 1, opts).expect("the group");
    let mut b = pg.upload(&[1.0f32; 8]).unwrap();
    pg.all_reduce(&mut b, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    let from = match how.as_str() {
        "timeout" => {
            store.frozen.store(true, Ordering::SeqCst);
            let r = pg.all_reduce(&mut b, ReduceOp::Sum).unwrap().wait();
            println!(
                "RESULT timed_out={}",
                matches!(r, Err(oxccl::Error::Timeout { .. }))
            );
            Instant::now()
        }
        "signal" => {
            let asked = Instant::now();
            let key = loop {
                if let Some(k) = store.signal_key.lock().unwrap().clone() {
                    break k;
                }
                assert!(
                    asked.elapsed() < Duration::from_secs(30),
                    "the coordination check never looked for the signal"
                );
                std::thread::sleep(Duration::from_millis(10));
            };
            store.inner.set(&key, b"1").unwrap();
            store.watch_answered.store(true, Ordering::SeqCst);
            store.frozen.store(true, Ordering::SeqCst);
            Instant::now()
        }
        other => panic!("unknown frozen-store case {other:?}"),
    };
    // Looked for past the time a dump that waited for the store would come, so that one is
    // seen (and measured) too.
    let look_until = FROZEN_WAIT + Duration::from_secs(5);
    let mut first = note_in(&dir);
    while first.is_none() && from.elapsed() < look_until {
        std::thread::sleep(Duration::from_millis(10));
        first = note_in(&dir);
    }
    let seen_ms = from.elapsed().as_millis();
    let first_error = match &first {
        Some(note) if note["store_error"].is_null() => "none",
        Some(_) => "set",
        None => "nodump",
    };
    println!("RESULT dump_ms={seen_ms} first_store_error={first_error}");
    if how == "signal" {
        // No exit guard holds an exit for a dump on a signal: the rewrite is waited for here.
        let rewritten = || note_in(&dir).is_some_and(|n| !n["store_error"].is_null());
        while !rewritten() && from.elapsed() < look_until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Runs the frozen-store case `how` (see `frozen_store_child`) and checks its dump: on disk
/// within [`FROZEN_DUMP_BOUND`] of the failure, without a store error then; the note of the
/// dump left once the rank ended, returned.
fn frozen_case(how: &str) -> serde_json::Value {
    let dir = dump_dir(&format!("frozen-{how}"));
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "frozen_store::frozen_store_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FROZEN_CHILD, &dir)
        .env(FROZEN_HOW, how)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ran = wait_all(vec![child], DEADLINE, &format!("frozen-{how}"), None);
    let out = &ran[0].out;
    assert_eq!(
        ran[0].code,
        Some(0),
        "{how}: the rank must end normally\n{out}"
    );
    let seen_ms: u64 = ranks::field(out, "dump_ms")
        .unwrap_or_else(|| panic!("{how}: no dump_ms\n{out}"))
        .parse()
        .unwrap();
    assert_eq!(
        ranks::field(out, "first_store_error"),
        Some("none"),
        "{how}: the first dump must be written before any store call could fail\n{out}"
    );
    assert!(
        Duration::from_millis(seen_ms) < FROZEN_DUMP_BOUND,
        "{how}: the dump came {seen_ms} ms after the failure (a store call bounded by the \
         ending's limit gives up after {FROZEN_WAIT:?})\n{out}"
    );
    let note = note_in(&dir).unwrap_or_else(|| panic!("{how}: no dump left\n{out}"));
    let _ = std::fs::remove_dir_all(&dir);
    note
}

/// With the store frozen (its host stopped: every call blocks past the whole ending), the rank
/// whose operation timed out has its dump on disk long before any store call could give up;
/// once the ending is over (the process exited, its exit having waited for it), the dump's
/// note holds the error of the signal it could not set.
#[test]
fn a_frozen_store_does_not_delay_the_failing_ranks_dump() {
    let note = frozen_case("timeout");
    assert_eq!(note["cause"], "own failure", "{note}");
    assert_eq!(
        note["store_error"], "the store did not answer in time while setting the dump request",
        "{note}"
    );
}

/// A rank that sees another rank's dump request just before the store froze dumps at once,
/// before it asks the store who signalled; its dump's note ends up with the error of the
/// report it could not make (and no signaller: the store never said).
#[test]
fn a_frozen_store_does_not_delay_the_dump_on_a_signal() {
    let note = frozen_case("signal");
    assert_eq!(note["cause"], "signal", "{note}");
    assert!(note["signalled_by"].is_null(), "{note}");
    assert_eq!(
        note["store_error"], "the store did not answer in time while reporting the dump",
        "{note}"
    );
}

//! The file store, the in-memory store and the prefix view: every operation, instances that
//! share a file, timeouts, and counters under contention.

use oxccl_store::Error;
use oxccl_store::{FileStore, MemStore, PrefixStore, Store, DEFAULT_STORE_TIMEOUT};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHORT: Duration = Duration::from_millis(50);
const LONG: Duration = Duration::from_secs(10);

/// A fresh path under the temp dir, removed when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> TempPath {
        let p = std::env::temp_dir().join(format!("oxccl-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempPath(p)
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn arg_of(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument { arg, .. } => arg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// Every Store operation, on an empty store.
fn exercise(s: &dyn Store) {
    assert_eq!(s.num_keys().unwrap(), 0);
    assert!(!s.check(&["a"]).unwrap());
    assert!(s.check(&[]).unwrap());

    s.set("a", b"1").unwrap();
    assert_eq!(s.get("a", SHORT).unwrap(), b"1");
    s.set("a", b"").unwrap();
    assert_eq!(s.get("a", SHORT).unwrap(), b"");
    s.set("a", &[0, 255, 7]).unwrap();
    assert_eq!(s.get("a", SHORT).unwrap(), [0, 255, 7]);
    assert!(s.check(&["a"]).unwrap());

    assert_eq!(s.add("n", 5).unwrap(), 5);
    assert_eq!(s.add("n", -7).unwrap(), -2);
    assert_eq!(s.get("n", SHORT).unwrap(), b"-2");
    assert_eq!(arg_of(&s.add("a", 1).unwrap_err()), "key");
    s.set("big", i64::MAX.to_string().as_bytes()).unwrap();
    assert_eq!(arg_of(&s.add("big", 1).unwrap_err()), "delta");
    assert_eq!(
        s.get("big", SHORT).unwrap(),
        i64::MAX.to_string().as_bytes()
    );

    // compare_set: missing + empty expected sets; missing + other expected returns expected;
    // match sets; mismatch returns the current value.
    assert_eq!(s.compare_set("c", b"", b"x").unwrap(), b"x");
    assert_eq!(s.compare_set("d", b"q", b"y").unwrap(), b"q");
    assert!(!s.check(&["d"]).unwrap());
    assert_eq!(s.compare_set("c", b"x", b"z").unwrap(), b"z");
    assert_eq!(s.compare_set("c", b"x", b"w").unwrap(), b"z");
    assert_eq!(s.get("c", SHORT).unwrap(), b"z");

    assert_eq!(s.num_keys().unwrap(), 4); // a, n, big, c
    s.wait(&["a", "n", "c"], SHORT).unwrap();
    assert!(s.delete("c").unwrap());
    assert!(!s.delete("c").unwrap());
    assert_eq!(s.num_keys().unwrap(), 3);

    let t = Instant::now();
    let e = s.get("c", SHORT).unwrap_err();
    assert!(t.elapsed() >= SHORT);
    assert!(matches!(e, Error::Timeout { after_ms: 50, .. }), "{e:?}");
    assert!(e.to_string().contains("c] to be set"), "{e}");
    let e = s.wait(&["a", "missing"], SHORT).unwrap_err();
    assert!(matches!(e, Error::Timeout { after_ms: 50, .. }), "{e:?}");
    assert!(e.to_string().contains("a, "), "{e}");
    assert!(e.to_string().contains("missing] to be set"), "{e}");
    // A zero timeout still answers for a key that is there.
    assert_eq!(s.get("a", Duration::ZERO).unwrap(), [0, 255, 7]);
}

/// A waiter on `waiter` is woken by a set on `setter` (another instance of the same store).
fn wakes(waiter: Arc<dyn Store>, setter: Arc<dyn Store>) {
    let t = std::thread::spawn(move || waiter.get("late", LONG));
    std::thread::sleep(Duration::from_millis(30));
    setter.set("late", b"v").unwrap();
    assert_eq!(t.join().unwrap().unwrap(), b"v");
}

#[test]
fn file_store_every_operation() {
    let p = TempPath::new("every");
    let s = FileStore::new(&p.0, None).unwrap();
    assert_eq!(s.timeout(), DEFAULT_STORE_TIMEOUT);
    assert_eq!(s.path(), p.0.as_path());
    exercise(&s);
    let s = s.with_timeout(Duration::from_secs(3));
    assert_eq!(s.timeout(), Duration::from_secs(3));
}

#[test]
fn file_store_instances_agree() {
    let p = TempPath::new("agree");
    let a: Arc<dyn Store> = Arc::new(FileStore::new(&p.0, None).unwrap());
    let b: Arc<dyn Store> = Arc::new(FileStore::new(&p.0, None).unwrap());
    a.set("k", b"from a").unwrap();
    assert_eq!(b.get("k", SHORT).unwrap(), b"from a");
    assert_eq!(a.add("n", 1).unwrap(), 1);
    assert_eq!(b.add("n", 1).unwrap(), 2);
    assert!(b.delete("k").unwrap());
    assert!(!a.check(&["k"]).unwrap());
    assert_eq!(a.compare_set("k", b"", b"1").unwrap(), b"1");
    assert_eq!(b.compare_set("k", b"", b"2").unwrap(), b"1");
    assert_eq!(a.num_keys().unwrap(), 2);
    // A third instance opened late replays everything.
    let c = FileStore::new(&p.0, None).unwrap();
    assert_eq!(c.get("n", SHORT).unwrap(), b"2");
    wakes(a, b);
}

#[test]
fn file_store_add_from_many_threads() {
    let p = TempPath::new("many");
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let path = p.0.clone();
            std::thread::spawn(move || {
                let s = FileStore::new(&path, None).unwrap();
                let mut last = 0;
                for _ in 0..25 {
                    let now = s.add("count", 1).unwrap();
                    assert!(now > last);
                    last = now;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = FileStore::new(&p.0, None).unwrap();
    assert_eq!(s.get("count", SHORT).unwrap(), b"200");
    // One instance shared by threads too.
    let s = Arc::new(s);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..25).for_each(|_| {
                    s.add("count", 1).unwrap();
                })
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(s.add("count", 0).unwrap(), 300);
}

#[test]
fn file_store_last_instance_removes_the_file() {
    let p = TempPath::new("cleanup");
    let a = FileStore::new(&p.0, Some(2)).unwrap();
    let b = FileStore::new(&p.0, Some(2)).unwrap();
    a.set("k", b"v").unwrap();
    assert_eq!(b.num_keys().unwrap(), 1); // the internal counter is not a key
    drop(a);
    assert!(p.0.exists());
    assert_eq!(b.num_keys().unwrap(), 1);
    drop(b);
    assert!(!p.0.exists());
}

#[test]
fn file_store_bad_inputs_are_errors() {
    let e = FileStore::new("/nonexistent-oxccl-dir/x/store", None).unwrap_err();
    assert_eq!(arg_of(&e), "path");
    let p = TempPath::new("zero");
    assert_eq!(
        arg_of(&FileStore::new(&p.0, Some(0)).unwrap_err()),
        "world_size"
    );
    // A file that is not a store log.
    std::fs::write(&p.0, b"\x07garbage").unwrap();
    let s = FileStore::new(&p.0, None).unwrap();
    let e = s.get("k", SHORT).unwrap_err();
    assert!(matches!(e, Error::Remote { .. }), "{e:?}");
    assert!(e.to_string().contains("corrupt at byte 0"), "{e}");
    assert!(matches!(
        s.set("k", b"v").unwrap_err(),
        Error::Remote { .. }
    ));
    // A record cut short.
    std::fs::write(&p.0, [1u8, 5, 0, 0, 0, b'a']).unwrap();
    let s = FileStore::new(&p.0, None).unwrap();
    assert!(matches!(s.num_keys().unwrap_err(), Error::Remote { .. }));
}

#[test]
fn mem_store_every_operation() {
    let s = MemStore::new();
    assert_eq!(s.timeout(), DEFAULT_STORE_TIMEOUT);
    exercise(&s);
    assert_eq!(MemStore::with_timeout(SHORT).timeout(), SHORT);
    let s: Arc<dyn Store> = Arc::new(MemStore::default());
    wakes(s.clone(), s);
}

#[test]
fn mem_store_add_from_many_threads() {
    let s = Arc::new(MemStore::new());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..100).for_each(|_| {
                    s.add("n", 1).unwrap();
                })
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(s.get("n", SHORT).unwrap(), b"800");
}

#[test]
fn prefix_store_every_operation() {
    let base: Arc<dyn Store> = Arc::new(MemStore::new());
    exercise(&PrefixStore::new("pg0", base.clone()));
    // The keys live under `pg0/` in the wrapped store.
    assert_eq!(base.get("pg0/a", SHORT).unwrap(), [0, 255, 7]);
    assert_eq!(base.get("pg0/n", SHORT).unwrap(), b"-2");
    assert!(!base.check(&["a"]).unwrap());
}

#[test]
fn prefix_stores_keep_groups_apart_and_nest() {
    let p = TempPath::new("prefix");
    let base: Arc<dyn Store> = Arc::new(FileStore::new(&p.0, None).unwrap().with_timeout(SHORT));
    let a = PrefixStore::new("a", base.clone());
    let b = PrefixStore::new("b", base.clone());
    assert_eq!(a.prefix(), "a");
    assert_eq!(a.key("k"), "a/k");
    a.set("k", b"1").unwrap();
    b.set("k", b"2").unwrap();
    assert_eq!(a.get("k", SHORT).unwrap(), b"1");
    assert_eq!(b.get("k", SHORT).unwrap(), b"2");
    assert!(a.delete("k").unwrap());
    assert!(!a.check(&["k"]).unwrap());
    assert!(b.check(&["k"]).unwrap());
    // num_keys and timeout are the wrapped store's.
    assert_eq!(a.num_keys().unwrap(), 1);
    assert_eq!(a.timeout(), SHORT);
    assert_eq!(a.inner().num_keys().unwrap(), 1);
    let nested = PrefixStore::new("c", Arc::new(a.clone()));
    nested.set("k", b"3").unwrap();
    assert_eq!(base.get("a/c/k", SHORT).unwrap(), b"3");
    nested.wait(&["k"], SHORT).unwrap();
    assert!(matches!(
        nested.wait(&["other"], SHORT).unwrap_err(),
        Error::Timeout { .. }
    ));
    assert!(format!("{a:?}").contains("\"a\""));
}

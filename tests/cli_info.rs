//! `oxccl info --library <lib> --json` for every NCCL release cached by
//! scripts/fetch-nccl.sh: the version and the feature availability it reports.

use std::path::Path;
use std::process::Command;

fn releases() -> Vec<(String, std::path::PathBuf)> {
    let cache = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/nccl");
    let mut out: Vec<_> = std::fs::read_dir(&cache)
        .map(|d| {
            d.flatten()
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        e.path().join("lib/libnccl.so.2"),
                    )
                })
                .filter(|(_, p)| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    if out.is_empty() {
        let msg = format!(
            "no NCCL releases under {}: run scripts/fetch-nccl.sh",
            cache.display()
        );
        if std::env::var("OXCCL_SKIP_REAL_NCCL").as_deref() == Ok("1") {
            eprintln!("SKIPPED: {msg}");
        } else {
            panic!("{msg} (or set OXCCL_SKIP_REAL_NCCL=1)");
        }
    }
    out
}

#[test]
fn info_json_reports_version_and_features_of_each_release() {
    for (version, lib) in releases() {
        let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
            .args(["info", "--json", "--library"])
            .arg(&lib)
            .output()
            .expect("oxccl runs");
        let json = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{version}: {json} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            json.contains(&format!("\"version\": \"{version}\"")),
            "{json}"
        );
        let v = oxccl_core::Version::new(
            version.split('.').next().unwrap().parse().unwrap(),
            version.split('.').nth(1).unwrap().parse().unwrap(),
            version.split('.').nth(2).unwrap().parse().unwrap(),
        );
        // Every release in the matrix exports every symbol its version promises.
        let expected = oxccl_core::FeatureSet::for_version(v);
        for f in oxccl_core::Feature::ALL {
            let line = format!(
                "{{\"name\": \"{}\", \"since\": \"{}\", \"available\": {}",
                f.name(),
                f.since(),
                expected.has(f)
            );
            assert!(
                json.contains(&line),
                "{version}: missing `{line}` in {json}"
            );
        }
    }
}

#[test]
fn info_without_a_library_fails_and_lists_places() {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(["info", "--library", "/nonexistent/libnccl.so.2"])
        .output()
        .expect("oxccl runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/libnccl.so.2: no such file")
    );
}

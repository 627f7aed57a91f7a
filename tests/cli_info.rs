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
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{version}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
        let lib_json = &json["library"];
        assert_eq!(lib_json["found"], true);
        assert_eq!(lib_json["how"], "--library");
        assert_eq!(lib_json["version"], version.as_str(), "{text}");
        let v = oxccl_core::Version::new(
            version.split('.').next().unwrap().parse().unwrap(),
            version.split('.').nth(1).unwrap().parse().unwrap(),
            version.split('.').nth(2).unwrap().parse().unwrap(),
        );
        // Every release in the matrix exports every symbol its version promises.
        let expected = oxccl_core::FeatureSet::for_version(v);
        let features = lib_json["features"].as_array().expect("features");
        assert_eq!(features.len(), oxccl_core::Feature::ALL.len());
        for f in oxccl_core::Feature::ALL {
            let got = features
                .iter()
                .find(|x| x["name"] == f.name())
                .unwrap_or_else(|| panic!("{version}: {} missing", f.name()));
            assert_eq!(got["since"], f.since().to_string().as_str());
            assert_eq!(got["available"], expected.has(f), "{version}: {}", f.name());
            // An unavailable feature says why; an available one has no reason.
            assert_eq!(got.get("reason").is_some(), !expected.has(f), "{got}");
        }
        // The rest of the report is there whatever the machine has.
        assert!(json["gpu"]["gpus"].is_array());
        assert!(json["environment"].is_object());
        assert!(json["launcher"].get("recognised").is_some());
    }
}

#[test]
fn info_without_a_library_fails_and_lists_places() {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(["info", "--library", "/nonexistent/libnccl.so.2"])
        .output()
        .expect("oxccl runs");
    assert_eq!(out.status.code(), Some(3), "environment error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/libnccl.so.2: no such file"),
        "{err}"
    );
    assert!(
        err.contains("nvidia-nccl-cu12") && err.contains("OXCCL_NCCL_LIBRARY"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn info_search_lists_every_place_tried_in_json() {
    let out = Command::new(env!("CARGO_BIN_EXE_oxccl"))
        .args(["info", "--json"])
        .env("OXCCL_NCCL_LIBRARY", "")
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .env("PATH", "/nonexistent")
        .env("HOME", "/nonexistent")
        .env("PYENV_ROOT", "/nonexistent")
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX")
        .env("NCCL_DEBUG", "WARN")
        .output()
        .expect("oxccl runs");
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("JSON even without a library");
    assert_eq!(json["environment"]["NCCL_DEBUG"], "WARN");
    if json["library"]["found"] == true {
        println!("skipped: a system libnccl is installed here");
        return;
    }
    assert_eq!(out.status.code(), Some(3));
    let tried = json["library"]["tried"].as_array().unwrap();
    assert_eq!(tried[0]["place"], "OXCCL_NCCL_LIBRARY");
    assert!(tried
        .iter()
        .any(|t| t["place"] == "libnccl.so.2 (system search)"));
    assert!(json["library"]["how_to_get_one"]
        .as_str()
        .unwrap()
        .contains("nvidia-nccl-cu12"));
}

#[test]
fn info_names_the_launcher_and_this_ranks_place() {
    let run = |vars: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_oxccl"));
        c.arg("info");
        for k in [
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "SLURM_PROCID",
            "SLURM_JOB_ID",
            "SLURM_STEP_ID",
            "SLURM_STEPID",
            "MASTER_ADDR",
            "MASTER_PORT",
            "PMI_RANK",
        ] {
            c.env_remove(k);
        }
        for (k, v) in vars {
            c.env(k, v);
        }
        let out = c.output().expect("oxccl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "h"),
        ("MASTER_PORT", "1"),
    ];
    let text = run(&ompi);
    assert!(
        text.contains("launcher:  OpenMpi: rank 1 of 4, local rank not given by the launcher"),
        "{text}"
    );
    let text = run(&[&ompi[..], &[("OMPI_COMM_WORLD_LOCAL_RANK", "1")]].concat());
    assert!(
        text.contains("launcher:  OpenMpi: rank 1 of 4, local rank 1\n"),
        "{text}"
    );
    assert!(
        text.contains("  store:   rank 0's at h, port 1 (MASTER_PORT)\n"),
        "{text}"
    );
    // srun without MASTER_PORT: the port the job step gives, and the rule that gave it.
    let srun = [
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_ID", "123456"),
        ("SLURM_STEP_ID", "7"),
        ("SLURM_STEP_NODELIST", "gpu[07-08]"),
    ];
    let text = run(&srun);
    assert!(
        text.contains(
            "  store:   rank 0's at gpu07, port 28135 (derived from Slurm job 123456 step 7 by \
             20000 + (5063 × SLURM_JOB_ID + SLURM_STEP_ID) mod 8192 (MASTER_PORT unset))\n"
        ),
        "{text}"
    );
}

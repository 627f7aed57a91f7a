//! `oxccl info --library <lib> --json` for every NCCL release cached by
//! scripts/fetch-nccl.sh: the version and the feature availability it reports; cut and
//! corrupted copies of them refused with the reason and exit code 3, never a signal; a FIFO
//! refused at once instead of a hang; a path byte that is not UTF-8 shown as `\x9b` on every
//! line.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The cache of releases: `OXCCL_NCCL_CACHE`, else `<repo>/.cache/nccl` (as
/// scripts/fetch-nccl.sh and the loader's tests).
fn cache_dir() -> PathBuf {
    match std::env::var_os("OXCCL_NCCL_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(".cache/nccl"),
    }
}

fn releases() -> Vec<(String, std::path::PathBuf)> {
    let cache = cache_dir();
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
        let v = oxccl::core::Version::new(
            version.split('.').next().unwrap().parse().unwrap(),
            version.split('.').nth(1).unwrap().parse().unwrap(),
            version.split('.').nth(2).unwrap().parse().unwrap(),
        );
        // Every release in the matrix exports every symbol its version promises.
        let expected = oxccl::core::FeatureSet::for_version(v);
        let features = lib_json["features"].as_array().expect("features");
        assert_eq!(features.len(), oxccl::core::Feature::ALL.len());
        for f in oxccl::core::Feature::ALL {
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

/// `dir/name`: the first `len` bytes of `src`, the real bytes up to 1 MiB and a hole after
/// (the loader's check reads only the headers, under 1 KiB), with `patch` (offset, bytes)
/// written over it.
fn cut_copy(
    src: &Path,
    dir: &Path,
    name: &str,
    len: u64,
    patch: Option<(usize, &[u8])>,
) -> PathBuf {
    let dst = dir.join(name);
    let mut prefix = Vec::new();
    std::fs::File::open(src)
        .unwrap()
        .take(len.min(1 << 20))
        .read_to_end(&mut prefix)
        .unwrap();
    if let Some((at, bytes)) = patch {
        prefix[at..at + bytes.len()].copy_from_slice(bytes);
    }
    let mut f = std::fs::File::create(&dst).unwrap();
    f.write_all(&prefix).unwrap();
    f.set_len(len).unwrap();
    dst
}

/// A fresh scratch folder for this process and `name`.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxccl-cli-info-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// (end of the program header table, end of the first program header's segment, end of the
/// section header table) of a release, read with plain offsets.
fn ends(lib: &Path) -> (u64, u64, u64) {
    let mut h = vec![0u8; 4096];
    std::fs::File::open(lib)
        .unwrap()
        .read_exact(&mut h)
        .unwrap();
    let u16_at = |at: usize| u64::from(u16::from_le_bytes(h[at..at + 2].try_into().unwrap()));
    let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap());
    let phoff = u64_at(32);
    let ph0 = phoff as usize;
    assert_eq!(h[ph0], 1, "program header 0 is a LOAD");
    (
        phoff + u16_at(56) * 56,
        u64_at(ph0 + 8) + u64_at(ph0 + 32),
        u64_at(40) + u16_at(60) * u16_at(58),
    )
}

/// Runs `oxccl info` with `args` and `envs`: its exit code (a signal fails the test), stdout
/// and stderr.
fn info(args: &[&std::ffi::OsStr], envs: &[(&str, &std::ffi::OsStr)]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_oxccl"));
    c.arg("info").args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = c.output().expect("oxccl runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.signal(), None, "killed by a signal: {err}");
    let code = out.status.code().expect("an exit code");
    (code, String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

#[test]
fn info_refuses_a_cut_library_with_the_reason_and_exit_code_3() {
    let dir = scratch("cut");
    for (version, lib) in releases() {
        let size = std::fs::metadata(&lib).unwrap().len();
        let (table_end, load0_end, sections_end) = ends(&lib);
        let cases = [
            (
                64,
                format!("the program header table ends at byte {table_end}, the file has 64"),
            ),
            (
                4096,
                format!("program header 0 (LOAD) ends at byte {load0_end}, the file has 4096"),
            ),
            (
                300 * 1024,
                format!("program header 0 (LOAD) ends at byte {load0_end}, the file has 307200"),
            ),
            (
                size / 2,
                format!(
                    "program header 0 (LOAD) ends at byte {load0_end}, the file has {}",
                    size / 2
                ),
            ),
            (
                size - 1,
                format!(
                    "the section header table ends at byte {sections_end}, the file has {}",
                    size - 1
                ),
            ),
        ];
        for (len, what) in cases {
            let copy = cut_copy(&lib, &dir, &format!("{version}-{len}.so"), len, None);
            let want = format!(
                "{}: not a loadable shared library: truncated: {what}",
                copy.display()
            );
            let (code, _, err) = info(&["--library".as_ref(), copy.as_os_str()], &[]);
            assert_eq!(code, 3, "{version} at {len}: {err}");
            assert!(
                err.starts_with(&format!("oxccl info: {want}; ")),
                "{version} at {len}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            let (code, out, _) = info(
                &["--json".as_ref(), "--library".as_ref(), copy.as_os_str()],
                &[],
            );
            assert_eq!(code, 3);
            let json: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
            assert_eq!(json["library"]["found"], false);
            assert_eq!(json["library"]["error"], want.as_str());
            std::fs::remove_file(&copy).unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn info_refuses_a_corrupted_library_named_by_the_environment_variable() {
    let dir = scratch("corrupt");
    for (version, lib) in releases() {
        let size = std::fs::metadata(&lib).unwrap().len();
        let cases: [(&str, usize, &[u8], &str); 3] = [
            ("class", 4, &[1], "ELF class 1 (ELFCLASS32, 32-bit), but this process loads only 64-bit libraries (ELFCLASS64)"),
            ("type", 16, &[2, 0], "ELF type 2 (ET_EXEC, an executable), not a shared object (ET_DYN)"),
            ("magic", 1, b"Z", "not an ELF file: it starts with 7f 5a 4c 46, an ELF file with 7f 45 4c 46"),
        ];
        for (name, at, bytes, what) in cases {
            let copy = cut_copy(
                &lib,
                &dir,
                &format!("{version}-{name}.so"),
                size,
                Some((at, bytes)),
            );
            let (code, _, err) = info(&[], &[("OXCCL_NCCL_LIBRARY", copy.as_os_str())]);
            assert_eq!(code, 3, "{version} {name}: {err}");
            let want = format!(
                "oxccl info: {}: not a loadable shared library: {what}; ",
                copy.display()
            );
            assert!(err.starts_with(&want), "{version} {name}: {err}");
            std::fs::remove_file(&copy).unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn info_search_refuses_a_cut_library_in_ld_library_path() {
    let Some((_, lib)) = releases().pop() else {
        return;
    };
    let dir = scratch("search");
    let copy = cut_copy(&lib, &dir, "libnccl.so.2", 4096, None);
    let (_, load0_end, _) = ends(&lib);
    let (code, out, err) = info(
        &["--json".as_ref()],
        &[
            ("OXCCL_NCCL_LIBRARY", "".as_ref()),
            ("LD_LIBRARY_PATH", dir.as_os_str()),
            ("PATH", "/nonexistent".as_ref()),
            ("HOME", "/nonexistent".as_ref()),
            ("PYENV_ROOT", "/nonexistent".as_ref()),
            ("VIRTUAL_ENV", "".as_ref()),
            ("CONDA_PREFIX", "".as_ref()),
        ],
    );
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    if json["library"]["found"] == true {
        println!("skipped: a system libnccl.so loaded after the refused one");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    assert_eq!(code, 3, "{err}");
    let tried = json["library"]["tried"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let by_name = tried
        .iter()
        .find(|t| t["place"] == "libnccl.so.2 (system search)")
        .unwrap_or_else(|| panic!("the name was tried: {out} {err}"));
    assert_eq!(
        by_name["reason"],
        format!(
            "not loadable: {}: truncated: program header 0 (LOAD) ends at byte {load0_end}, the file has 4096",
            copy.display()
        )
        .as_str()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `oxccl info` with `args` and `envs` as [`info`] does, but kills it and fails the test
/// when it has not exited within `limit` (a load blocked on a FIFO), instead of hanging.
fn info_within(
    limit: Duration,
    args: &[&OsStr],
    envs: &[(&str, &OsStr)],
    dir: &Path,
) -> (i32, String, String) {
    // Output to files: a pipe nobody reads while polling could fill and stall the child.
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut c = Command::new(env!("CARGO_BIN_EXE_oxccl"));
    c.arg("info")
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    for (k, v) in envs {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("oxccl runs");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("oxccl info {args:?} {envs:?} still running after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    let err = read(&err_path);
    assert_eq!(status.signal(), None, "killed by a signal: {err}");
    (status.code().expect("an exit code"), read(&out_path), err)
}

#[test]
fn info_refuses_a_fifo_promptly_naming_it() {
    let dir = scratch("fifo");
    let fifo = dir.join("libnccl.so.2");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let want = format!(
        "{}: a FIFO (named pipe), not a regular file; a shared library file was expected",
        fifo.display()
    );
    let limit = Duration::from_secs(20);
    let by_flag: [&OsStr; 2] = ["--library".as_ref(), fifo.as_os_str()];
    for (args, envs) in [
        (&by_flag[..], &[][..]),
        (&[][..], &[("OXCCL_NCCL_LIBRARY", fifo.as_os_str())][..]),
    ] {
        let (code, out, err) = info_within(limit, args, envs, &dir);
        assert_eq!(code, 3, "{err}");
        assert!(err.starts_with(&format!("oxccl info: {want}; ")), "{err}");
        assert!(
            out.contains(&format!("library:   none found ({want})\n")),
            "{out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Builds with gcc the shared library `out` from the C source `c`.
fn build_library(c: &str, out: &Path) {
    let src = out.with_extension("c");
    std::fs::write(&src, c).unwrap();
    let built = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(&src)
        .output()
        .expect("gcc runs (needed to build a stand-in NCCL)");
    assert!(
        built.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// One run of `oxccl info` in the test below.
struct Run<'a> {
    what: &'a str,
    args: Vec<&'a OsStr>,
    envs: Vec<(&'a str, &'a OsStr)>,
    /// Its exit code.
    code: i32,
    /// How many lines of its output show the path, at least.
    lines: usize,
}

#[test]
fn info_shows_a_path_byte_that_is_not_utf8_as_hex_on_every_line() {
    let dir = scratch("not-utf8");
    let odd = dir.join(OsStr::from_bytes(b"lib\x9b"));
    std::fs::create_dir(&odd).unwrap();
    // A stand-in NCCL (2.23.4, no other function), one whose load fails with a dlerror text
    // that quotes its path, and a path with nothing there.
    let good = odd.join("libnccl.so.2");
    build_library(
        "int ncclGetVersion(int *v) { *v = 22304; return 0; }\n",
        &good,
    );
    let broken = odd.join("libbroken.so");
    build_library(
        "extern void oxccl_test_missing(void);\n\
         int ncclGetVersion(int *v) { oxccl_test_missing(); *v = 22304; return 0; }\n",
        &broken,
    );
    let missing = odd.join("missing.so");
    // How the folder shows, and the part of it before the odd byte.
    let shown = format!("{}/lib\\x9b/", dir.display());
    let prefix = format!("{}/lib", dir.display());
    fn flag(p: &Path) -> Vec<&OsStr> {
        vec!["--library".as_ref(), p.as_os_str()]
    }
    fn var(p: &Path) -> Vec<(&str, &OsStr)> {
        vec![("OXCCL_NCCL_LIBRARY", p.as_os_str())]
    }
    let runs = [
        Run {
            what: "loaded by --library",
            args: flag(&good),
            envs: vec![],
            code: 0,
            lines: 1,
        },
        Run {
            what: "loaded by the variable",
            args: vec![],
            envs: var(&good),
            code: 0,
            lines: 2,
        },
        Run {
            what: "refused by dlopen",
            args: flag(&broken),
            envs: vec![],
            code: 3,
            lines: 2,
        },
        Run {
            what: "missing, by the variable",
            args: vec![],
            envs: var(&missing),
            code: 3,
            lines: 3,
        },
    ];
    for Run {
        what,
        args,
        envs,
        code: want_code,
        lines: want_lines,
    } in runs
    {
        let (code, out, err) = info(&args, &envs);
        assert_eq!(code, want_code, "{what}: {out}{err}");
        let all = format!("{out}{err}");
        // A raw byte that is not UTF-8 reads back as U+FFFD here too.
        assert!(!all.contains('\u{fffd}'), "{what}: U+FFFD in {all}");
        let lines: Vec<&str> = all.lines().filter(|l| l.contains(&prefix)).collect();
        assert!(lines.len() >= want_lines, "{what}: {lines:#?}");
        for line in lines {
            assert_eq!(
                line.matches(&prefix).count(),
                line.matches(&shown).count(),
                "{what}: the path not as {shown:?} in {line:?}"
            );
        }
        // The JSON report says it the same way.
        let json_args: Vec<&OsStr> = std::iter::once("--json".as_ref()).chain(args).collect();
        let (_, out, _) = info(&json_args, &envs);
        assert!(!out.contains('\u{fffd}'), "{what}: U+FFFD in {out}");
        let json: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
        let lib = &json["library"];
        let text = if want_code == 0 {
            lib["path"].as_str().unwrap().to_owned()
        } else {
            lib["error"].as_str().unwrap().to_owned()
        };
        assert!(text.starts_with(&shown), "{what}: {text}");
        assert_eq!(
            text.matches(&prefix).count(),
            text.matches(&shown).count(),
            "{what}: {text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

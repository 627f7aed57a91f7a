//! Helpers shared by the tests that use real NCCL releases from `scripts/fetch-nccl.sh`.
#![allow(dead_code)] // Each test file uses a part.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The cache of releases: `OXCCL_NCCL_CACHE`, else `<repo>/.cache/nccl`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("OXCCL_NCCL_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/nccl"),
    }
}

/// One cached release.
pub struct Release {
    pub version: String,
    pub lib: PathBuf,
    pub include: PathBuf,
}

/// Every cached release, oldest first.
pub fn releases() -> Vec<Release> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(cache_dir()) else {
        return out;
    };
    for e in entries.flatten() {
        let dir = e.path();
        let lib = dir.join("lib/libnccl.so.2");
        let include = dir.join("include");
        if lib.is_file() && include.join("nccl.h").is_file() {
            let version = e.file_name().to_string_lossy().into_owned();
            out.push(Release {
                version,
                lib,
                include,
            });
        }
    }
    out.sort_by_key(|r| version_key(&r.version));
    out
}

pub fn version_key(v: &str) -> Vec<u32> {
    v.split('.').map(|n| n.parse().unwrap_or(0)).collect()
}

/// The releases, or a failure telling how to get them (a skip only with
/// `OXCCL_SKIP_REAL_NCCL=1`).
pub fn releases_or_fail() -> Vec<Release> {
    let r = releases();
    if r.is_empty() {
        let msg = format!(
            "no NCCL releases under {}: run scripts/fetch-nccl.sh (or set OXCCL_SKIP_REAL_NCCL=1 to skip)",
            cache_dir().display()
        );
        if std::env::var("OXCCL_SKIP_REAL_NCCL").as_deref() == Ok("1") {
            eprintln!("SKIPPED: {msg}");
        } else {
            panic!("{msg}");
        }
    }
    r
}

/// A fresh scratch folder for this process and `name`.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oxccl-loader-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The fields of `ncclConfig_t` in `include/nccl.h`, read from the header text (empty when the
/// release has no config).
pub fn header_config_fields(include: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(include.join("nccl.h")).unwrap();
    let Some(start) = text.find("typedef struct ncclConfig") else {
        return Vec::new();
    };
    let body = &text[start..];
    let end = body.find("} ncclConfig_t;").expect("end of ncclConfig_t");
    let body = &body[body.find('{').unwrap() + 1..end];
    let mut fields = Vec::new();
    let mut clean = String::new();
    let mut rest = body;
    // Drop /* */ and // comments.
    while let Some(i) = rest.find("/*") {
        clean.push_str(&rest[..i]);
        rest = &rest[rest[i..].find("*/").map(|j| i + j + 2).unwrap()..];
    }
    clean.push_str(rest);
    for decl in clean
        .lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<String>()
        .split(';')
    {
        let name: String = decl
            .trim()
            .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap_or("")
            .to_owned();
        if !name.is_empty() {
            fields.push(name);
        }
    }
    fields
}

/// Writes into `dir` the CUDA headers `nccl.h` includes, as stubs: `cudaStream_t` and
/// `cudaEvent_t` as CUDA declares them (pointers to opaque structs), the rest empty.
pub fn write_cuda_stubs(dir: &Path) {
    for stub in ["cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"] {
        std::fs::write(dir.join(stub), "").unwrap();
    }
    std::fs::write(
        dir.join("cuda_runtime.h"),
        "typedef struct CUstream_st* cudaStream_t;\ntypedef struct CUevent_st* cudaEvent_t;\n",
    )
    .unwrap();
}

/// `sizeof(ncclConfig_t)` and the offset of each field, as gcc lays out the release's header
/// (with stub CUDA headers). `None` when the release has no `ncclConfig_t`.
pub fn c_layout(release: &Release) -> Option<(usize, Vec<(String, usize)>)> {
    let fields = header_config_fields(&release.include);
    if fields.is_empty() {
        return None;
    }
    let dir = scratch(&format!("layout-{}", release.version));
    write_cuda_stubs(&dir);
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"nccl.h\"\nint main(void) {\n  printf(\"sizeof %zu\\n\", sizeof(ncclConfig_t));\n",
    );
    for f in &fields {
        c.push_str(&format!(
            "  printf(\"{f} %zu\\n\", offsetof(ncclConfig_t, {f}));\n"
        ));
    }
    c.push_str("  return 0;\n}\n");
    std::fs::write(dir.join("probe.c"), c).unwrap();
    let exe = dir.join("probe");
    let out = Command::new("gcc")
        .arg("-I")
        .arg(&dir)
        .arg("-I")
        .arg(&release.include)
        .arg(dir.join("probe.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("gcc runs");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("probe runs");
    let text = String::from_utf8(run.stdout).unwrap();
    let mut size = 0;
    let mut offsets = Vec::new();
    for line in text.lines() {
        let (name, n) = line.split_once(' ').unwrap();
        let n: usize = n.parse().unwrap();
        if name == "sizeof" {
            size = n;
        } else {
            offsets.push((name.to_owned(), n));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Some((size, offsets))
}

/// The `Version` of a cache folder name.
pub fn version_of(v: &str) -> oxccl_core::Version {
    let k = version_key(v);
    oxccl_core::Version::new(k[0], k[1], k[2])
}

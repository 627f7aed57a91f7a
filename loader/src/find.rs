//! Where the discovery looks for libnccl, in order (after an explicit path and
//! `OXCCL_NCCL_LIBRARY`, which [`crate::Library::load`] handles): the system search by name,
//! then the `nvidia/nccl/lib` folder of the Python environments it can see without running
//! Python (pip's `nvidia-nccl-cu*` wheels put the library there).

use crate::text::os_text;
use std::env;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The environment variable naming the library to load.
pub const ENV_LIBRARY: &str = "OXCCL_NCCL_LIBRARY";

/// Library names given to the system search (`LD_LIBRARY_PATH`, the ld cache, RUNPATH): the
/// versioned soname first, as installed by every package, then the development link.
pub const SYSTEM_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// Where the library lives inside a Python `site-packages` folder.
pub const WHEEL_LIBRARY: &str = "nvidia/nccl/lib/libnccl.so.2";

/// One place to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A name for the system search (plain `dlopen` of the name).
    Name(&'static str),
    /// A file path.
    Path(PathBuf),
}

impl Place {
    /// How the place reads in messages (a path's bytes that are not UTF-8 as `\xNN`, see
    /// [`os_text`]).
    pub fn describe(&self) -> String {
        match self {
            Place::Name(n) => format!("{n} (system search)"),
            Place::Path(p) => os_text(p.as_os_str()).into_owned(),
        }
    }
}

/// Every place the discovery tries after `OXCCL_NCCL_LIBRARY`, in order.
pub fn places() -> Vec<Place> {
    let mut out: Vec<Place> = SYSTEM_NAMES.iter().map(|n| Place::Name(n)).collect();
    for dir in site_packages() {
        let p = Place::Path(dir.join(WHEEL_LIBRARY));
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The paths named `name` in the folders of `LD_LIBRARY_PATH` that exist (of any kind, found
/// by `stat`, nothing opened), in its order: the files the dynamic loader's search by name
/// would consider first. Best effort, for checking a file before `dlopen` reads it: the
/// variable as this process sees it now (the loader read it at start-up), taken as bytes and
/// separated by `:` or `;`, an empty entry meaning the current folder, entries with
/// `$ORIGIN`-style tokens and the `glibc-hwcaps` subfolders skipped; the executable's RPATH and
/// RUNPATH, `/etc/ld.so.cache` and the default folders are not looked at, and a library of
/// that name already loaded (which `dlopen` reuses without searching) is not known here.
pub fn library_path_candidates(name: &OsStr) -> Vec<PathBuf> {
    let Some(var) = env::var_os("LD_LIBRARY_PATH") else {
        return Vec::new();
    };
    var.as_bytes()
        .split(|b| matches!(b, b':' | b';'))
        .filter(|dir| !dir.contains(&b'$'))
        .map(|dir| if dir.is_empty() { &b"."[..] } else { dir })
        .map(|dir| Path::new(OsStr::from_bytes(dir)).join(name))
        .filter(|p| p.exists())
        .collect()
}

/// The Python install prefixes visible from the environment, most specific first.
fn prefixes() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = non_empty_var(var) {
            out.push(PathBuf::from(p));
        }
    }
    if let Some(home) = non_empty_var("HOME") {
        out.push(Path::new(&home).join(".local"));
    }
    // A `python3` on PATH that is (a link to) a real interpreter lives in `<prefix>/bin`.
    // Shims (pyenv) resolve to nothing useful and are simply skipped by the folder checks.
    if let Some(path) = env::var_os("PATH") {
        for dir in env::split_paths(&path) {
            let py = dir.join("python3");
            if let Ok(real) = fs::canonicalize(&py) {
                if let Some(prefix) = real.parent().and_then(Path::parent) {
                    out.push(prefix.to_path_buf());
                }
            }
        }
    }
    // pyenv puts shims on PATH; its interpreters live under `$PYENV_ROOT/versions/*`.
    let pyenv = non_empty_var("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| non_empty_var("HOME").map(|h| Path::new(&h).join(".pyenv")));
    if let Some(Ok(entries)) = pyenv.map(|p| fs::read_dir(p.join("versions"))) {
        let mut versions: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        versions.sort();
        out.extend(versions);
    }
    out.push(PathBuf::from("/usr/local"));
    out.push(PathBuf::from("/usr"));
    let mut seen = Vec::new();
    out.retain(|p| {
        let fresh = !seen.contains(p);
        seen.push(p.clone());
        fresh
    });
    out
}

/// `<prefix>/lib/python3*/{site,dist}-packages` folders that exist, in prefix order.
fn site_packages() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for prefix in prefixes() {
        let lib = prefix.join("lib");
        let Ok(entries) = fs::read_dir(&lib) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        // Newest Python first ("python3.12" after "python3.9" in plain order is fine to
        // reverse: either way every folder is tried).
        pythons.sort();
        pythons.reverse();
        for py in pythons {
            for sub in ["site-packages", "dist-packages"] {
                let d = py.join(sub);
                if d.is_dir() {
                    out.push(d);
                }
            }
        }
    }
    out
}

fn non_empty_var(name: &str) -> Option<OsString> {
    env::var_os(name).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_names_come_first_in_order() {
        let p = places();
        assert_eq!(p[0], Place::Name("libnccl.so.2"));
        assert_eq!(p[1], Place::Name("libnccl.so"));
        for place in &p[2..] {
            match place {
                Place::Path(path) => assert!(path.ends_with(WHEEL_LIBRARY), "{path:?}"),
                Place::Name(n) => panic!("unexpected name {n}"),
            }
        }
    }
}

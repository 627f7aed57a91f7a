//! The torch of `scripts/torch-env.sh` for the interop tests: a program of its venv
//! (`OXCCL_TORCH_VENV`, default `.cache/torch-venv`), or `None` with a message when the venv is
//! absent, which fails the test under `CI` (CI installs it; a skip there would hide a gap).
#![allow(dead_code)]

use std::path::PathBuf;

/// `bin/<name>` of the torch venv; `OXCCL_TORCH_PYTHON` overrides the interpreter.
pub fn venv_program(name: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("OXCCL_TORCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/torch-venv"));
    let path = match (name, std::env::var_os("OXCCL_TORCH_PYTHON")) {
        ("python", Some(py)) => PathBuf::from(py),
        _ => venv.join("bin").join(name),
    };
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI: {} is missing; run `bash scripts/torch-env.sh`",
        path.display()
    );
    eprintln!(
        "skipped: {} is missing (run `bash scripts/torch-env.sh`)",
        path.display()
    );
    None
}

/// The venv's interpreter.
pub fn python() -> Option<PathBuf> {
    venv_program("python")
}

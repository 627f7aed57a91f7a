//! What the tool writes: its reports on stdout, each part flushed as it is made; and the
//! files (`--out`, `--json-out`, `--svg`): a path that names anything but a regular file (a
//! FIFO, a device, a directory), or a file in a missing folder, is refused before any
//! measuring, and the write itself opens without blocking, so a path swapped for a FIFO
//! meanwhile fails instead of hanging the tool.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// `Ok` when `path` (given as option `what`) may be written: a regular file, or absent in a
/// folder that exists.
pub fn check(what: &str, path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(format!(
            "{what} {}: a regular file to write, not a {}",
            oxccl::escaped_path(path),
            if m.is_dir() {
                "directory"
            } else {
                "special file (a FIFO, a socket or a device)"
            }
        )),
        Ok(_) => Ok(()),
        // Absent: the folder it goes in must be there, or the run's result would be lost.
        Err(_) => match path.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(dir) if !dir.is_dir() => Err(format!(
                "{what} {}: its folder {} does not exist (create it first)",
                oxccl::escaped_path(path),
                oxccl::escaped_path(dir)
            )),
            _ => Ok(()),
        },
    }
}

/// Writes `bytes` to `path` (option `what`), refusing what [`check`] refuses.
pub fn write(what: &str, path: &Path, bytes: &[u8]) -> Result<(), String> {
    let cannot =
        |e: std::io::Error| format!("cannot write {what} {}: {e}", oxccl::escaped_path(path));
    check(what, path)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(cannot)?;
    if !f.metadata().map_err(cannot)?.is_file() {
        // Swapped for a device after the check (a FIFO fails the open itself).
        return Err(format!(
            "{what} {}: a regular file to write",
            oxccl::escaped_path(path)
        ));
    }
    f.write_all(bytes).map_err(cannot)
}

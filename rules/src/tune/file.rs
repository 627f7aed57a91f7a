//! The table's file form (feature `std`): the measured table a process starts with, read
//! from the file `OXCCL_TUNE_FILE` names (`oxccl tune` writes one). Only a regular file is
//! opened, and every error names the file, the line and the field at fault.

use super::TuneTable;
use alloc::sync::Arc;
use oxccl_core::text::EscapedBytes;
use oxccl_core::{Error, Result};
use std::path::Path;

/// A path as oxccl's messages show it: control characters and bytes that are not UTF-8
/// escaped, so a hostile file name never writes them to a terminal.
fn escaped_path(path: &Path) -> EscapedBytes<'_> {
    EscapedBytes(path.as_os_str().as_encoded_bytes())
}

/// The environment variable naming a tune table file (`oxccl tune` writes one).
pub const TUNE_FILE_VAR: &str = "OXCCL_TUNE_FILE";

/// Reads a tune table file; errors name the file, and the line and field at fault. Only a
/// regular file is opened: a FIFO named here would block the read for ever.
pub fn load_tune_file(path: &Path) -> Result<TuneTable> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::invalid(
            "tune file",
            format_args!("a readable tune table at {}: {e}", escaped_path(path)),
        )
    })?;
    if !meta.is_file() {
        return Err(Error::invalid(
            "tune file",
            format_args!(
                "a regular file at {}, not a {}",
                escaped_path(path),
                if meta.is_dir() {
                    "directory"
                } else {
                    "special file (a FIFO, a socket or a device)"
                }
            ),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::invalid(
            "tune file",
            format_args!("a readable tune table at {}: {e}", escaped_path(path)),
        )
    })?;
    TuneTable::parse(&text).map_err(|e| match e {
        Error::InvalidArgument { expected, .. } => Error::invalid(
            "tune file",
            format_args!("{}: {}", escaped_path(path), expected),
        ),
        other => other,
    })
}

/// The table `OXCCL_TUNE_FILE` names (`value`: the variable's value; unset or empty: none).
/// Errors name the variable, the file, and the line and field at fault.
pub fn tune_from_env(value: Option<&str>) -> Result<Option<Arc<TuneTable>>> {
    let Some(path) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    load_tune_file(Path::new(path))
        .map(|t| Some(Arc::new(t)))
        .map_err(|e| match e {
            Error::InvalidArgument { expected, .. } => {
                Error::invalid(TUNE_FILE_VAR, format_args!("{expected}"))
            }
            other => other,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn the_variable_loads_a_table_or_names_itself() {
        assert!(tune_from_env(None).unwrap().is_none());
        assert!(tune_from_env(Some("")).unwrap().is_none());
        let dir = std::env::temp_dir().join(format!("oxccl-tune-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.tune");
        std::fs::write(&good, "oxccl-tune 1\nall_reduce * 0 max window\n").unwrap();
        let t = tune_from_env(good.to_str()).unwrap().unwrap();
        assert_eq!(t.rows().len(), 1);
        let bad = dir.join("bad.tune");
        std::fs::write(&bad, "oxccl-tune 1\nall_reduce * 0\n").unwrap();
        match tune_from_env(bad.to_str()) {
            Err(Error::InvalidArgument { arg, expected }) => {
                assert_eq!(arg, TUNE_FILE_VAR);
                assert!(expected.contains("line 2"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_without_being_opened() {
        let dir = std::env::temp_dir().join(format!("oxccl-tune-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("tune.fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        // On a thread, so a read that blocks fails the test instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        let (f, d) = (fifo.clone(), dir.clone());
        std::thread::spawn(move || {
            let _ = tx.send((load_tune_file(&f), load_tune_file(&d)));
        });
        let (on_fifo, on_dir) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("refused at once, not blocked on the FIFO");
        for (got, kind) in [(on_fifo, "special file"), (on_dir, "directory")] {
            match got {
                Err(Error::InvalidArgument {
                    arg: "tune file",
                    expected,
                }) => {
                    assert!(expected.contains(kind), "{expected}")
                }
                other => panic!("{other:?}"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

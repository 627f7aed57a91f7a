//! The measured table a process starts with (which buffer mode each collective uses per
//! size, and up to which size oxccl's all-reduce kernels run): read from the file
//! `OXCCL_TUNE_FILE` names (`oxccl perf --tune` writes one).

use crate::path_text::escaped_path;
use oxccl_core::tune::TuneTable;
use oxccl_core::{Error, Result};
use std::sync::Arc;

/// The environment variable naming a tune table file (`oxccl perf --tune` writes one).
pub const TUNE_FILE_VAR: &str = "OXCCL_TUNE_FILE";

/// Reads a tune table file; errors name the file, and the line and field at fault.
pub fn load_tune_file(path: &std::path::Path) -> Result<TuneTable> {
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
    load_tune_file(std::path::Path::new(path))
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
}

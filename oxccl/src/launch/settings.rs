//! The process group's settings from an [`EnvVars`]: `OXCCL_*` variables and PyTorch's names
//! for them, through [`oxccl_rules::env::resolve`], so every reader (the options, the
//! bootstrap's timeout, the backend's choice, the flight recorder's size) sees the same values.
//! What became of PyTorch's names and of refused values is logged, each note once per process.

use super::bootstrap::EnvVars;
use oxccl_rules::env::{resolve, Note, Settings};
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

impl EnvVars {
    /// The settings these variables give (see [`oxccl_rules::env::resolve`]), its notes logged:
    /// `log::info!` for a PyTorch name taken or overridden, `log::warn!` for one not honoured,
    /// an unknown `TORCH_NCCL_*` name and a refused value. A note already logged by this
    /// process is not logged again (every group and reader resolves the same environment).
    pub fn settings(&self) -> Settings {
        let settings = resolve(self.iter());
        log_once(&settings.notes);
        settings
    }
}

/// Logs the notes this process has not logged yet.
fn log_once(notes: &[Note]) {
    static LOGGED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let fresh: Vec<(bool, String)> = {
        let mut logged = LOGGED
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        notes
            .iter()
            .map(|n| (n.is_warning(), n.to_string()))
            .filter(|(_, line)| logged.insert(line.clone()))
            .collect()
    };
    // Outside the lock: a logger is foreign code.
    for (warning, line) in fresh {
        if warning {
            log::warn!("oxccl environment: {line}");
        } else {
            log::info!("oxccl environment: {line}");
        }
    }
}

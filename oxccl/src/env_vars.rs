//! A snapshot of the environment ([`EnvVars`]) and the process group's settings from it:
//! `OXCCL_*` variables and PyTorch's names for them, through [`oxccl_rules::env::resolve`], so
//! every reader (the options, the bootstrap's timeout, the backend's choice, the flight
//! recorder's size) sees the same values. What became of PyTorch's names and of refused values
//! is logged, each note once per process.

use oxccl_rules::env::{resolve, Note, Settings};
use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

/// A snapshot of environment variables, read once so that every decision of one bootstrap
/// sees the same values (and tests can pass their own without touching the process's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvVars(HashMap<String, String>);

impl EnvVars {
    /// The process's environment now. A value that is not UTF-8 is kept with replacement
    /// characters, so it fails its parser with an error naming the variable instead of
    /// vanishing (or panicking, as `std::env::vars` would).
    pub fn from_process() -> EnvVars {
        EnvVars(
            std::env::vars_os()
                .map(|(k, v)| {
                    (
                        k.to_string_lossy().into_owned(),
                        v.to_string_lossy().into_owned(),
                    )
                })
                .collect(),
        )
    }

    /// Exactly these variables.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> EnvVars {
        EnvVars(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Every variable, as `(name, value)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

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

//! PyTorch's names for the process group's settings: [`TORCH_VARIABLES`] says which `OXCCL_*`
//! variable each one sets (and how its value converts), or why oxccl does not honour it, and
//! [`resolve`] turns a whole environment into the settings in effect plus a [`Note`] for every
//! PyTorch name set and every value refused. An `OXCCL_*` variable always wins.

use super::*;

/// How a value of one of PyTorch's variables becomes its `OXCCL_*` twin's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Conversion {
    /// The same text: the twin has PyTorch's unit and values.
    Same,
    /// PyTorch's whole seconds to oxccl's milliseconds; PyTorch's `-1` (no bound) becomes
    /// oxccl's `0` (no bound).
    SecondsToMillis,
}

impl Conversion {
    /// The value of PyTorch's `name=value` in the twin's unit; a value PyTorch's unit does not
    /// take is an error naming `name`.
    pub fn apply(self, name: &'static str, value: &str) -> Result<String> {
        match self {
            Conversion::Same => Ok(value.to_owned()),
            Conversion::SecondsToMillis => {
                if value == "-1" {
                    return Ok("0".to_owned());
                }
                // Capped so that the milliseconds stay within the twin's own cap.
                let max = MAX_DURATION_MS / 1000;
                let secs = parse_u64(name, value, 0, max).map_err(|_| {
                    Error::invalid(
                        name,
                        format_args!(
                            "whole seconds in 0..={max}, or -1 for no bound, got \"{}\"",
                            Escaped(value)
                        ),
                    )
                })?;
                Ok(alloc::format!("{}", secs.saturating_mul(1000)))
            }
        }
    }

    /// The conversion in words, as the documentation's table and the notes say it.
    pub fn describe(self) -> &'static str {
        match self {
            Conversion::Same => "same value",
            Conversion::SecondsToMillis => "seconds × 1000 (PyTorch's -1, no bound, becomes 0)",
        }
    }
}

/// What oxccl makes of one of PyTorch's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TorchMeaning {
    /// Taken as `oxccl` (a name of [`VARIABLES`]) when that is unset, its value converted.
    Twin {
        /// The `OXCCL_*` variable it sets.
        oxccl: &'static str,
        /// How its value converts.
        conversion: Conversion,
    },
    /// PyTorch reads it; oxccl has no such setting. The text says why, or what to set instead.
    NotHonoured(&'static str),
}

/// One of PyTorch's environment variables and what oxccl makes of it (a row of
/// [`TORCH_VARIABLES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TorchVariable {
    /// PyTorch's name.
    pub name: &'static str,
    /// What oxccl makes of it.
    pub meaning: TorchMeaning,
}

const fn twin(name: &'static str, oxccl: &'static str) -> TorchVariable {
    TorchVariable {
        name,
        meaning: TorchMeaning::Twin {
            oxccl,
            conversion: Conversion::Same,
        },
    }
}

const fn not_honoured(name: &'static str, why: &'static str) -> TorchVariable {
    TorchVariable {
        name,
        meaning: TorchMeaning::NotHonoured(why),
    }
}

/// PyTorch's variables for its NCCL process group, each with its `OXCCL_*` twin or the reason
/// oxccl does not honour it. Where several of PyTorch's names set one twin, the earlier row
/// wins (PyTorch's own order: `TORCH_NCCL_*` before its older `NCCL_*` names); the `OXCCL_*`
/// twin itself wins over all of them. docs/ENVIRONMENT.md's table is generated from this one
/// ([`write_torch_markdown_table`]).
pub const TORCH_VARIABLES: &[TorchVariable] = &[
    twin("TORCH_NCCL_BLOCKING_WAIT", BLOCKING_WAIT),
    twin("NCCL_BLOCKING_WAIT", BLOCKING_WAIT),
    twin("TORCH_NCCL_ASYNC_ERROR_HANDLING", ASYNC_ERROR_HANDLING),
    twin("NCCL_ASYNC_ERROR_HANDLING", ASYNC_ERROR_HANDLING),
    twin("TORCH_NCCL_ENABLE_TIMING", ENABLE_TIMING),
    twin("NCCL_ENABLE_TIMING", ENABLE_TIMING),
    twin("TORCH_NCCL_USE_COMM_NONBLOCKING", NONBLOCKING),
    TorchVariable {
        name: "TORCH_NCCL_NONBLOCKING_TIMEOUT",
        meaning: TorchMeaning::Twin {
            oxccl: NONBLOCKING_TIMEOUT_MS,
            conversion: Conversion::SecondsToMillis,
        },
    },
    twin("TORCH_NCCL_HIGH_PRIORITY", HIGH_PRIORITY),
    twin("TORCH_NCCL_NAN_CHECK", NAN_CHECK),
    twin("TORCH_NCCL_DESYNC_DEBUG", DESYNC_DEBUG),
    twin("NCCL_DESYNC_DEBUG", DESYNC_DEBUG),
    twin("TORCH_NCCL_DUMP_ON_TIMEOUT", DUMP_ON_TIMEOUT),
    twin("TORCH_NCCL_TRACE_BUFFER_SIZE", TRACE_BUFFER_SIZE),
    twin("TORCH_NCCL_ENABLE_MONITORING", ENABLE_MONITORING),
    twin("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", HEARTBEAT_TIMEOUT_SEC),
    twin("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", WAIT_TIMEOUT_DUMP_MS),
    twin("TORCH_NCCL_COORD_CHECK_MILSEC", COORD_CHECK_MS),
    not_honoured(
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
        "oxccl writes each rank's dump as `rank_<r>.json` and `trace_<r>` into the directory `OXCCL_TRACE_DIR`: set that instead",
    ),
    not_honoured(
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
        "ask for a dump with `touch $OXCCL_TRACE_DIR/dump_request` instead",
    ),
    not_honoured(
        "TORCH_NCCL_AVOID_RECORD_STREAMS",
        "a setting of PyTorch's caching allocator, which oxccl does not use",
    ),
    not_honoured(
        "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
        "a hook in PyTorch's caching allocator, which oxccl does not use; oxccl registers buffers as the tune table says (`OXCCL_TUNE_FILE`)",
    ),
    not_honoured(
        "NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
        "a hook in PyTorch's caching allocator, which oxccl does not use; oxccl registers buffers as the tune table says (`OXCCL_TUNE_FILE`)",
    ),
    not_honoured("TORCH_NCCL_RETHROW_CUDA_ERRORS", "oxccl has no such switch"),
    not_honoured(
        "TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN",
        "oxccl has no C++ stack to log",
    ),
    not_honoured(
        "TORCH_NCCL_TRACE_CPP_STACK",
        "oxccl records no stacks: each dump entry's `frames` is empty",
    ),
    not_honoured("TORCH_NCCL_CUDA_EVENT_CACHE", "oxccl has no such switch"),
    not_honoured("TORCH_NCCL_BCAST_UNIQUEID", "oxccl has no such switch"),
    not_honoured("TORCH_NCCL_RANKS_PER_ROOT", "oxccl has no such switch"),
    not_honoured("TORCH_NCCL_PROPAGATE_ERROR", "oxccl has no such switch"),
    not_honoured(
        "TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING",
        "oxccl has no such warning",
    ),
    not_honoured(
        "TORCH_DIST_INIT_BARRIER",
        "oxccl's `init_process_group` runs no barrier after init",
    ),
    not_honoured(
        "TORCH_DISTRIBUTED_DEBUG",
        "oxccl has no debug level: `OXCCL_DESYNC_DEBUG=1` and `OXCCL_DUMP_ON_TIMEOUT=1` are what `DETAIL` turns on in PyTorch's NCCL group",
    ),
];

/// Names with this prefix that [`TORCH_VARIABLES`] lacks are reported as unknown.
pub const TORCH_NCCL_PREFIX: &str = "TORCH_NCCL_";

/// Writes [`TORCH_VARIABLES`] as docs/ENVIRONMENT.md's Markdown table
/// (`| PyTorch's variable | oxccl's | what oxccl does with it |`).
pub fn write_torch_markdown_table(out: &mut impl fmt::Write) -> fmt::Result {
    out.write_str("| PyTorch's variable | oxccl's | what oxccl does with it |\n|---|---|---|\n")?;
    for (i, row) in TORCH_VARIABLES.iter().enumerate() {
        match row.meaning {
            TorchMeaning::Twin { oxccl, conversion } => {
                write!(
                    out,
                    "| `{}` | `{oxccl}` | {}",
                    row.name,
                    conversion.describe()
                )?;
                if let Some(first) = TORCH_VARIABLES[..i]
                    .iter()
                    .find(|r| r.twin() == Some(oxccl))
                {
                    write!(out, "; PyTorch's older name: `{}` wins", first.name)?;
                }
                out.write_str(" |\n")?;
            }
            TorchMeaning::NotHonoured(why) => {
                writeln!(out, "| `{}` | not honoured | {why} |", row.name)?;
            }
        }
    }
    Ok(())
}

impl TorchVariable {
    /// The `OXCCL_*` variable it sets, if any.
    pub fn twin(&self) -> Option<&'static str> {
        match self.meaning {
            TorchMeaning::Twin { oxccl, .. } => Some(oxccl),
            TorchMeaning::NotHonoured(_) => None,
        }
    }
}

/// What became of one variable that was set (see [`resolve`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    /// The variable.
    pub name: String,
    /// Its value, as set.
    pub value: String,
    /// What became of it.
    pub outcome: Outcome,
}

/// What became of a variable that was set.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// One of PyTorch's names, taken as `oxccl` with `value` (in oxccl's unit).
    Taken {
        /// The `OXCCL_*` variable it set.
        oxccl: &'static str,
        /// The value it set, converted.
        value: String,
        /// How it was converted.
        conversion: Conversion,
    },
    /// One of PyTorch's names, not used: `by`, which wins over it, is set too.
    Overridden {
        /// The variable that won.
        by: &'static str,
    },
    /// One of PyTorch's names that oxccl does not honour (why, or what to set instead).
    NotHonoured(&'static str),
    /// A `TORCH_NCCL_*` name neither oxccl nor its table of PyTorch's names knows.
    Unknown,
    /// The value is refused, as the process group refuses it: the error names the variable
    /// and what was expected (boxed: an error is large, the other outcomes small).
    Invalid(Box<Error>),
}

impl Outcome {
    /// One word (or two) for the outcome: `taken`, `ignored`, `not honoured`, `unknown`,
    /// `invalid`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Taken { .. } => "taken",
            Outcome::Overridden { .. } => "ignored",
            Outcome::NotHonoured(_) => "not honoured",
            Outcome::Unknown => "unknown",
            Outcome::Invalid(_) => "invalid",
        }
    }
}

impl Note {
    /// Whether the note is worth a warning (the setting is lost or refused) rather than
    /// information.
    pub fn is_warning(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::NotHonoured(_) | Outcome::Unknown | Outcome::Invalid(_)
        )
    }
}

impl fmt::Display for Note {
    /// One line, the name and values escaped for a terminal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}: ", Escaped(&self.name), Escaped(&self.value))?;
        match &self.outcome {
            Outcome::Taken {
                oxccl,
                value,
                conversion,
            } => {
                write!(f, "taken as {oxccl}={}", Escaped(value))?;
                match conversion {
                    Conversion::Same => Ok(()),
                    Conversion::SecondsToMillis => f.write_str(" (seconds to ms)"),
                }
            }
            Outcome::Overridden { by } => write!(f, "ignored: {by} is set and wins"),
            Outcome::NotHonoured(why) => write!(f, "not honoured: {why}"),
            Outcome::Unknown => f.write_str(
                "unknown: not a PyTorch NCCL setting oxccl knows (docs/ENVIRONMENT.md lists them)",
            ),
            Outcome::Invalid(e) => match &**e {
                Error::InvalidArgument { expected, .. } => write!(
                    f,
                    "invalid: expected {}; the process group refuses it",
                    expected.as_str()
                ),
                e => write!(f, "invalid: {e}; the process group refuses it"),
            },
        }
    }
}

/// The settings an environment gives the process group (see [`resolve`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The configuration in effect, or the first refused value's error (naming the variable
    /// that was set: PyTorch's name when the value came from it).
    pub config: Result<EnvConfig>,
    /// A note for every one of PyTorch's names set and every value refused, by name.
    pub notes: Vec<Note>,
    /// The accepted value of each `OXCCL_*` variable in effect, in oxccl's unit.
    values: Vec<(&'static str, String)>,
}

impl Settings {
    /// The accepted value in effect for `oxccl` (a name of [`VARIABLES`]), in oxccl's unit:
    /// its own, or the one taken from PyTorch's name; `None` when neither is set or the value
    /// is refused.
    pub fn value(&self, oxccl: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _)| *n == oxccl)
            .map(|(_, v)| v.as_str())
    }
}

/// `oxccl=value` checked exactly as [`EnvConfig::from_lookup`] checks it, the error naming
/// `source` (the variable the user set).
fn check(oxccl: &'static str, value: &str, source: &'static str) -> Result<()> {
    match EnvConfig::from_lookup(|k| (k == oxccl).then_some(value)) {
        Ok(_) => Ok(()),
        Err(Error::InvalidArgument { expected, .. }) => Err(Error::InvalidArgument {
            arg: source,
            expected,
        }),
        Err(e) => Err(e),
    }
}

/// The process group's settings from an environment given as `(name, value)` pairs (the
/// last of a repeated name counts).
///
/// Each variable of [`VARIABLES`] takes its own value when set, else that of the first of
/// PyTorch's names for it in [`TORCH_VARIABLES`] that is set, converted. Every value in effect
/// is checked as [`EnvConfig::from_lookup`] checks it, each on its own, so every refused one
/// gets a note; the first refused is [`Settings::config`]'s error. The notes say, for each of
/// PyTorch's names set, whether it was taken, ignored (a name that wins is set), not
/// honoured, or unknown (a `TORCH_NCCL_*` name not in the table).
pub fn resolve<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Settings {
    let vars: Vec<(&str, &str)> = vars.into_iter().collect();
    let get = |name: &str| vars.iter().rev().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let note = |name: &str, value: &str, outcome: Outcome| Note {
        name: name.to_owned(),
        value: value.to_owned(),
        outcome,
    };
    let mut notes = Vec::new();
    let mut values = Vec::new();
    let mut first_error = None;
    for &(oxccl, _, _) in VARIABLES {
        // The winner so far: (name, value as set, conversion).
        let mut chosen = get(oxccl).map(|v| (oxccl, v, Conversion::Same));
        for row in TORCH_VARIABLES {
            let TorchMeaning::Twin {
                oxccl: twin,
                conversion,
            } = row.meaning
            else {
                continue;
            };
            if twin != oxccl {
                continue;
            }
            let Some(v) = get(row.name) else {
                continue;
            };
            match chosen {
                Some((by, _, _)) => notes.push(note(row.name, v, Outcome::Overridden { by })),
                None => chosen = Some((row.name, v, conversion)),
            }
        }
        let Some((source, raw, conversion)) = chosen else {
            continue;
        };
        let checked = conversion
            .apply(source, raw)
            .and_then(|value| check(oxccl, &value, source).map(|()| value));
        match checked {
            Ok(value) => {
                if source != oxccl {
                    let taken = Outcome::Taken {
                        oxccl,
                        value: value.clone(),
                        conversion,
                    };
                    notes.push(note(source, raw, taken));
                }
                values.push((oxccl, value));
            }
            Err(e) => {
                if first_error.is_none() {
                    first_error = Some(e.clone());
                }
                notes.push(note(source, raw, Outcome::Invalid(Box::new(e))));
            }
        }
    }
    for row in TORCH_VARIABLES {
        if let (TorchMeaning::NotHonoured(why), Some(v)) = (row.meaning, get(row.name)) {
            notes.push(note(row.name, v, Outcome::NotHonoured(why)));
        }
    }
    for &(k, _) in &vars {
        let known = TORCH_VARIABLES.iter().any(|r| r.name == k);
        // A repeated name is noted once, with the value that counts.
        let noted = notes.iter().any(|n| n.name == k);
        if let Some(v) = get(k).filter(|_| k.starts_with(TORCH_NCCL_PREFIX) && !known && !noted) {
            notes.push(note(k, v, Outcome::Unknown));
        }
    }
    notes.sort_by(|a, b| a.name.cmp(&b.name));
    let config = match first_error {
        Some(e) => Err(e),
        None => EnvConfig::from_lookup(|k| {
            values
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.as_str())
        }),
    };
    Settings {
        config,
        notes,
        values,
    }
}

#[cfg(test)]
mod tests;

//! Strict parsing of the `OXCCL_*` environment variables of the process group.
//!
//! Every decision is a pure function over a lookup closure (`name → value`), so it is tested
//! and fuzzed without touching the process environment. Values are parsed strictly: a value
//! that is set but malformed (`"abc"` for a boolean, `"-1"` for a count, an empty string) is an
//! error naming the variable and what was expected, never a silent default. An unset variable
//! takes PyTorch's default (`TORCH_NCCL_*` equivalents, listed in [`VARIABLES`]).
//!
//! PyTorch's own names are read too: [`TORCH_VARIABLES`] says which `OXCCL_*` variable each one
//! sets (and how its value converts), or why oxccl does not honour it, and [`resolve`] turns
//! a whole environment into the settings in effect plus a [`Note`] for every PyTorch name set
//! and every value refused. An `OXCCL_*` variable always wins over PyTorch's name for it.

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;
use oxccl_core::error::{Error, Result};
use oxccl_core::text::Escaped;

/// `OXCCL_BACKEND`: `nccl` or `mock`; unset lets the process group choose.
pub const BACKEND: &str = "OXCCL_BACKEND";
/// `OXCCL_TIMEOUT_MS`: the default process-group timeout.
pub const TIMEOUT_MS: &str = "OXCCL_TIMEOUT_MS";
/// `OXCCL_BLOCKING_WAIT` (`TORCH_NCCL_BLOCKING_WAIT`).
pub const BLOCKING_WAIT: &str = "OXCCL_BLOCKING_WAIT";
/// `OXCCL_ASYNC_ERROR_HANDLING` (`TORCH_NCCL_ASYNC_ERROR_HANDLING`).
pub const ASYNC_ERROR_HANDLING: &str = "OXCCL_ASYNC_ERROR_HANDLING";
/// `OXCCL_ENABLE_TIMING` (`TORCH_NCCL_ENABLE_TIMING`).
pub const ENABLE_TIMING: &str = "OXCCL_ENABLE_TIMING";
/// `OXCCL_NONBLOCKING` (`TORCH_NCCL_USE_COMM_NONBLOCKING`).
pub const NONBLOCKING: &str = "OXCCL_NONBLOCKING";
/// `OXCCL_NONBLOCKING_TIMEOUT_MS` (`TORCH_NCCL_NONBLOCKING_TIMEOUT`, which is in seconds).
pub const NONBLOCKING_TIMEOUT_MS: &str = "OXCCL_NONBLOCKING_TIMEOUT_MS";
/// `OXCCL_HIGH_PRIORITY` (`TORCH_NCCL_HIGH_PRIORITY`).
pub const HIGH_PRIORITY: &str = "OXCCL_HIGH_PRIORITY";
/// `OXCCL_NAN_CHECK` (`TORCH_NCCL_NAN_CHECK`).
pub const NAN_CHECK: &str = "OXCCL_NAN_CHECK";
/// `OXCCL_DESYNC_DEBUG` (`TORCH_NCCL_DESYNC_DEBUG`).
pub const DESYNC_DEBUG: &str = "OXCCL_DESYNC_DEBUG";
/// `OXCCL_DUMP_ON_TIMEOUT` (`TORCH_NCCL_DUMP_ON_TIMEOUT`).
pub const DUMP_ON_TIMEOUT: &str = "OXCCL_DUMP_ON_TIMEOUT";
/// `OXCCL_TRACE_BUFFER_SIZE` (`TORCH_NCCL_TRACE_BUFFER_SIZE`).
pub const TRACE_BUFFER_SIZE: &str = "OXCCL_TRACE_BUFFER_SIZE";
/// `OXCCL_ENABLE_MONITORING` (`TORCH_NCCL_ENABLE_MONITORING`).
pub const ENABLE_MONITORING: &str = "OXCCL_ENABLE_MONITORING";
/// `OXCCL_HEARTBEAT_TIMEOUT_SEC` (`TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`).
pub const HEARTBEAT_TIMEOUT_SEC: &str = "OXCCL_HEARTBEAT_TIMEOUT_SEC";
/// `OXCCL_WAIT_TIMEOUT_DUMP_MS` (`TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC`).
pub const WAIT_TIMEOUT_DUMP_MS: &str = "OXCCL_WAIT_TIMEOUT_DUMP_MS";
/// `OXCCL_COORD_CHECK_MS` (`TORCH_NCCL_COORD_CHECK_MILSEC`).
pub const COORD_CHECK_MS: &str = "OXCCL_COORD_CHECK_MS";
/// `OXCCL_PEER_KERNELS`: who runs the all-reduces of a group on one node
/// ([`oxccl_core::peer_kernels::PeerPolicy`]).
pub const PEER_KERNELS: &str = "OXCCL_PEER_KERNELS";
/// `OXCCL_ELASTIC`: a group's survivors go on without a lost rank instead of ending.
pub const ELASTIC: &str = "OXCCL_ELASTIC";
/// `OXCCL_ELASTIC_WINDOW_MS`: how long survivors wait for each other before they decide.
pub const ELASTIC_WINDOW_MS: &str = "OXCCL_ELASTIC_WINDOW_MS";
/// `OXCCL_MOCK_VERSION`: the NCCL release the mock world imitates when a launcher picks it.
pub const MOCK_VERSION: &str = "OXCCL_MOCK_VERSION";

/// Every variable [`EnvConfig::from_lookup`] reads: (name, default when unset, meaning). The
/// table of process-group variables in docs/ENVIRONMENT.md is checked against it.
pub const VARIABLES: &[(&str, &str, &str)] = &[
    (
        BACKEND,
        "auto",
        "`nccl`, `mock`, or `auto` (the process group chooses)",
    ),
    (
        TIMEOUT_MS,
        "unset",
        "default process-group timeout in ms, > 0 (unset: 600000)",
    ),
    (
        BLOCKING_WAIT,
        "0",
        "wait() blocks and polls; forces error handling 0",
    ),
    (
        ASYNC_ERROR_HANDLING,
        "3",
        "0 none, 1 tear down, 2 clean up only, 3 skip clean up",
    ),
    (
        ENABLE_TIMING,
        "0",
        "record start events: durations and completion hooks",
    ),
    (
        NONBLOCKING,
        "0",
        "create nonblocking communicators (NCCL then launches each operation from a thread it starts for it, far slower per eager operation than blocking; the group's init is bounded either way)",
    ),
    (
        NONBLOCKING_TIMEOUT_MS,
        "1800000",
        "bound on waiting for a nonblocking init or split, ms (0: none)",
    ),
    (
        HIGH_PRIORITY,
        "0",
        "issue on a stream of the device's highest priority",
    ),
    (NAN_CHECK, "0", "check collective inputs for NaN"),
    (
        DESYNC_DEBUG,
        "0",
        "on a timeout, name the ranks that never joined the collective",
    ),
    (
        DUMP_ON_TIMEOUT,
        "0",
        "dump the flight recorder on a timeout",
    ),
    (
        TRACE_BUFFER_SIZE,
        "2000",
        "flight-recorder entries (0: off)",
    ),
    (
        ENABLE_MONITORING,
        "1",
        "heartbeat monitor for a stuck watchdog",
    ),
    (
        HEARTBEAT_TIMEOUT_SEC,
        "600",
        "heartbeat monitor timeout, seconds",
    ),
    (
        WAIT_TIMEOUT_DUMP_MS,
        "60000",
        "how long a failed rank waits for its own dump and every rank's report of one before it aborts or exits, ms",
    ),
    (
        COORD_CHECK_MS,
        "1000",
        "how often a rank looks for another rank's dump request in the store, ms",
    ),
    (
        PEER_KERNELS,
        "auto",
        "all-reduces, all-gathers and reduce-scatters of a group on one node: `auto` (oxccl's kernels where they beat NCCL), `nccl`, `one-shot`, `two-shot`, `all-gather`, `reduce-scatter` (that kernel for its collective wherever it fits); every rank must set the same",
    ),
    (
        ELASTIC,
        "0",
        "when a rank is lost, the survivors agree through the store, shrink every group that held it and go on (the work in flight fails with `MembersLost`) instead of ending; every rank must set the same",
    ),
    (
        ELASTIC_WINDOW_MS,
        "1000",
        "how long survivors of a loss wait for each other before deciding who goes on, ms (a live rank that has not joined by then is left out)",
    ),
    (
        MOCK_VERSION,
        "default",
        "the NCCL release the mock world imitates under a launcher (`OXCCL_BACKEND=mock`), such as 2.32.3: its features and refusals are that release's (`default`: the mock's own, 2.28.3)",
    ),
];

/// Writes [`VARIABLES`] as the documentation's Markdown table (`| variable | default | meaning |`),
/// so the documentation is generated from, and checked against, the one list.
pub fn write_markdown_table(out: &mut impl core::fmt::Write) -> core::fmt::Result {
    out.write_str("| variable | default | meaning |\n|---|---|---|\n")?;
    for (name, default, meaning) in VARIABLES {
        writeln!(out, "| `{name}` | {default} | {meaning} |")?;
    }
    Ok(())
}

/// Largest accepted `OXCCL_TRACE_BUFFER_SIZE`: the ring is allocated up front, so a typo with
/// extra digits must not ask for gigabytes.
pub const MAX_TRACE_BUFFER: u64 = 1 << 20;

/// Largest accepted duration variable, in ms (about 31 years): keeps `Instant + d` from
/// overflowing in the groups that use it.
pub const MAX_DURATION_MS: u64 = 1_000_000_000_000;

/// Process-group timeout when neither the caller nor the environment gives one (PyTorch's
/// `default_pg_nccl_timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// What the watchdog does when a collective fails or times out (`TORCH_NCCL_ASYNC_ERROR_HANDLING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorHandling {
    /// 0: record the error; the user's `wait` reports it.
    NoHandling,
    /// 1: abort the communicators, then take the process down.
    TearDown,
    /// 2: abort the communicators and raise the error in the user's thread; the process lives.
    CleanUpOnly,
    /// 3 (default): take the process down without aborting (abort itself may hang).
    SkipCleanUp,
}

impl ErrorHandling {
    /// The mode for PyTorch's integer code, `None` for any other number.
    pub fn from_code(code: u64) -> Option<ErrorHandling> {
        match code {
            0 => Some(ErrorHandling::NoHandling),
            1 => Some(ErrorHandling::TearDown),
            2 => Some(ErrorHandling::CleanUpOnly),
            3 => Some(ErrorHandling::SkipCleanUp),
            _ => None,
        }
    }

    /// PyTorch's integer code of the mode.
    pub fn code(self) -> u8 {
        match self {
            ErrorHandling::NoHandling => 0,
            ErrorHandling::TearDown => 1,
            ErrorHandling::CleanUpOnly => 2,
            ErrorHandling::SkipCleanUp => 3,
        }
    }
}

/// The backend the user asked for in `OXCCL_BACKEND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendChoice {
    /// The NCCL library, loaded at run time.
    Nccl,
    /// The in-process mock world.
    Mock,
}

/// `name=value` as a boolean: only `0`, `1`, `true`, `false` (any case). Anything else,
/// the empty string included, is an error naming `name`.
pub fn parse_bool(name: &'static str, value: &str) -> Result<bool> {
    match value {
        "1" => Ok(true),
        "0" => Ok(false),
        v if v.eq_ignore_ascii_case("true") => Ok(true),
        v if v.eq_ignore_ascii_case("false") => Ok(false),
        v => Err(Error::invalid(
            name,
            format_args!("0, 1, true or false, got \"{}\"", Escaped(v)),
        )),
    }
}

/// `name=value` as a decimal integer in `min..=max`: ASCII digits only (no sign, no spaces, no
/// `0x`), so `-1` or ` 5` are refused rather than guessed at.
pub fn parse_u64(name: &'static str, value: &str, min: u64, max: u64) -> Result<u64> {
    let bad = || {
        Error::invalid(
            name,
            format_args!(
                "a decimal integer in {min}..={max}, got \"{}\"",
                Escaped(value)
            ),
        )
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let mut n: u64 = 0;
    for b in value.bytes() {
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(b - b'0')))
            .ok_or_else(bad)?;
    }
    if n < min || n > max {
        return Err(bad());
    }
    Ok(n)
}

/// `name=value` as a whole number of milliseconds in `min_ms..=min(max_ms, MAX_DURATION_MS)`.
pub fn parse_millis(name: &'static str, value: &str, min_ms: u64, max_ms: u64) -> Result<Duration> {
    parse_u64(name, value, min_ms, max_ms.min(MAX_DURATION_MS)).map(Duration::from_millis)
}

/// `name=value` as a whole number of seconds in `min_s..=max_s` (capped like
/// [`parse_millis`]).
pub fn parse_secs(name: &'static str, value: &str, min_s: u64, max_s: u64) -> Result<Duration> {
    parse_u64(name, value, min_s, max_s.min(MAX_DURATION_MS / 1000)).map(Duration::from_secs)
}

/// `OXCCL_PEER_KERNELS=value`: `auto`, `nccl` (or `off`), `one-shot`, `two-shot`,
/// `all-gather`, `reduce-scatter`; anything else is an error naming the variable.
pub fn parse_peer_kernels(value: &str) -> Result<oxccl_core::peer_kernels::PeerPolicy> {
    oxccl_core::peer_kernels::PeerPolicy::parse(value).ok_or_else(|| {
        Error::invalid(
            PEER_KERNELS,
            format_args!(
                "auto, nccl, one-shot, two-shot, all-gather or reduce-scatter, got \"{}\"",
                Escaped(value)
            ),
        )
    })
}

/// Blocking wait forces [`ErrorHandling::NoHandling`], as in PyTorch: the user's thread
/// polls the work and sees the error itself, so the watchdog must not also act on it.
pub fn effective_error_handling(blocking_wait: bool, mode: ErrorHandling) -> ErrorHandling {
    if blocking_wait {
        ErrorHandling::NoHandling
    } else {
        mode
    }
}

/// The process-group timeout, as `init_process_group` decides it (seed case 10).
///
/// - `explicit`: the `timeout` argument of the init call (or a later explicit set at run time,
///   which is the same as calling again with the new value): it always wins.
/// - `from_options`: a timeout set only inside the backend's options struct. PyTorch ignores it
///   (with a warning): the init call's timeout argument, defaulted when absent, always
///   overrides the options' field. So this value never decides; it is taken only to say so
///   (a `log::warn!` when it differs from the result).
/// - `env`: `OXCCL_TIMEOUT_MS`, oxccl's own default (PyTorch has none); used when the caller
///   gave no explicit timeout.
/// - otherwise [`DEFAULT_TIMEOUT`], 600 s.
pub fn effective_timeout(
    explicit: Option<Duration>,
    from_options: Option<Duration>,
    env: Option<Duration>,
) -> Duration {
    let chosen = explicit.or(env).unwrap_or(DEFAULT_TIMEOUT);
    if let Some(ignored) = from_options.filter(|o| *o != chosen) {
        log::warn!(
            "a timeout of {} ms in the backend options is ignored; the group uses {} ms \
             (pass the timeout explicitly)",
            ignored.as_millis(),
            chosen.as_millis()
        );
    }
    chosen
}

/// The process-group configuration read from `OXCCL_*` variables (see [`VARIABLES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvConfig {
    /// `OXCCL_BACKEND`; `None` (unset or `auto`): the group picks NCCL when it loads.
    pub backend: Option<BackendChoice>,
    /// `OXCCL_TIMEOUT_MS`; `None`: [`DEFAULT_TIMEOUT`] (see [`effective_timeout`]).
    pub timeout: Option<Duration>,
    /// `OXCCL_BLOCKING_WAIT`.
    pub blocking_wait: bool,
    /// `OXCCL_ASYNC_ERROR_HANDLING` as set; [`EnvConfig::error_handling`] is the effective mode.
    pub async_error_handling: ErrorHandling,
    /// `OXCCL_ENABLE_TIMING`.
    pub enable_timing: bool,
    /// `OXCCL_NONBLOCKING`.
    pub nonblocking: bool,
    /// `OXCCL_NONBLOCKING_TIMEOUT_MS`; `None` (set to 0): polls are not bounded. Default 30
    /// minutes, as newer PyTorch releases (2.4, the seeds, left it unbounded): oxccl bounds
    /// every wait unless told not to.
    pub nonblocking_timeout: Option<Duration>,
    /// `OXCCL_HIGH_PRIORITY`.
    pub high_priority: bool,
    /// `OXCCL_NAN_CHECK`.
    pub nan_check: bool,
    /// `OXCCL_DESYNC_DEBUG`.
    pub desync_debug: bool,
    /// `OXCCL_DUMP_ON_TIMEOUT`.
    pub dump_on_timeout: bool,
    /// `OXCCL_TRACE_BUFFER_SIZE`; 0 turns the flight recorder off.
    pub trace_buffer_size: u32,
    /// `OXCCL_ENABLE_MONITORING`.
    pub enable_monitoring: bool,
    /// `OXCCL_HEARTBEAT_TIMEOUT_SEC`.
    pub heartbeat_timeout: Duration,
    /// `OXCCL_WAIT_TIMEOUT_DUMP_MS`.
    pub wait_timeout_dump: Duration,
    /// `OXCCL_COORD_CHECK_MS`.
    pub coord_check: Duration,
    /// `OXCCL_PEER_KERNELS`.
    pub peer_kernels: oxccl_core::peer_kernels::PeerPolicy,
    /// `OXCCL_ELASTIC`.
    pub elastic: bool,
    /// `OXCCL_ELASTIC_WINDOW_MS`.
    pub elastic_window: Duration,
    /// `OXCCL_MOCK_VERSION`; `None`: the mock's own default.
    pub mock_version: Option<oxccl_core::version::Version>,
}

impl Default for EnvConfig {
    /// PyTorch's defaults: what an empty environment gives.
    fn default() -> EnvConfig {
        EnvConfig {
            backend: None,
            timeout: None,
            blocking_wait: false,
            async_error_handling: ErrorHandling::SkipCleanUp,
            enable_timing: false,
            nonblocking: false,
            nonblocking_timeout: Some(Duration::from_secs(30 * 60)),
            high_priority: false,
            nan_check: false,
            desync_debug: false,
            dump_on_timeout: false,
            trace_buffer_size: 2000,
            enable_monitoring: true,
            heartbeat_timeout: Duration::from_secs(600),
            wait_timeout_dump: Duration::from_millis(60_000),
            coord_check: Duration::from_millis(1000),
            peer_kernels: oxccl_core::peer_kernels::PeerPolicy::Auto,
            elastic: false,
            elastic_window: Duration::from_millis(1000),
            mock_version: None,
        }
    }
}

impl EnvConfig {
    /// Reads every variable of [`VARIABLES`] through `lookup` (`None`: unset), in the table's
    /// order. The first malformed value in that order is the error, naming its variable.
    pub fn from_lookup<'a>(lookup: impl Fn(&str) -> Option<&'a str>) -> Result<EnvConfig> {
        let d = EnvConfig::default();
        let boolean = |name: &'static str, default: bool| {
            lookup(name).map_or(Ok(default), |v| parse_bool(name, v))
        };
        let millis = |name: &'static str, min: u64, default: Duration| {
            lookup(name).map_or(Ok(default), |v| parse_millis(name, v, min, u64::MAX))
        };
        // Each in VARIABLES' order, so that the first refusal is the same whoever asks
        // (`resolve` checks them one by one in that order).
        let backend = match lookup(BACKEND) {
            None => None,
            Some(v) if v.eq_ignore_ascii_case("auto") => None,
            Some(v) if v.eq_ignore_ascii_case("nccl") => Some(BackendChoice::Nccl),
            Some(v) if v.eq_ignore_ascii_case("mock") => Some(BackendChoice::Mock),
            Some(v) => {
                return Err(Error::invalid(
                    BACKEND,
                    format_args!("nccl, mock or auto, got \"{}\"", Escaped(v)),
                ))
            }
        };
        let timeout = match lookup(TIMEOUT_MS) {
            None => None,
            Some(v) => Some(parse_millis(TIMEOUT_MS, v, 1, u64::MAX)?),
        };
        let blocking_wait = boolean(BLOCKING_WAIT, d.blocking_wait)?;
        let async_error_handling = match lookup(ASYNC_ERROR_HANDLING) {
            None => d.async_error_handling,
            Some(v) => {
                // 0..=3 is exactly the set of modes, so the range check is the whole check.
                let code = parse_u64(ASYNC_ERROR_HANDLING, v, 0, 3)?;
                ErrorHandling::from_code(code).unwrap_or(d.async_error_handling)
            }
        };
        let enable_timing = boolean(ENABLE_TIMING, d.enable_timing)?;
        let nonblocking = boolean(NONBLOCKING, d.nonblocking)?;
        let nonblocking_timeout = match lookup(NONBLOCKING_TIMEOUT_MS) {
            None => d.nonblocking_timeout,
            Some(v) => {
                Some(parse_millis(NONBLOCKING_TIMEOUT_MS, v, 0, u64::MAX)?).filter(|t| !t.is_zero())
            }
        };
        let high_priority = boolean(HIGH_PRIORITY, d.high_priority)?;
        let nan_check = boolean(NAN_CHECK, d.nan_check)?;
        let desync_debug = boolean(DESYNC_DEBUG, d.desync_debug)?;
        let dump_on_timeout = boolean(DUMP_ON_TIMEOUT, d.dump_on_timeout)?;
        let trace_buffer_size = match lookup(TRACE_BUFFER_SIZE) {
            None => d.trace_buffer_size,
            // Capped far below u32::MAX, so the conversion cannot fail.
            Some(v) => {
                u32::try_from(parse_u64(TRACE_BUFFER_SIZE, v, 0, MAX_TRACE_BUFFER)?).unwrap_or(0)
            }
        };
        let enable_monitoring = boolean(ENABLE_MONITORING, d.enable_monitoring)?;
        let heartbeat_timeout = match lookup(HEARTBEAT_TIMEOUT_SEC) {
            None => d.heartbeat_timeout,
            Some(v) => parse_secs(HEARTBEAT_TIMEOUT_SEC, v, 0, u64::MAX)?,
        };
        let wait_timeout_dump = millis(WAIT_TIMEOUT_DUMP_MS, 0, d.wait_timeout_dump)?;
        let coord_check = millis(COORD_CHECK_MS, 1, d.coord_check)?;
        let peer_kernels = match lookup(PEER_KERNELS) {
            None => d.peer_kernels,
            Some(v) => parse_peer_kernels(v)?,
        };
        let elastic = boolean(ELASTIC, d.elastic)?;
        let elastic_window = millis(ELASTIC_WINDOW_MS, 1, d.elastic_window)?;
        let mock_version = match lookup(MOCK_VERSION) {
            None => None,
            Some(v) if v.eq_ignore_ascii_case("default") => None,
            Some(v) => Some(oxccl_core::version::Version::parse(v).ok_or_else(|| {
                Error::invalid(
                    MOCK_VERSION,
                    format_args!("an NCCL release such as 2.32.3, got \"{}\"", Escaped(v)),
                )
            })?),
        };
        Ok(EnvConfig {
            backend,
            timeout,
            blocking_wait,
            async_error_handling,
            enable_timing,
            nonblocking,
            nonblocking_timeout,
            high_priority,
            nan_check,
            desync_debug,
            dump_on_timeout,
            trace_buffer_size,
            enable_monitoring,
            heartbeat_timeout,
            wait_timeout_dump,
            coord_check,
            peer_kernels,
            elastic,
            elastic_window,
            mock_version,
        })
    }

    /// The error-handling mode in effect: [`ErrorHandling::NoHandling`] under blocking wait
    /// (see [`effective_error_handling`]).
    pub fn error_handling(&self) -> ErrorHandling {
        effective_error_handling(self.blocking_wait, self.async_error_handling)
    }

    /// The group timeout for an init call with `explicit` (see [`effective_timeout`]).
    pub fn timeout_for(
        &self,
        explicit: Option<Duration>,
        from_options: Option<Duration>,
    ) -> Duration {
        effective_timeout(explicit, from_options, self.timeout)
    }
}

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

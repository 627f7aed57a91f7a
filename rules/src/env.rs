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

mod torch;

pub use torch::{
    resolve, write_torch_markdown_table, Conversion, Note, Outcome, Settings, TorchMeaning,
    TorchVariable, TORCH_NCCL_PREFIX, TORCH_VARIABLES,
};

#[cfg(test)]
mod tests;

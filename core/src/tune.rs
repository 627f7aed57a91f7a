//! The tune table: which buffer mode (plain, locally registered, symmetric window) each
//! collective uses at each size, as measured by `oxccl perf --tune` on the user's machine.
//!
//! No mode wins everywhere (the best one depends on the collective, the size and the machine:
//! docs/BENCHMARKS.md#buffer-modes-and-the-tune-table), so the
//! choice is data: rows of (collective, dtype, size range) → mode, looked up by a pure
//! function. Every rank must decide alike (a window registration is collective: one rank
//! registering alone hangs), so the lookup reads nothing but its arguments, and
//! [`TuneTable::fingerprint`] lets ranks compare their tables cheaply.
//!
//! The text form, one row per line (`#` starts a comment, blank lines are skipped):
//!
//! ```text
//! oxccl-tune 1
//! # collective  dtype    min_bytes  max_bytes  mode
//! all_reduce    *        0          65535      window
//! all_reduce    float32  65536      max        registered
//! *             *        0          max        plain
//! ```
//!
//! The first row that matches wins; a size no row covers is [`RegMode::Plain`].

use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::op::OpKind;
use crate::text::Escaped;
use alloc::vec::Vec;
use core::fmt::{self, Write};

pub mod release;

/// The header line of the text form (with its format version).
pub const HEADER: &str = "oxccl-tune 1";

/// How an operation's buffers are handed to the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegMode {
    /// As they are (nccl-tests' `-R 0`).
    Plain,
    /// Registered with the communicator (`ncclCommRegister`, NCCL 2.19+; `-R 1`).
    Registered,
    /// In a symmetric window (`ncclCommWindowRegister`, NCCL 2.27+; collective; `-R 2`).
    Window,
}

impl RegMode {
    /// Every mode, in `-R` order.
    pub const ALL: [RegMode; 3] = [RegMode::Plain, RegMode::Registered, RegMode::Window];

    /// The name in the text form.
    pub const fn name(self) -> &'static str {
        match self {
            RegMode::Plain => "plain",
            RegMode::Registered => "registered",
            RegMode::Window => "window",
        }
    }

    /// nccl-tests' `-R` value.
    pub const fn level(self) -> u8 {
        match self {
            RegMode::Plain => 0,
            RegMode::Registered => 1,
            RegMode::Window => 2,
        }
    }

    /// The mode of a `-R` value or a name; `None` for anything else.
    pub fn parse(s: &str) -> Option<RegMode> {
        RegMode::ALL
            .into_iter()
            .find(|m| s == m.name() || s.parse::<u8>().ok() == Some(m.level()))
    }
}

/// The collectives a row can name: [`OpKind::ALL`] less p2p and barriers (they move no user
/// buffer worth tuning), in its order. Derived, so a kind added there is tunable here.
pub const COLLECTIVES: [OpKind; tunable_count()] = tunable_kinds();

/// Whether a row can name `k`.
const fn tunable(k: OpKind) -> bool {
    !k.is_p2p() && !matches!(k, OpKind::Barrier)
}

const fn tunable_count() -> usize {
    let (mut n, mut i) = (0, 0);
    while i < OpKind::ALL.len() {
        if tunable(OpKind::ALL[i]) {
            n += 1;
        }
        i += 1;
    }
    n
}

const fn tunable_kinds<const N: usize>() -> [OpKind; N] {
    // The placeholder is overwritten: exactly N kinds of ALL pass `tunable`.
    let mut out = [OpKind::AllReduce; N];
    let (mut n, mut i) = (0, 0);
    while i < OpKind::ALL.len() {
        if tunable(OpKind::ALL[i]) {
            out[n] = OpKind::ALL[i];
            n += 1;
        }
        i += 1;
    }
    out
}

/// One row: operations of `coll` (any when `None`) on `dtype` (any when `None`) moving
/// `min_bytes..=max_bytes` bytes use `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TuneRow {
    /// The collective, or any.
    pub coll: Option<OpKind>,
    /// The element type, or any.
    pub dtype: Option<DataType>,
    /// Smallest size the row covers, in bytes (of the larger of the op's two buffers).
    pub min_bytes: u64,
    /// Largest size the row covers, inclusive.
    pub max_bytes: u64,
    /// The mode.
    pub mode: RegMode,
}

impl TuneRow {
    /// Whether the row covers this operation.
    pub fn covers(&self, coll: OpKind, dtype: DataType, bytes: u64) -> bool {
        self.coll.is_none_or(|c| c == coll)
            && self.dtype.is_none_or(|d| d == dtype)
            && (self.min_bytes..=self.max_bytes).contains(&bytes)
    }
}

/// Rows in lookup order. Built only through [`TuneTable::new`] or [`TuneTable::parse`], so
/// every row is valid (`min_bytes <= max_bytes`, a tunable collective).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TuneTable {
    rows: Vec<TuneRow>,
}

impl TuneTable {
    /// A table of `rows`, checked: each row's range must not be empty and its collective must
    /// be one of [`COLLECTIVES`].
    pub fn new(rows: Vec<TuneRow>) -> Result<TuneTable> {
        for (i, r) in rows.iter().enumerate() {
            if r.min_bytes > r.max_bytes {
                return Err(Error::invalid(
                    "rows",
                    format_args!(
                        "row {i}: min_bytes at most max_bytes, got {} > {}",
                        r.min_bytes, r.max_bytes
                    ),
                ));
            }
            if let Some(c) = r.coll {
                if !COLLECTIVES.contains(&c) {
                    return Err(Error::invalid(
                        "rows",
                        format_args!("row {i}: a collective, got {}", c.name()),
                    ));
                }
            }
        }
        Ok(TuneTable { rows })
    }

    /// One mode for everything (what `oxccl perf -R` gives the process group).
    pub fn uniform(mode: RegMode) -> TuneTable {
        TuneTable {
            rows: alloc::vec![TuneRow {
                coll: None,
                dtype: None,
                min_bytes: 0,
                max_bytes: u64::MAX,
                mode,
            }],
        }
    }

    /// The rows, in lookup order.
    pub fn rows(&self) -> &[TuneRow] {
        &self.rows
    }

    /// The mode for an operation: the first row covering it, else [`RegMode::Plain`].
    pub fn lookup(&self, coll: OpKind, dtype: DataType, bytes: u64) -> RegMode {
        self.rows
            .iter()
            .find(|r| r.covers(coll, dtype, bytes))
            .map_or(RegMode::Plain, |r| r.mode)
    }

    /// The mode an operation uses: the table's, when every buffer of the operation can be
    /// registered (`registrable`: all of them are memory of the library's allocator), else
    /// [`RegMode::Plain`]. Pure, so ranks that pass the same table and the same kinds of
    /// buffers decide alike (they must: a window registration is collective).
    ///
    /// A send or receive (only a row for any collective covers one) is never put in a window:
    /// a window registration is collective over the whole communicator, and a point-to-point
    /// operation involves two ranks, so [`RegMode::Window`] becomes [`RegMode::Registered`]
    /// (local, not collective) for them.
    pub fn choose(&self, coll: OpKind, dtype: DataType, bytes: u64, registrable: bool) -> RegMode {
        if !registrable {
            return RegMode::Plain;
        }
        match self.lookup(coll, dtype, bytes) {
            RegMode::Window if coll.is_p2p() => RegMode::Registered,
            mode => mode,
        }
    }

    /// Whether any row asks for `mode`.
    pub fn uses(&self, mode: RegMode) -> bool {
        self.rows.iter().any(|r| r.mode == mode)
    }

    /// Parses the text form (see the module's documentation). Errors name the line (from 1)
    /// and the field, with what was expected and what was found.
    pub fn parse(text: &str) -> Result<TuneTable> {
        let mut rows = Vec::new();
        let mut header = false;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let body = raw.split('#').next().unwrap_or("").trim();
            if body.is_empty() {
                continue;
            }
            if !header {
                if body != HEADER {
                    return Err(bad(line, "header", format_args!("`{HEADER}`"), body));
                }
                header = true;
                continue;
            }
            rows.push(parse_row(line, body)?);
        }
        if !header {
            return Err(Error::invalid(
                "tune table",
                format_args!("a first line `{HEADER}`, got an empty file"),
            ));
        }
        Ok(TuneTable { rows })
    }

    /// Writes the text form; [`TuneTable::parse`] reads it back to an equal table.
    pub fn write(&self, out: &mut impl Write) -> fmt::Result {
        writeln!(out, "{HEADER}")?;
        writeln!(out, "# collective dtype min_bytes max_bytes mode")?;
        for r in &self.rows {
            let coll = r.coll.map_or("*", OpKind::name);
            let dtype = r.dtype.map_or("*", DataType::name);
            write!(out, "{coll} {dtype} {} ", r.min_bytes)?;
            if r.max_bytes == u64::MAX {
                out.write_str("max")?;
            } else {
                write!(out, "{}", r.max_bytes)?;
            }
            writeln!(out, " {}", r.mode.name())?;
        }
        Ok(())
    }

    /// A 64-bit FNV-1a hash of the text form: equal tables, equal fingerprints, on every rank
    /// and platform (what ranks compare before any rank registers a window).
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        // Writing to the hasher cannot fail.
        let _ = self.write(&mut h);
        h.0
    }
}

impl fmt::Display for TuneTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f)
    }
}

struct Fnv(u64);

impl Write for Fnv {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Ok(())
    }
}

/// An error for `field` of `line`.
fn bad(line: usize, field: &str, expected: fmt::Arguments<'_>, got: &str) -> Error {
    // Long junk is cut so the message keeps its line and field.
    let got = got.get(..40).unwrap_or(got);
    Error::invalid(
        "tune table",
        format_args!(
            "line {line}, field `{field}`: {expected}, got `{}`",
            Escaped(got)
        ),
    )
}

fn parse_row(line: usize, body: &str) -> Result<TuneRow> {
    let mut f = body.split_whitespace();
    let mut next = |field: &str| {
        f.next().ok_or_else(|| {
            bad(
                line,
                field,
                format_args!("5 fields (collective dtype min_bytes max_bytes mode)"),
                body,
            )
        })
    };
    let (c, d, lo, hi, m) = (
        next("collective")?,
        next("dtype")?,
        next("min_bytes")?,
        next("max_bytes")?,
        next("mode")?,
    );
    if let Some(extra) = f.next() {
        return Err(bad(
            line,
            "end",
            format_args!("nothing after the mode"),
            extra,
        ));
    }
    let coll = match c {
        "*" => None,
        _ => Some(
            COLLECTIVES
                .into_iter()
                .find(|k| k.name() == c)
                .ok_or_else(|| {
                    bad(
                        line,
                        "collective",
                        format_args!("a collective name (all_reduce, …) or `*`"),
                        c,
                    )
                })?,
        ),
    };
    let dtype = match d {
        "*" => None,
        _ => Some(
            DataType::ALL
                .into_iter()
                .find(|t| t.name() == d)
                .ok_or_else(|| {
                    bad(
                        line,
                        "dtype",
                        format_args!("a dtype name (float32, …) or `*`"),
                        d,
                    )
                })?,
        ),
    };
    let bytes = |field: &str, s: &str| -> Result<u64> {
        if s == "max" {
            return Ok(u64::MAX);
        }
        s.parse::<u64>().map_err(|_| {
            bad(
                line,
                field,
                format_args!("a byte count (decimal) or `max`"),
                s,
            )
        })
    };
    let (min_bytes, max_bytes) = (bytes("min_bytes", lo)?, bytes("max_bytes", hi)?);
    if min_bytes > max_bytes {
        return Err(bad(
            line,
            "max_bytes",
            format_args!("at least min_bytes ({min_bytes})"),
            hi,
        ));
    }
    let mode = RegMode::parse(m).ok_or_else(|| {
        bad(
            line,
            "mode",
            format_args!("plain, registered or window (or 0, 1, 2)"),
            m,
        )
    })?;
    Ok(TuneRow {
        coll,
        dtype,
        min_bytes,
        max_bytes,
        mode,
    })
}

#[cfg(test)]
mod tests;

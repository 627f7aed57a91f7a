//! The tune table: which buffer mode (plain, locally registered, symmetric window) each
//! collective uses at each size, as measured by `oxccl tune` on the user's machine.
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
//!
//! Lines starting with `kernels` set up to which size oxccl's kernels run on a group of that
//! many ranks (the all-reduce's one-shot, then two-shot, and optionally the all-gather and the
//! reduce-scatter kernels; 0: none), overriding [`PeerTable::default`] for that group size
//! ([`TuneTable::peer_table`]):
//!
//! ```text
//! # kernels  ranks  one_shot_max  two_shot_max  [all_gather_max  reduce_scatter_max]
//! kernels    4      131072        262144
//! kernels    2      262144        0             65536            65536
//! ```

use alloc::vec::Vec;
use core::fmt::{self, Write};
use oxccl_core::dtype::DataType;
use oxccl_core::error::{Error, Result};
use oxccl_core::fnv::Fnv;
use oxccl_core::op::OpKind;
use oxccl_core::peer_kernels::{PeerTable, MAX_RANKS};
use oxccl_core::text::Escaped;

pub mod build;
#[cfg(feature = "std")]
pub mod file;
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

/// Up to which sizes oxccl's kernels run on a group of `ranks` (a `kernels` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct KernelRow {
    /// The group size, 2 to [`MAX_RANKS`].
    pub ranks: u32,
    /// All-reduce: one-shot up to this many bytes (inclusive; 0: never).
    pub one_shot_max: u64,
    /// All-reduce: two-shot above that and up to this many bytes.
    pub two_shot_max: u64,
    /// The all-gather kernel up to this many bytes of output (0: never).
    pub all_gather_max: u64,
    /// The reduce-scatter kernel up to this many bytes of input (0: never).
    pub reduce_scatter_max: u64,
}

impl KernelRow {
    /// Whether the line needs its last two fields (a collective other than all-reduce).
    fn has_gathers(&self) -> bool {
        self.all_gather_max != 0 || self.reduce_scatter_max != 0
    }
}

/// Rows in lookup order, and the kernels' limits by group size. Built only through
/// [`TuneTable::new`] or [`TuneTable::parse`], so every row is valid (`min_bytes <=
/// max_bytes`, a tunable collective; a group size the kernels serve, once).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TuneTable {
    rows: Vec<TuneRow>,
    kernels: Vec<KernelRow>,
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
        Ok(TuneTable {
            rows,
            kernels: Vec::new(),
        })
    }

    /// This table with the kernels' limits of `kernels` (each group size 2 to [`MAX_RANKS`],
    /// at most once).
    pub fn with_kernels(mut self, kernels: Vec<KernelRow>) -> Result<TuneTable> {
        for (i, k) in kernels.iter().enumerate() {
            if !(2..=MAX_RANKS).contains(&k.ranks) {
                return Err(Error::invalid(
                    "kernels",
                    format_args!("row {i}: 2 to {MAX_RANKS} ranks, got {}", k.ranks),
                ));
            }
            if kernels[..i].iter().any(|o| o.ranks == k.ranks) {
                return Err(Error::invalid(
                    "kernels",
                    format_args!("row {i}: one row per group size, {} twice", k.ranks),
                ));
            }
        }
        self.kernels = kernels;
        Ok(self)
    }

    /// The kernels' rows, in file order.
    pub fn kernels(&self) -> &[KernelRow] {
        &self.kernels
    }

    /// The kernels' limits: [`PeerTable::default`] with this table's `kernels` rows over it.
    pub fn peer_table(&self) -> PeerTable {
        let mut t = PeerTable::default();
        for k in &self.kernels {
            let n = k.ranks as usize;
            t.one_shot_max[n] = k.one_shot_max;
            t.two_shot_max[n] = k.two_shot_max;
            t.all_gather_max[n] = k.all_gather_max;
            t.reduce_scatter_max[n] = k.reduce_scatter_max;
        }
        t
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
            kernels: Vec::new(),
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
        let mut kernels: Vec<KernelRow> = Vec::new();
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
            if body.split_whitespace().next() == Some(KERNELS) {
                let k = parse_kernels(line, body)?;
                if kernels.iter().any(|o| o.ranks == k.ranks) {
                    return Err(bad(
                        line,
                        "ranks",
                        format_args!("one `kernels` line per group size"),
                        body,
                    ));
                }
                kernels.push(k);
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
        Ok(TuneTable { rows, kernels })
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
        if !self.kernels.is_empty() {
            // The short form where no row needs the gathers' fields: a table of all-reduce
            // limits reads (and fingerprints) as it always has.
            let gathers = self.kernels.iter().any(KernelRow::has_gathers);
            out.write_str("# ")?;
            out.write_str(KERNELS)?;
            out.write_str(" ranks one_shot_max two_shot_max")?;
            if gathers {
                out.write_str(" all_gather_max reduce_scatter_max")?;
            }
            out.write_str("\n")?;
            for k in &self.kernels {
                write!(
                    out,
                    "{KERNELS} {} {} {}",
                    k.ranks, k.one_shot_max, k.two_shot_max
                )?;
                if gathers {
                    write!(out, " {} {}", k.all_gather_max, k.reduce_scatter_max)?;
                }
                out.write_str("\n")?;
            }
        }
        Ok(())
    }

    /// A 64-bit FNV-1a hash of the text form: equal tables, equal fingerprints, on every rank
    /// and platform (what ranks compare before any rank registers a window).
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv::default();
        // Writing to the hasher cannot fail.
        let _ = self.write(&mut h);
        h.finish()
    }
}

impl fmt::Display for TuneTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f)
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

/// The first word of a kernels line.
const KERNELS: &str = "kernels";

fn parse_kernels(line: usize, body: &str) -> Result<KernelRow> {
    let f: Vec<&str> = body.split_whitespace().collect();
    if f.len() != 4 && f.len() != 6 {
        return Err(bad(
            line,
            "kernels",
            format_args!(
                "4 or 6 fields (kernels ranks one_shot_max two_shot_max [all_gather_max reduce_scatter_max])"
            ),
            body,
        ));
    }
    let ranks = f[1]
        .parse::<u32>()
        .ok()
        .filter(|r| (2..=MAX_RANKS).contains(r))
        .ok_or_else(|| bad(line, "ranks", format_args!("2 to {MAX_RANKS}"), f[1]))?;
    let bytes = |field: &str, s: &str| {
        s.parse::<u64>()
            .map_err(|_| bad(line, field, format_args!("a byte count (decimal)"), s))
    };
    let gathers = |i: usize, field: &str| f.get(i).map_or(Ok(0), |s| bytes(field, s));
    Ok(KernelRow {
        ranks,
        one_shot_max: bytes("one_shot_max", f[2])?,
        two_shot_max: bytes("two_shot_max", f[3])?,
        all_gather_max: gathers(4, "all_gather_max")?,
        reduce_scatter_max: gathers(5, "reduce_scatter_max")?,
    })
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

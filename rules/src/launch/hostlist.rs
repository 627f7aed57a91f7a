//! Slurm host lists (`node[01-04,07],gpu-[1-2]`, `a,b`, `host`), expanded lazily.
//!
//! The list is validated once by [`HostList::parse`]; iteration then cannot fail, allocates
//! nothing, and yields hosts in Slurm's order (the last bracket of an entry varies fastest),
//! keeping the zero padding of each range's lower bound (`[08-10]` → `08`, `09`, `10`).

use oxccl_core::error::{Error, Result};
use oxccl_core::text::Escaped;

/// Longest host name kept (a DNS name is at most 253 bytes).
pub const HOST_CAPACITY: usize = 255;

/// A host name without an allocator: bounded, so a launcher's master address is plain data.
pub type HostName = heapless::String<HOST_CAPACITY>;

/// Longest number in a range: 18 digits always fit a `u64`.
const MAX_DIGITS: usize = 18;

/// A validated host list, borrowed from the variable that held it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostList<'a> {
    text: &'a str,
    len: u64,
}

impl<'a> HostList<'a> {
    /// Validates `text` (the value of `var`): entries separated by commas, each literal text
    /// and bracketed ranges (`[1-3,7]`), at least one host, each host at most
    /// [`HOST_CAPACITY`] bytes. Errors name `var`.
    pub fn parse(var: &'static str, text: &'a str) -> Result<HostList<'a>> {
        let bad = |why: &str| {
            Error::invalid(
                var,
                format_args!(
                    "a host list like node[01-04,7]: {why}, got \"{}\"",
                    Escaped(text)
                ),
            )
        };
        let mut len: u64 = 0;
        let mut any = false;
        for entry in entries(text).map_err(&bad)? {
            any = true;
            let (count, width) = entry_shape(entry).map_err(&bad)?;
            if width > HOST_CAPACITY {
                return Err(bad("a host name longer than 255 bytes"));
            }
            len = len
                .checked_add(count)
                .ok_or_else(|| bad("too many hosts"))?;
        }
        if !any {
            return Err(bad("no host"));
        }
        Ok(HostList { text, len })
    }

    /// How many hosts the list names.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never true: a parsed list names at least one host.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first host (the master address Slurm jobs use when MASTER_ADDR is unset).
    pub fn first(&self) -> HostName {
        self.iter().next().unwrap_or_default()
    }

    /// The hosts in order.
    pub fn iter(&self) -> HostIter<'a> {
        HostIter {
            rest: Some(self.text),
            entry: "",
            index: 0,
            count: 0,
        }
    }
}

impl<'a> IntoIterator for &HostList<'a> {
    type Item = HostName;
    type IntoIter = HostIter<'a>;
    fn into_iter(self) -> HostIter<'a> {
        self.iter()
    }
}

/// The hosts of a [`HostList`], one [`HostName`] at a time.
#[derive(Debug, Clone)]
pub struct HostIter<'a> {
    rest: Option<&'a str>,
    entry: &'a str,
    index: u64,
    count: u64,
}

impl Iterator for HostIter<'_> {
    type Item = HostName;

    fn next(&mut self) -> Option<HostName> {
        while self.index >= self.count {
            let (entry, rest) = split_entry(self.rest?);
            self.entry = entry;
            self.rest = rest;
            self.index = 0;
            // The list was validated by `parse`, so the shape is known to be good.
            self.count = entry_shape(entry).map(|(c, _)| c).unwrap_or(0);
        }
        let host = nth_host(self.entry, self.index);
        self.index += 1;
        Some(host)
    }
}

/// The first top-level entry of `s`, and what follows its comma (`None`: no comma).
fn split_entry(s: &str) -> (&str, Option<&str>) {
    let mut open = false;
    for (i, c) in s.char_indices() {
        match c {
            '[' => open = true,
            ']' => open = false,
            ',' if !open => return (&s[..i], Some(&s[i + 1..])),
            _ => {}
        }
    }
    (s, None)
}

/// The top-level entries of `s`, empty ones included (`a,` is `a` and ``).
fn top_level(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    core::iter::from_fn(move || {
        let (entry, tail) = split_entry(rest?);
        rest = tail;
        Some(entry)
    })
}

/// The top-level entries of `s`, after checking the brackets and separators.
fn entries(s: &str) -> core::result::Result<impl Iterator<Item = &str>, &'static str> {
    let mut open = false;
    for c in s.chars() {
        match c {
            '[' if open => return Err("nested `[`"),
            '[' => open = true,
            ']' if !open => return Err("`]` without `[`"),
            ']' => open = false,
            c if c.is_whitespace() || c.is_control() => return Err("a space or control character"),
            _ => {}
        }
    }
    if open {
        return Err("unmatched `[`");
    }
    if top_level(s).any(str::is_empty) {
        return Err("an empty entry");
    }
    Ok(top_level(s))
}

/// One part of an entry: literal text, or the inside of a bracket.
enum Part<'a> {
    Text(&'a str),
    Ranges(&'a str),
}

fn parts(entry: &str) -> impl Iterator<Item = Part<'_>> {
    let mut rest = entry;
    core::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if let Some(inner) = rest.strip_prefix('[') {
            let end = inner.find(']').unwrap_or(inner.len());
            let part = Part::Ranges(&inner[..end]);
            rest = inner.get(end + 1..).unwrap_or("");
            Some(part)
        } else {
            let end = rest.find('[').unwrap_or(rest.len());
            let part = Part::Text(&rest[..end]);
            rest = &rest[end..];
            Some(part)
        }
    })
}

/// The ranges of a bracket: `(lo, hi, width)` for each `lo` or `lo-hi`.
fn ranges(
    inner: &str,
) -> impl Iterator<Item = core::result::Result<(u64, u64, usize), &'static str>> + '_ {
    inner.split(',').map(|item| {
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let num = |s: &str| {
            if s.is_empty() || s.len() > MAX_DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err("a range that is not `lo` or `lo-hi` in decimal digits");
            }
            Ok(s.bytes().fold(0u64, |n, b| n * 10 + u64::from(b - b'0')))
        };
        let (a, b) = (num(lo)?, num(hi)?);
        if b < a {
            return Err("a range whose end is below its start");
        }
        Ok((a, b, lo.len()))
    })
}

/// How many hosts `entry` names, and the longest host it can produce (bytes).
fn entry_shape(entry: &str) -> core::result::Result<(u64, usize), &'static str> {
    let mut count: u64 = 1;
    let mut width: usize = 0;
    for part in parts(entry) {
        match part {
            Part::Text(t) => width += t.len(),
            Part::Ranges(inner) => {
                let mut n: u64 = 0;
                let mut w = 0;
                for r in ranges(inner) {
                    let (a, b, pad) = r?;
                    n = n.checked_add(b - a + 1).ok_or("too many hosts")?;
                    w = w.max(pad).max(digits(b));
                }
                count = count.checked_mul(n).ok_or("too many hosts")?;
                width += w;
            }
        }
    }
    Ok((count, width))
}

fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// How many hosts one bracket names (validated input).
fn bracket_count(inner: &str) -> u64 {
    ranges(inner)
        .map(|r| r.map_or(0, |(a, b, _)| b - a + 1))
        .fold(0u64, u64::saturating_add)
}

/// Host `n` of a validated entry: mixed-radix digits, the last bracket fastest.
fn nth_host(entry: &str, n: u64) -> HostName {
    let mut out = HostName::new();
    let counts_after = |skip: usize| {
        parts(entry)
            .skip(skip + 1)
            .filter_map(|p| match p {
                Part::Ranges(inner) => Some(bracket_count(inner)),
                Part::Text(_) => None,
            })
            .fold(1u64, u64::saturating_mul)
    };
    for (i, part) in parts(entry).enumerate() {
        match part {
            Part::Text(t) => {
                let _ = out.push_str(t);
            }
            Part::Ranges(inner) => {
                let count = bracket_count(inner).max(1);
                let mut k = (n / counts_after(i).max(1)) % count;
                for (a, b, pad) in ranges(inner).flatten() {
                    let span = b - a + 1;
                    if k < span {
                        push_padded(&mut out, a + k, pad);
                        break;
                    }
                    k -= span;
                }
            }
        }
    }
    out
}

fn push_padded(out: &mut HostName, value: u64, width: usize) {
    for _ in digits(value)..width {
        let _ = out.push('0');
    }
    let _ = core::fmt::Write::write_fmt(out, format_args!("{value}"));
}

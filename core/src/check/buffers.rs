//! Buffer rules shared by the per-operation checks.

use crate::buf::{RawBuf, RawBufMut};
use crate::dtype::DataType;
use crate::error::{Error, Result};

/// Bytes a buffer spans, refused when it cannot be addressed (`> isize::MAX`) or wraps.
fn span(arg: &'static str, addr: usize, len: usize, dt: DataType) -> Result<usize> {
    let bytes = len
        .checked_mul(dt.size())
        .filter(|b| *b <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(
                arg,
                format_args!("at most {} bytes, got {len} elements of {dt}", isize::MAX),
            )
        })?;
    if addr == 0 && len != 0 {
        return Err(Error::invalid(
            arg,
            format_args!("a non-null address for {len} elements"),
        ));
    }
    if addr.checked_add(bytes).is_none() {
        return Err(Error::invalid(
            arg,
            format_args!("a buffer that does not wrap the address space"),
        ));
    }
    // Element sizes are powers of two: a mask instead of a division on the hot path.
    if addr & (dt.size() - 1) != 0 {
        return Err(Error::invalid(
            arg,
            format_args!("an address aligned to {} bytes for {dt}", dt.size()),
        ));
    }
    Ok(bytes)
}

/// An input buffer is addressable and non-null when non-empty.
pub fn buffer(arg: &'static str, b: RawBuf, dt: DataType) -> Result<()> {
    span(arg, b.addr, b.len, dt).map(|_| ())
}

/// An output buffer is addressable and non-null when non-empty.
pub fn buffer_mut(arg: &'static str, b: RawBufMut, dt: DataType) -> Result<()> {
    span(arg, b.addr, b.len, dt).map(|_| ())
}

/// `got == want`, else an error on `arg` saying `what`.
pub fn exact_len(arg: &'static str, got: usize, want: usize, what: &str) -> Result<()> {
    if got != want {
        return Err(Error::invalid(
            arg,
            format_args!("{what}: {want} elements, got {got}"),
        ));
    }
    Ok(())
}

/// `len × size`, refused on overflow.
pub fn times(arg: &'static str, len: usize, size: u32) -> Result<usize> {
    len.checked_mul(size as usize).ok_or_else(|| {
        Error::invalid(
            arg,
            format_args!("a length whose world-size multiple fits in usize, got {len}"),
        )
    })
}

/// One count per rank, summed without overflow.
pub fn parts_sum(arg: &'static str, counts: &[usize], size: u32) -> Result<usize> {
    if counts.len() != size as usize {
        return Err(Error::invalid(
            arg,
            format_args!("one count per rank ({}), got {}", size, counts.len()),
        ));
    }
    counts
        .iter()
        .try_fold(0usize, |acc, c| acc.checked_add(*c))
        .ok_or_else(|| Error::invalid(arg, format_args!("counts whose sum fits in usize")))
}

fn overlap(a: (usize, usize), b: (usize, usize)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

fn bytes(addr: usize, len: usize, dt: DataType) -> (usize, usize) {
    // Spans were validated before these are called, so these cannot overflow.
    (addr, len.saturating_mul(dt.size()))
}

/// `send` and `recv` do not overlap at all.
pub fn disjoint(send: RawBuf, recv: RawBufMut, dt: DataType) -> Result<()> {
    if overlap(
        bytes(send.addr, send.len, dt),
        bytes(recv.addr, recv.len, dt),
    ) {
        return Err(Error::invalid(
            "recv",
            format_args!("memory distinct from send (this operation cannot run in place)"),
        ));
    }
    Ok(())
}

/// Where one buffer sits inside the other when an operation runs in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InPlace {
    /// `send` is element `offset` of `recv` (all-reduce, broadcast, reduce at 0; all-gather at
    /// `rank × send.len`).
    SendAt(usize),
    /// `recv` is element `offset` of `send` (reduce-scatter at `rank × recv.len`).
    RecvAt(usize),
}

/// `send` and `recv` are exactly in the in-place `layout`, or they are disjoint.
pub fn in_place_or_disjoint(
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    layout: InPlace,
) -> Result<()> {
    let (outer, inner, offset) = match layout {
        InPlace::SendAt(o) => (recv.addr, send.addr, o),
        InPlace::RecvAt(o) => (send.addr, recv.addr, o),
    };
    let in_place = offset
        .checked_mul(dt.size())
        .and_then(|o| outer.checked_add(o))
        .is_some_and(|a| a == inner);
    if in_place
        || !overlap(
            bytes(send.addr, send.len, dt),
            bytes(recv.addr, recv.len, dt),
        )
    {
        return Ok(());
    }
    let (part, whole) = match layout {
        InPlace::SendAt(_) => ("send", "recv"),
        InPlace::RecvAt(_) => ("recv", "send"),
    };
    Err(Error::invalid(
        "recv",
        format_args!("either the in-place layout ({part} at element {offset} of {whole}) or memory distinct from send"),
    ))
}

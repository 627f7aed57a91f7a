//! Buffer rules shared by the per-operation checks.

use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::{RawBuf, RawBufMut};

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
    if addr % dt.size() != 0 {
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

/// `send` is exactly element `offset` of `recv` (the in-place layout), or they are disjoint.
pub fn same_or_disjoint(send: RawBuf, recv: RawBufMut, dt: DataType, offset: usize) -> Result<()> {
    let in_place = offset
        .checked_mul(dt.size())
        .and_then(|o| recv.addr.checked_add(o))
        .is_some_and(|a| a == send.addr);
    if in_place
        || !overlap(
            bytes(send.addr, send.len, dt),
            bytes(recv.addr, recv.len, dt),
        )
    {
        return Ok(());
    }
    Err(Error::invalid(
        "recv",
        format_args!("either the in-place layout (send at element {offset} of recv) or memory distinct from send"),
    ))
}

/// `recv` is exactly element `offset` of `send` (reduce-scatter in place), or they are disjoint.
pub fn part_or_disjoint(send: RawBuf, recv: RawBufMut, dt: DataType, offset: usize) -> Result<()> {
    let in_place = offset
        .checked_mul(dt.size())
        .and_then(|o| send.addr.checked_add(o))
        .is_some_and(|a| a == recv.addr);
    if in_place
        || !overlap(
            bytes(send.addr, send.len, dt),
            bytes(recv.addr, recv.len, dt),
        )
    {
        return Ok(());
    }
    Err(Error::invalid(
        "recv",
        format_args!("either the in-place layout (recv at element {offset} of send) or memory distinct from send"),
    ))
}

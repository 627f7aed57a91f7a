//! all_reduce in cache-sized chunks: each chunk is reduced and written to every output before
//! the next is read, split over a few threads for large buffers. The result never makes a
//! full-size round trip through memory, which is what bounds the mock's bandwidth (across
//! processes every rank's data is reduced in the host process). Same arithmetic as
//! [`crate::arith::reduce`] (it is called per chunk: element-wise, so chunking changes nothing).

use crate::arith::{recycle, reduce, Red};
use crate::memory::{view, write};
use crate::op_desc::OpDesc;
use oxccl_core::Result;

/// Bytes per chunk (fits L2 with the inputs of a few ranks).
const CHUNK: usize = 256 << 10;
/// Buffers from this size on are split over threads.
const PARALLEL_FROM: usize = 8 << 20;

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

/// Whether the chunked path is sound for `arr`: every output either is exactly its own rank's
/// input (in place) or overlaps no input at all, so writing chunk k never changes a later chunk
/// of any input.
pub(crate) fn applies(arr: &[OpDesc], es: usize) -> bool {
    arr.iter().all(|d| {
        let recv = (d.recv.addr, d.recv.len.saturating_mul(es));
        arr.iter().all(|e| {
            let send = (e.send.addr, e.send.len.saturating_mul(es));
            !overlaps(recv, send) || (std::ptr::eq(d, e) && d.recv.addr == e.send.addr)
        })
    })
}

/// Reduces elements `from..to` of every rank's input into every rank's output, chunk by chunk.
///
/// # Safety
/// As `collective::run`: every span valid, owners waiting; `applies(arr)` holds; no other
/// thread touches elements `from..to` of any buffer meanwhile.
unsafe fn range(
    arr: &[OpDesc],
    dt: oxccl_core::DataType,
    red: Red,
    f: &[Vec<u8>],
    n: u32,
    from: usize,
    to: usize,
) -> Result<()> {
    let es = dt.size();
    let step = (CHUNK / es).max(1);
    let mut at = from;
    while at < to {
        let len = step.min(to - at);
        // SAFETY: a sub-span of each rank's validated input; no output overlapping it is written
        // while these views live (they end before the writes below).
        let inputs: Vec<&[u8]> = arr
            .iter()
            .map(|d| unsafe { view(d.send.addr + at * es, len * es) })
            .collect();
        let res = reduce(dt, red, f, &inputs, n)?;
        drop(inputs);
        for d in arr {
            // SAFETY: a sub-span of the rank's validated output; this thread alone writes it.
            unsafe { write(d.recv.addr + at * es, &res) };
        }
        recycle(res);
        at += len;
    }
    Ok(())
}

/// The all_reduce of `arr` (every rank's desc, checked to agree), in chunks.
///
/// # Safety
/// As `collective::run`, and [`applies`] must hold.
pub(crate) unsafe fn all_reduce(arr: &[OpDesc], red: Red, f: &[Vec<u8>], n: u32) -> Result<()> {
    let Some(dt) = arr.first().and_then(|d| d.dtype) else {
        return Ok(());
    };
    let count = arr.first().map_or(0, |d| d.send.len);
    // The same limit as the unchunked path, whose full-size result must fit: a span the mock
    // could not hold fails here before anything is read (reserving untouched pages is cheap).
    let bytes = count.saturating_mul(dt.size());
    Vec::<u8>::new()
        .try_reserve_exact(bytes)
        .map_err(|_| oxccl_core::Error::Backend {
            code: oxccl_core::ResultCode::SYSTEM_ERROR,
            text: oxccl_core::text::text_str(crate::messages::code_text(
                oxccl_core::ResultCode::SYSTEM_ERROR,
            )),
            last: oxccl_core::text!("cannot allocate {bytes} bytes for the mock's reduction"),
        })?;
    let threads = if count * dt.size() >= PARALLEL_FROM {
        std::thread::available_parallelism()
            .map_or(1, |p| p.get())
            .clamp(1, 4)
    } else {
        1
    };
    if threads == 1 {
        // SAFETY: the caller's promise, for the whole range.
        return unsafe { range(arr, dt, red, f, n, 0, count) };
    }
    let per = count.div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                let (a, b) = ((t * per).min(count), ((t + 1) * per).min(count));
                // SAFETY: disjoint element ranges per thread; the rest is the caller's promise.
                s.spawn(move || unsafe { range(arr, dt, red, f, n, a, b) })
            })
            .collect();
        parts
            .into_iter()
            .map(|p| p.join().unwrap_or(Ok(())))
            .collect::<Result<Vec<()>>>()
            .map(|_| ())
    })
}

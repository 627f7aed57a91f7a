//! The buffers a captured graph uses, by address and size: noted while the operations are
//! captured, and compared with the buffers a launch binds. One ledger for the process group's
//! graphs and the communicator's, so both refuse a launch by the same rule.

use crate::error::{CaptureError, Result};
use crate::op::CommOp;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// A byte range of device (or mock host) memory an operation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Region {
    addr: usize,
    bytes: usize,
}

/// A set of buffers (empty ones left out): those captured operations use, or those a launch
/// binds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GraphBuffers(Vec<Region>);

impl GraphBuffers {
    /// Adds `bytes` at `addr` (once; nothing when empty).
    pub fn add(&mut self, addr: usize, bytes: usize) {
        let r = Region { addr, bytes };
        if bytes > 0 && !self.0.contains(&r) {
            self.0.push(r);
        }
    }

    /// Adds every buffer `op` reads or writes.
    pub fn note(&mut self, op: &CommOp<'_>) {
        for (addr, bytes) in op.byte_spans() {
            self.add(addr, bytes);
        }
    }

    /// Whether any buffer of the set overlaps `bytes` at `addr`.
    pub fn overlaps(&self, addr: usize, bytes: usize) -> bool {
        let end = addr.saturating_add(bytes);
        self.0
            .iter()
            .any(|r| r.addr < end && addr < r.addr.saturating_add(r.bytes))
    }

    /// Whether it holds no buffer.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many buffers (after [`GraphBuffers::sorted`], each once).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Sorted by address, so two sets compare by content.
    pub fn sorted(mut self) -> Self {
        self.0.sort();
        self
    }

    /// `Ok` when `bound` (what a launch binds) is exactly these (sorted) captured buffers;
    /// else [`CaptureError::Mismatch`] listing both.
    pub fn check_bound(&self, bound: GraphBuffers) -> Result<()> {
        let bound = bound.sorted();
        if bound == *self {
            return Ok(());
        }
        Err(CaptureError::Mismatch.error(format_args!(
            "argument `bufs`: the {} buffers the captured operations use ({}), got {} ({})",
            self.len(),
            self.list(),
            bound.len(),
            bound.list()
        )))
    }

    /// `addr+bytes, …` for a mismatch's message.
    fn list(&self) -> String {
        self.0
            .iter()
            .map(|r| format!("{:#x}+{}", r.addr, r.bytes))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_must_bind_exactly_the_captured_buffers() {
        let mut captured = GraphBuffers::default();
        captured.add(0x2000, 8);
        captured.add(0x1000, 16);
        captured.add(0x1000, 16);
        captured.add(0x3000, 0);
        let captured = captured.sorted();
        assert_eq!(captured.len(), 2);
        let mut bound = GraphBuffers::default();
        bound.add(0x1000, 16);
        bound.add(0x2000, 8);
        assert!(captured.check_bound(bound).is_ok());
        let mut short = GraphBuffers::default();
        short.add(0x1000, 16);
        short.add(0x2000, 4);
        let e = captured.check_bound(short).unwrap_err();
        assert!(
            matches!(
                e,
                crate::Error::Capture {
                    kind: CaptureError::Mismatch,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(alloc::format!("{e}").contains("0x2000+4"), "{e}");
        // An allocation holding a captured buffer overlaps it; one beside it does not.
        assert!(captured.overlaps(0x0f00, 0x200));
        assert!(captured.overlaps(0x2004, 1));
        assert!(!captured.overlaps(0x1010, 0xff0));
        assert!(!captured.overlaps(0x2008, 8));
    }
}

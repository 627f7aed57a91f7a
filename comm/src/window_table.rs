//! The symmetric windows a `Comm` keeps, by allocation (see `one_sided`).

use crate::buffer::CommMem;
use oxccl_core::RegHandle;

/// The symmetric windows of one communicator, by allocation (a field of `Comm`, after the
/// communicator, so the allocations outlive it when both are dropped).
#[derive(Debug, Default)]
pub(crate) struct WindowTable {
    windows: Vec<(RegHandle, CommMem)>,
}

impl WindowTable {
    /// The window allocation `mem` is in, if it is.
    pub(crate) fn handle_of(&self, mem: &CommMem) -> Option<RegHandle> {
        self.windows
            .iter()
            .find(|(_, m)| m.id == mem.id)
            .map(|(h, _)| *h)
    }

    /// Records that `mem` is in the window `handle` (its allocation kept alive meanwhile).
    pub(crate) fn add(&mut self, handle: RegHandle, mem: CommMem) {
        self.windows.push((handle, mem));
    }

    /// Forgets the window `handle` (its allocation may go once nothing else holds it).
    pub(crate) fn remove(&mut self, handle: RegHandle) {
        self.windows.retain(|(h, _)| *h != handle);
    }
}

//! A put on its way to a rank of another process (see `one_sided`).

/// A put into a window of a rank in another process, kept on the host until that rank's wait
/// takes it: the window (its handle, the same on every rank), where in it, and the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivery {
    /// The window's handle (`RegHandle::raw`), the same on every rank.
    pub window: usize,
    /// Where in the window, in bytes.
    pub offset: usize,
    /// The data.
    pub data: Vec<u8>,
}

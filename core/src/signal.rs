//! One-sided operations on symmetric windows (NCCL 2.29.2+): a put into a peer's part of a
//! window that raises a signal there, a signal alone, and a wait for signals. The peer takes no
//! part in a put; it learns of it by waiting for the signal, which orders the data before it.

use crate::buf::RawBuf;
use crate::dtype::DataType;
use crate::traits::RegHandle;

/// A put of [`crate::Communicator::put_signal`]: `send` (`send.len` elements of `dtype`)
/// written into rank `peer`'s part of the symmetric window `window` (this rank's handle of
/// it, from [`crate::Communicator::register_window`]) at byte `offset`, then signal `signal`
/// of context `ctx` raised on `peer`. `send` itself lies in one of this rank's symmetric
/// windows (NCCL reads a put's data through its window; the backends refuse others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutSignal {
    /// The data (this rank's memory).
    pub send: RawBuf,
    /// Its element type.
    pub dtype: DataType,
    /// The rank written to.
    pub peer: u32,
    /// The window, as this rank registered it.
    pub window: RegHandle,
    /// Where in the peer's part of the window, in bytes.
    pub offset: usize,
    /// The signal raised on the peer once the data is there.
    pub signal: u32,
    /// The signal's context (0 unless the program keeps several apart).
    pub ctx: u32,
}

/// One wait of [`crate::Communicator::wait_signal`]: `count` signals from rank `peer` on
/// signal `signal` of context `ctx`, consumed by the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SignalWait {
    /// The rank the signals come from.
    pub peer: u32,
    /// Which signal.
    pub signal: u32,
    /// How many to wait for.
    pub count: u32,
    /// The signal's context.
    pub ctx: u32,
}

/// Signals to wait for from one rank, as a caller names them (`Comm::wait_signal`,
/// `ProcessGroup::wait_signal`): the rank in the caller's numbering (the communicator's rank;
/// a process group's global rank), signal context 0. The callers turn it into a
/// [`SignalWait`] of the communicator's ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SignalFrom {
    /// The rank the signals come from.
    pub peer: u32,
    /// Which signal.
    pub signal: u32,
    /// How many (each consumed).
    pub count: u32,
}

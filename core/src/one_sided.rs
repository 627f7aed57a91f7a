//! One-sided operations on symmetric windows (NCCL 2.29.2+): a put into a peer's part of a
//! window that raises a signal there, a signal alone, and a wait for signals. The peer takes no
//! part in a put; it learns of it by waiting for the signal, which orders the data before it.

use crate::buf::RawBuf;
use crate::buf::RegHandle;
use crate::config::{CommConfig, ConfigField};
use crate::dtype::DataType;
use crate::error::Result;
use crate::traits::Communicator;

/// A put of [`crate::OneSided::put_signal`]: `send` (`send.len` elements of `dtype`)
/// written into rank `peer`'s part of the symmetric window `window` (this rank's handle of
/// it, from [`crate::Windows::register_window`]) at byte `offset`, then signal `signal`
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

/// One wait of [`crate::OneSided::wait_signal`]: `count` signals from rank `peer` on
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

impl SignalFrom {
    /// The wait of these signals from `peer` (the communicator's rank of [`SignalFrom::peer`]),
    /// context 0.
    pub fn wait_on(self, peer: u32) -> SignalWait {
        SignalWait {
            peer,
            signal: self.signal,
            count: self.count,
            ctx: 0,
        }
    }
}

/// How many signals and signal contexts a communicator has: NCCL's `numRmaSig` and
/// `numRmaCtx` of its config. A signal index or context past them is refused before the
/// library (NCCL refuses it too, "must be in [0, n)").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalLimits {
    /// Signal indices `0..signals`.
    pub signals: u32,
    /// Contexts `0..contexts`, when known (`None`: only NCCL's own check applies).
    pub contexts: Option<u32>,
}

impl Default for SignalLimits {
    /// A communicator made without the fields: one signal index and one context, NCCL's
    /// defaults ("Context 1 is invalid (must be in [0, 1))").
    fn default() -> SignalLimits {
        SignalLimits {
            signals: 1,
            contexts: Some(1),
        }
    }
}

impl SignalLimits {
    /// The defaults of a library whose environment has `NCCL_NUM_RMA_CTX` = `num_rma_ctx`
    /// (NCCL's default for `numRmaCtx`): that many contexts when it is a count, unknown
    /// (left to NCCL) when it is something else, one when unset.
    pub fn with_env(num_rma_ctx: Option<&str>) -> SignalLimits {
        let contexts = match num_rma_ctx.map(str::trim) {
            None | Some("") => Some(1),
            Some(v) => v.parse::<u32>().ok().filter(|n| *n >= 1),
        };
        SignalLimits {
            signals: 1,
            contexts,
        }
    }

    /// The limits of a communicator made with `cfg`: its `numRmaSig` and `numRmaCtx` where set
    /// (a value below 1 counts as 1), else `inherited` (a parent's for a split, shrink or grow;
    /// [`SignalLimits::default`] for an init).
    pub fn from_config(cfg: &CommConfig, inherited: SignalLimits) -> SignalLimits {
        let count = |f: ConfigField| cfg.int(f).map(|v| u32::try_from(v.max(1)).unwrap_or(1));
        SignalLimits {
            signals: count(ConfigField::NumRmaSig).unwrap_or(inherited.signals),
            contexts: count(ConfigField::NumRmaCtx).or(inherited.contexts),
        }
    }
}

/// A communicator with one-sided operations on symmetric windows: a put with a signal, a
/// signal alone and a wait for signals (NCCL 2.29.2+). A backend offers it by implementing
/// it; the loaded library's version still decides at run time.
pub trait OneSided: Communicator {
    /// Writes `put.send` into rank `put.peer`'s part of a symmetric window and raises a signal
    /// there (NCCL 2.29.2+: `ncclPutSignal`), on `stream`; the peer takes no part until it
    /// waits for the signal ([`OneSided::wait_signal`]), which orders the data before it.
    /// Checked first ([`crate::check::put_signal`]: the window one of this communicator's,
    /// the data within it, the peer a rank). A library without it refuses with
    /// [`crate::Error::Unsupported`].
    ///
    /// # Safety
    /// `put.send` must be valid memory of this communicator's device (host memory for the
    /// mock) of the stated length, untouched by others until the work on `stream` completed.
    unsafe fn put_signal(&self, put: &PutSignal, stream: &Self::Stream) -> Result<()>;

    /// Raises signal `signal` of context `ctx` on rank `peer` without data (NCCL 2.29.2+:
    /// `ncclSignal`), on `stream`.
    fn signal(&self, peer: u32, signal: u32, ctx: u32, stream: &Self::Stream) -> Result<()>;

    /// Holds `stream` until every wait of `waits` has its signals, and consumes them (NCCL
    /// 2.29.2+: `ncclWaitSignal`).
    fn wait_signal(&self, waits: &[SignalWait], stream: &Self::Stream) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_come_from_the_config_then_the_parent() {
        let d = SignalLimits::default();
        assert_eq!((d.signals, d.contexts), (1, Some(1)));
        let cfg = CommConfig::new().set(ConfigField::NumRmaSig, 4).unwrap();
        let l = SignalLimits::from_config(&cfg, d);
        assert_eq!((l.signals, l.contexts), (4, Some(1)));
        let child = SignalLimits::from_config(&CommConfig::new(), l);
        assert_eq!(child, l);
        let cfg = CommConfig::new().set(ConfigField::NumRmaCtx, 0).unwrap();
        assert_eq!(SignalLimits::from_config(&cfg, l).contexts, Some(1));
        assert_eq!(SignalLimits::with_env(Some("3")).contexts, Some(3));
        assert_eq!(SignalLimits::with_env(Some("x")).contexts, None);
        assert_eq!(SignalLimits::with_env(None).contexts, Some(1));
    }
}

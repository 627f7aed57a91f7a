//! The checks of one-sided operations: a put within its window, ranks of the communicator,
//! signal numbers NCCL can take, waits for something.

use super::check_ctx::{rank_arg, CheckCtx};
use crate::buf::RegHandle;
use crate::error::{Error, Result};
use crate::feature::Feature;
use crate::one_sided::{PutSignal, SignalLimits, SignalWait};

fn int_arg(arg: &'static str, v: u32) -> Result<()> {
    if i32::try_from(v).is_err() {
        return Err(Error::invalid(
            arg,
            format_args!("0..={}, got {v}", i32::MAX),
        ));
    }
    Ok(())
}

/// A signal index and context the communicator has (see [`SignalLimits`]).
fn signal_args(limits: &SignalLimits, signal: u32, sig_ctx: u32) -> Result<()> {
    if signal >= limits.signals {
        return Err(Error::invalid(
            "signal",
            format_args!(
                "a signal index below the communicator's {} (its config's numRmaSig), got {signal}",
                limits.signals
            ),
        ));
    }
    match limits.contexts {
        Some(n) if sig_ctx >= n => Err(Error::invalid(
            "ctx",
            format_args!(
                "a signal context below the communicator's {n} (its config's numRmaCtx), got {sig_ctx}"
            ),
        )),
        _ => int_arg("ctx", sig_ctx),
    }
}

/// A put: the library has signals; `peer` a rank of the communicator; the data (non-null when
/// not empty) within the window's bytes from `offset`; signal and context within `limits`.
pub fn put(ctx: &CheckCtx<'_>, limits: &SignalLimits, p: &PutSignal) -> Result<()> {
    ctx.features.require(Feature::OneSided)?;
    rank_arg(ctx, "peer", p.peer)?;
    signal_args(limits, p.signal, p.ctx)?;
    if p.send.len > 0 && p.send.addr == 0 {
        return Err(Error::invalid(
            "send",
            format_args!("a buffer for {} elements, got a null address", p.send.len),
        ));
    }
    let bytes = p.send.len.checked_mul(p.dtype.size());
    match bytes.and_then(|b| p.offset.checked_add(b)) {
        Some(end) if end <= p.window.bytes => Ok(()),
        _ => Err(Error::invalid(
            "offset",
            format_args!(
                "a put within the window's {} bytes, got {} elements of {} at byte {}",
                p.window.bytes, p.send.len, p.dtype, p.offset
            ),
        )),
    }
}

/// A put's windows, as the communicator knows them: `window` one it registered
/// (`registered`), and the data inside one of this rank's windows (`covered(addr, bytes)`),
/// since NCCL reads a put's data through its window ("srcWinHost is not in a valid symmetric
/// window"). Every backend asks this one rule, so they refuse alike.
pub fn put_windows(
    p: &PutSignal,
    registered: impl FnOnce(RegHandle) -> bool,
    covered: impl FnOnce(usize, usize) -> bool,
) -> Result<()> {
    if !registered(p.window) {
        return Err(Error::invalid(
            "window",
            format_args!(
                "a window this communicator registered, {:#x} ({} bytes) is not",
                p.window.addr, p.window.bytes
            ),
        ));
    }
    let bytes = p.send.len.saturating_mul(p.dtype.size());
    if !covered(p.send.addr, bytes) {
        return Err(Error::invalid(
            "send",
            format_args!(
                "data in one of this rank's symmetric windows (NCCL reads a put's data through its window), got {bytes} bytes at {:#x} in none",
                p.send.addr
            ),
        ));
    }
    Ok(())
}

/// A signal alone: the library has signals; `peer` a rank; signal and context within
/// `limits`.
pub fn signal(
    ctx: &CheckCtx<'_>,
    limits: &SignalLimits,
    peer: u32,
    signal: u32,
    sig_ctx: u32,
) -> Result<()> {
    ctx.features.require(Feature::OneSided)?;
    rank_arg(ctx, "peer", peer)?;
    signal_args(limits, signal, sig_ctx)
}

/// A wait: the library has signals; at least one wait, at most `i32::MAX`; each from a rank
/// of the communicator, for at least one signal, signal and context within `limits`.
pub fn wait(ctx: &CheckCtx<'_>, limits: &SignalLimits, waits: &[SignalWait]) -> Result<()> {
    ctx.features.require(Feature::OneSided)?;
    if waits.is_empty() || i32::try_from(waits.len()).is_err() {
        return Err(Error::invalid(
            "waits",
            format_args!("1..={} waits, got {}", i32::MAX, waits.len()),
        ));
    }
    for w in waits {
        rank_arg(ctx, "peer", w.peer)?;
        signal_args(limits, w.signal, w.ctx)?;
        if w.count == 0 {
            return Err(Error::invalid(
                "count",
                format_args!(
                    "at least one signal to wait for from rank {}, got 0",
                    w.peer
                ),
            ));
        }
        int_arg("count", w.count)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::RawBuf;
    use crate::buf::RegHandle;
    use crate::dtype::DataType;
    use crate::feature::FeatureSet;
    use crate::version::Version;

    fn put_of(len: usize, offset: usize) -> PutSignal {
        PutSignal {
            send: RawBuf::new(0x1000, len),
            dtype: DataType::Float32,
            peer: 1,
            window: RegHandle {
                raw: 1,
                addr: 0x9000,
                bytes: 64,
            },
            offset,
            signal: 0,
            ctx: 0,
        }
    }

    #[test]
    fn puts_stay_in_their_window_and_waits_wait_for_something() {
        let f = FeatureSet::for_version(Version::new(2, 32, 3));
        let lim = SignalLimits {
            signals: 4,
            contexts: Some(2),
        };
        let ctx = CheckCtx {
            rank: 0,
            size: 2,
            features: &f,
        };
        assert!(put(&ctx, &lim, &put_of(16, 0)).is_ok());
        assert!(put(&ctx, &lim, &put_of(8, 32)).is_ok());
        assert!(put(&ctx, &lim, &put_of(0, 64)).is_ok());
        for (len, off) in [(17, 0), (1, 61), (0, 65), (usize::MAX, 0), (1, usize::MAX)] {
            assert!(
                matches!(
                    put(&ctx, &lim, &put_of(len, off)),
                    Err(Error::InvalidArgument { arg: "offset", .. })
                ),
                "{len} at {off}"
            );
        }
        let mut far = put_of(1, 0);
        far.peer = 2;
        assert!(matches!(
            put(&ctx, &lim, &far),
            Err(Error::InvalidArgument { arg: "peer", .. })
        ));
        let mut null = put_of(1, 0);
        null.send.addr = 0;
        assert!(matches!(
            put(&ctx, &lim, &null),
            Err(Error::InvalidArgument { arg: "send", .. })
        ));
        let mut big = put_of(1, 0);
        big.signal = u32::MAX;
        assert!(matches!(
            put(&ctx, &lim, &big),
            Err(Error::InvalidArgument { arg: "signal", .. })
        ));
        assert!(signal(&ctx, &lim, 1, 3, 1).is_ok());
        assert!(matches!(
            signal(&ctx, &lim, 1, 4, 0),
            Err(Error::InvalidArgument { arg: "signal", .. })
        ));
        assert!(matches!(
            signal(&ctx, &lim, 1, 0, 2),
            Err(Error::InvalidArgument { arg: "ctx", .. })
        ));
        let unknown = SignalLimits {
            contexts: None,
            ..lim
        };
        assert!(signal(&ctx, &unknown, 1, 0, 9).is_ok());
        assert!(matches!(
            signal(&ctx, &lim, 5, 3, 0),
            Err(Error::InvalidArgument { arg: "peer", .. })
        ));
        let w = SignalWait {
            peer: 1,
            signal: 0,
            count: 1,
            ctx: 0,
        };
        assert!(wait(&ctx, &lim, &[w]).is_ok());
        assert!(matches!(
            wait(&ctx, &lim, &[]),
            Err(Error::InvalidArgument { arg: "waits", .. })
        ));
        let zero = SignalWait { count: 0, ..w };
        assert!(matches!(
            wait(&ctx, &lim, &[zero]),
            Err(Error::InvalidArgument { arg: "count", .. })
        ));
        let old = FeatureSet::for_version(Version::new(2, 28, 9));
        let ctx_old = CheckCtx {
            features: &old,
            ..ctx
        };
        assert!(matches!(
            put(&ctx_old, &lim, &put_of(1, 0)),
            Err(Error::Unsupported {
                feature: Feature::OneSided,
                missing: crate::feature::Missing::TooOld { .. }
            })
        ));
    }
}

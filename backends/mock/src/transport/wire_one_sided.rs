//! The bytes of one-sided calls across processes (see `signals`): a rank's put, signal or
//! wait, and the host's answer, the puts a wait takes with it.

use super::fields::{get_error, put_error, short, R, W};
use crate::delivery::Delivery;
use oxccl_core::one_sided::SignalWait;
use oxccl_core::Result;

/// A one-sided call of a rank, run by the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OneSidedCall {
    /// `data` into rank `to`'s window `window` at byte `offset`, then signal (`signal`, `ctx`)
    /// raised there; a window of a rank in the host's process is waited for up to `limit_ms`.
    Put {
        to: u32,
        window: u64,
        offset: u64,
        signal: u32,
        ctx: u32,
        limit_ms: u64,
        data: Vec<u8>,
    },
    /// Signal (`signal`, `ctx`) raised on rank `to`.
    Signal { to: u32, signal: u32, ctx: u32 },
    /// The signals of `waits`, waited for up to `limit_ms` and consumed.
    Wait {
        waits: Vec<SignalWait>,
        limit_ms: u64,
    },
}

pub(super) fn put_call(w: &mut W, c: &OneSidedCall) {
    match c {
        OneSidedCall::Put {
            to,
            window,
            offset,
            signal,
            ctx,
            limit_ms,
            data,
        } => {
            w.u8(1);
            w.u32(*to);
            w.u64(*window);
            w.u64(*offset);
            w.u32(*signal);
            w.u32(*ctx);
            w.u64(*limit_ms);
            w.bytes(data);
        }
        OneSidedCall::Signal { to, signal, ctx } => {
            w.u8(2);
            w.u32(*to);
            w.u32(*signal);
            w.u32(*ctx);
        }
        OneSidedCall::Wait { waits, limit_ms } => {
            w.u8(3);
            w.u64(*limit_ms);
            w.u32(u32::try_from(waits.len()).unwrap_or(0));
            for s in waits.iter().take(u32::MAX as usize) {
                w.u32(s.peer);
                w.u32(s.signal);
                w.u32(s.count);
                w.u32(s.ctx);
            }
        }
    }
}

pub(super) fn get_call(r: &mut R<'_>) -> Result<OneSidedCall> {
    Ok(match r.u8()? {
        1 => OneSidedCall::Put {
            to: r.u32()?,
            window: r.u64()?,
            offset: r.u64()?,
            signal: r.u32()?,
            ctx: r.u32()?,
            limit_ms: r.u64()?,
            data: r.bytes()?,
        },
        2 => OneSidedCall::Signal {
            to: r.u32()?,
            signal: r.u32()?,
            ctx: r.u32()?,
        },
        3 => {
            let limit_ms = r.u64()?;
            let n = r.u32()? as usize;
            // Sixteen bytes a wait: a count the frame cannot hold is malformed.
            if n > r.0.len() / 16 {
                return Err(short());
            }
            let waits = (0..n)
                .map(|_| {
                    Ok(SignalWait {
                        peer: r.u32()?,
                        signal: r.u32()?,
                        count: r.u32()?,
                        ctx: r.u32()?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            OneSidedCall::Wait { waits, limit_ms }
        }
        _ => return Err(short()),
    })
}

pub(super) fn put_answer(w: &mut W, res: &Result<Vec<Delivery>>) {
    match res {
        Ok(puts) => {
            w.u8(0);
            w.u32(u32::try_from(puts.len()).unwrap_or(0));
            for d in puts.iter().take(u32::MAX as usize) {
                w.u64(d.window as u64);
                w.u64(d.offset as u64);
                w.bytes(&d.data);
            }
        }
        Err(e) => put_error(w, e),
    }
}

pub(super) fn get_answer(r: &mut R<'_>) -> Result<Result<Vec<Delivery>>> {
    if r.0.first() != Some(&0) {
        return Ok(Err(get_error(r)?));
    }
    r.u8()?;
    let n = r.u32()? as usize;
    // Twenty-four bytes a put at least.
    if n > r.0.len() / 24 {
        return Err(short());
    }
    (0..n)
        .map(|_| {
            Ok(Delivery {
                window: r.usize()?,
                offset: r.usize()?,
                data: r.bytes()?,
            })
        })
        .collect::<Result<Vec<_>>>()
        .map(Ok)
}

#[cfg(test)]
mod tests {
    use super::super::wire::Msg;
    use super::*;
    use oxccl_core::{text, Error};

    #[test]
    fn calls_and_answers_round_trip_and_short_frames_fail() {
        let calls = [
            OneSidedCall::Put {
                to: 2,
                window: 5,
                offset: 64,
                signal: 1,
                ctx: 0,
                limit_ms: 900,
                data: vec![1, 2, 3, 4, 5],
            },
            OneSidedCall::Signal {
                to: 1,
                signal: 0,
                ctx: 3,
            },
            OneSidedCall::Wait {
                waits: vec![SignalWait {
                    peer: 0,
                    signal: 2,
                    count: 7,
                    ctx: 1,
                }],
                limit_ms: 10,
            },
        ];
        for call in calls {
            let f = Msg::OneSided {
                id: 9,
                call: call.clone(),
            }
            .encode();
            let Msg::OneSided { id, call: got } = Msg::decode(&f[4..]).unwrap() else {
                panic!("not a one-sided call")
            };
            assert_eq!((id, got), (9, call));
            for cut in 1..f.len() - 4 {
                assert!(Msg::decode(&f[4..4 + cut]).is_err(), "cut at {cut}");
            }
        }
        let answers = [
            Ok(vec![Delivery {
                window: 3,
                offset: 8,
                data: vec![9; 12],
            }]),
            Ok(Vec::new()),
            Err(Error::Timeout {
                what: text!("rank 1 waiting for signals"),
                after_ms: 5,
            }),
        ];
        for result in answers {
            let f = Msg::OneSidedDone {
                id: 4,
                result: result.clone(),
            }
            .encode();
            let Msg::OneSidedDone { id, result: got } = Msg::decode(&f[4..]).unwrap() else {
                panic!("not an answer")
            };
            assert_eq!((id, got), (4, result));
            for cut in 1..f.len() - 4 {
                assert!(Msg::decode(&f[4..4 + cut]).is_err(), "cut at {cut}");
            }
        }
    }
}

//! The rank side of one-sided calls across processes: a rank process's put, signal or wait
//! goes to the host as one message and its stream waits for the answer (see `signals`), so
//! the calls keep their place in the stream's order.

use crate::delivery::Delivery;
use crate::shared::CommShared;
use crate::sync::{lock, wait_for};
use crate::transport::link::Link;
use crate::transport::wire::Msg;
use crate::transport::wire_one_sided::OneSidedCall;
use oxccl_core::one_sided::SignalWait;
use oxccl_core::{Error, Result};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often a rank waiting for the host re-checks whether it was aborted.
const TICK: Duration = Duration::from_millis(5);

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Sends `call` of rank `me` and waits for the host's answer (or the end of the connection,
/// or of the rank).
fn call(link: &Link, sh: &CommShared, me: u32, call: OneSidedCall) -> Result<Vec<Delivery>> {
    let id = link.next_batch.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = link.tx.send(&Msg::OneSided { id, call }, None) {
        let why = lock(&link.replies.0).broken.clone();
        return Err(why.map_or(e, |detail| Error::Remote { detail }));
    }
    let (m, cv) = &*link.replies;
    let mut g = lock(m);
    loop {
        if let Some(r) = g.one_sided.remove(&id) {
            return r;
        }
        if let Some(why) = &g.broken {
            return Err(Error::Remote {
                detail: why.clone(),
            });
        }
        if !sh.alive(me) {
            return Err(sh.own_error(me));
        }
        g = wait_for(cv, g, TICK);
    }
}

/// A put of `data` into rank `to`'s window (`raw`, `offset`) with a signal, through the host.
#[allow(clippy::too_many_arguments)]
pub(crate) fn put(
    link: &Link,
    sh: &CommShared,
    me: u32,
    to: u32,
    (raw, offset): (usize, usize),
    data: &[u8],
    (signal, ctx): (u32, u32),
    limit: Duration,
) -> Result<()> {
    let c = OneSidedCall::Put {
        to,
        window: raw as u64,
        offset: offset as u64,
        signal,
        ctx,
        limit_ms: ms(limit),
        data: data.to_vec(),
    };
    call(link, sh, me, c).map(drop)
}

/// A signal to rank `to`, through the host.
pub(crate) fn signal(
    link: &Link,
    sh: &CommShared,
    me: u32,
    to: u32,
    (signal, ctx): (u32, u32),
) -> Result<()> {
    call(link, sh, me, OneSidedCall::Signal { to, signal, ctx }).map(drop)
}

/// A wait for `waits` on the host (up to `limit`): the puts kept there for this rank.
pub(crate) fn wait(
    link: &Link,
    sh: &CommShared,
    me: u32,
    waits: &[SignalWait],
    limit: Duration,
) -> Result<Vec<Delivery>> {
    let c = OneSidedCall::Wait {
        waits: waits.to_vec(),
        limit_ms: ms(limit),
    };
    call(link, sh, me, c)
}

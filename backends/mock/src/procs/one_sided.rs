//! The host side of one-sided calls across processes (see `signals`): a rank process's put,
//! signal or wait runs on the host's communicator, where every rank's signals live, and is
//! answered once it ran (a wait with the puts it takes along). Puts and waits may wait (a
//! window not yet registered, signals not yet raised), so they run on a thread of their own
//! and the rank's connection keeps serving its other streams meanwhile.

use crate::shared::CommShared;
use crate::transport::chan::Tx;
use crate::transport::wire::Msg;
use crate::transport::wire_one_sided::OneSidedCall;
use std::sync::Arc;
use std::time::Duration;

/// Runs `call` of `rank` and sends the answer for `id` on `tx`.
pub(crate) fn serve(real: &Arc<CommShared>, rank: u32, id: u64, call: OneSidedCall, tx: &Arc<Tx>) {
    if let OneSidedCall::Signal { to, signal, ctx } = call {
        real.raise(to, rank, signal, ctx);
        let _ = tx.send(
            &Msg::OneSidedDone {
                id,
                result: Ok(Vec::new()),
            },
            None,
        );
        return;
    }
    let (real, answer) = (real.clone(), tx.clone());
    let run = move || {
        let result = match call {
            OneSidedCall::Put {
                to,
                window,
                offset,
                signal,
                ctx,
                limit_ms,
                data,
            } => real
                .put_from(
                    rank,
                    to,
                    (window as usize, offset as usize),
                    &data,
                    (signal, ctx),
                    Duration::from_millis(limit_ms),
                )
                .map(|()| Vec::new()),
            OneSidedCall::Wait { waits, limit_ms } => {
                real.take(rank, &waits, Duration::from_millis(limit_ms))
            }
            OneSidedCall::Signal { .. } => Ok(Vec::new()),
        };
        let _ = answer.send(&Msg::OneSidedDone { id, result }, None);
    };
    if let Err(e) = std::thread::Builder::new()
        .name("oxccl-mock-one-sided".into())
        .spawn(run)
    {
        let result = Err(oxccl_core::Error::Remote {
            detail: oxccl_core::text!("the mock host has no thread for a one-sided call: {e}"),
        });
        let _ = tx.send(&Msg::OneSidedDone { id, result }, None);
    }
}

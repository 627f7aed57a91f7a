//! Each elastic family's monitor: a thread that looks in the store for a decision another
//! member began, so a rank that saw no failure itself (it was computing, or its operations
//! had not reached the lost rank) joins the decision within the window instead of being left
//! out. It asks through [`Store::check_watched`](oxccl_store::Store::check_watched): on a TCP
//! store the server says when the epoch's key is set and the asks in between send nothing,
//! so a world of any size costs the server no query per look.

use super::super::backend::PgBackend;
use super::decide;
use super::successor::last;
use crate::pg::inner::PgInner;
use crate::pg::keys::ELASTIC_PREFIX as PREFIX;
use oxccl_core::{text, Error};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the monitor looks (on a TCP store a local read of a waiting socket).
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Starts the monitor of `root`'s family; it ends with the group (dropped or destroyed) or
/// once this rank is out.
pub(crate) fn start<B: PgBackend>(root: &Arc<PgInner<B>>) {
    let weak = Arc::downgrade(root);
    let started = std::thread::Builder::new()
        .name("oxccl-elastic".into())
        .spawn(move || watch(&weak));
    if let Err(e) = started {
        log::warn!("oxccl elastic: no monitor thread ({e}); ranks join decisions only when their own operations fail");
    }
}

fn watch<B: PgBackend>(weak: &Weak<PgInner<B>>) {
    loop {
        std::thread::sleep(LOOK_EVERY);
        let Some(root) = weak.upgrade() else { return };
        let Some(el) = root.family.elastic.as_ref() else {
            return;
        };
        if last(&root).destroyed.load(Ordering::Acquire) || el.left_out.load(Ordering::Acquire) {
            return;
        }
        let epoch = el.epoch.load(Ordering::Acquire);
        let begun = format!("{PREFIX}/view/{epoch}/count");
        if let Ok(true) = root.store.check_watched(&begun) {
            let timeout = u64::try_from(root.timeout().as_millis()).unwrap_or(u64::MAX);
            let (stays, idle) = el.stays_in(timeout);
            if !stays {
                decide::stay_out(&root, epoch, idle);
                return;
            }
            let cause = Error::Remote {
                detail: text!("another member began deciding who goes on at epoch {epoch}"),
            };
            let _ = decide::after_failure(&root, epoch, &cause);
        }
    }
}

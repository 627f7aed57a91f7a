//! Point-to-point: a send copies its buffer into the hub at once (eager) and completes; a recv
//! waits for the message with its sequence number on the (src, dst) pair.
//!
//! Eager sends are more lenient than NCCL, where a large send outside a group blocks until the
//! peer posts the recv: code that relies on an unmatched large send completing works here and
//! may hang on GPUs. Messages are matched per pair in issue order, as NCCL does.

use crate::memory::{read, write};
use crate::mismatch;
use crate::op_desc::OpDesc;
use crate::shared::{mark_dead_locked, CommShared, EagerSend};
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::{text, Error, Result};

impl CommShared {
    /// Sends `desc.send` from `src` to `dst` as message `seq` of the pair.
    ///
    /// # Safety
    /// `desc.send` must be readable host memory.
    pub(crate) unsafe fn p2p_send(&self, src: u32, dst: u32, seq: u64, desc: OpDesc) -> Result<()> {
        // `check::op` bounded the span to isize::MAX bytes, so the product cannot saturate.
        let bytes = desc.send.len.saturating_mul(desc.elem());
        // SAFETY: the caller's promise for the send buffer, of the span the checks validated.
        let data = unsafe { read(desc.send.addr, bytes, "send") }?;
        lock(&self.hub)
            .mail
            .insert((src, dst, seq), EagerSend { desc, data });
        self.cv.notify_all();
        Ok(())
    }

    /// Receives message `seq` from `src` into `desc.recv` as `dst`.
    ///
    /// # Safety
    /// `desc.recv` must be writable host memory nobody else touches until this returns.
    pub(crate) unsafe fn p2p_recv(
        &self,
        dst: u32,
        src: u32,
        seq: u64,
        desc: &OpDesc,
    ) -> Result<()> {
        let mut hub = lock(&self.hub);
        loop {
            // A dead receiver's buffer may be freed already (its user saw the error): check
            // under the lock that marks ranks dead, before taking the message.
            if hub.dead.get(dst as usize).is_some_and(|d| d.is_some()) {
                drop(hub);
                return Err(self.own_error(dst));
            }
            if let Some(msg) = hub.mail.remove(&(src, dst, seq)) {
                if let Err(e) = mismatch::check_p2p(&msg.desc, src, desc, dst) {
                    // Both ends of a mismatched pair learn of it.
                    if let Some(why) = self.set_error(src, e.clone()) {
                        mark_dead_locked(&mut hub, src, why);
                    }
                    drop(hub);
                    self.cv.notify_all();
                    return Err(e);
                }
                // Written under the hub's lock: the rank cannot be marked dead (and its user
                // free the buffer) while the copy runs.
                // SAFETY: the caller's promise for the recv buffer (alive: the rank is not
                // dead, checked under this lock); `check_p2p` matched the message's element
                // count and type to it, so `msg.data` is exactly its span.
                unsafe { write(desc.recv.addr, &msg.data) };
                drop(hub);
                return Ok(());
            }
            if let Some(why) = hub.dead.get(src as usize).cloned().flatten() {
                return Err(Error::Remote {
                    detail: text!("rank {src} {why}"),
                });
            }
            hub = wait_for(&self.cv, hub, TICK);
        }
    }
}

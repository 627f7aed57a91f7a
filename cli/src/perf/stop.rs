//! Stopping a world of rank threads when one rank fails: every rank's communicators and
//! process groups are aborted, so the others return from a collective the failed rank will
//! never join instead of waiting out their timeouts.

/// Aborts one communicator or process group, with a reason.
pub type AbortFn = Box<dyn Fn(&str) + Send>;

/// Aborts every rank's communicators of a thread world once one rank fails, so that the others
/// return from a collective that rank will never join instead of hanging.
#[derive(Default)]
pub struct Stopper {
    inner: std::sync::Mutex<(Option<String>, Vec<AbortFn>)>,
}

impl Stopper {
    /// Runs `abort` at the stop (at once when stopped already).
    pub fn on_stop(&self, abort: AbortFn) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match &g.0 {
            Some(why) => abort(why),
            None => g.1.push(abort),
        }
    }

    /// Aborts everything registered, once.
    pub fn stop(&self, why: &str) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.0.is_none() {
            g.0 = Some(why.to_owned());
            for abort in &g.1 {
                abort(why);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Stopper;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_stop_aborts_everyone_once_and_latecomers_at_once() {
        let stop = Stopper::default();
        let hits = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            let h = hits.clone();
            stop.on_stop(Box::new(move |why| {
                assert_eq!(why, "rank 1 failed");
                h.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        stop.stop("rank 1 failed");
        stop.stop("rank 0 failed too");
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        let h = hits.clone();
        stop.on_stop(Box::new(move |_| {
            h.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(hits.load(Ordering::SeqCst), 3);
    }
}

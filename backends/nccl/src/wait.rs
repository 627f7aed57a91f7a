//! Polling a nonblocking NCCL call until it leaves InProgress, bounded by a deadline.

use oxccl_core::{text, Error, Progress, Result};
use std::time::{Duration, Instant};

/// How long a nonblocking init, split, finalize or group end may stay in progress.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    start: Instant,
    limit: Duration,
}

impl Deadline {
    /// A deadline `limit` from now.
    pub fn after(limit: Duration) -> Deadline {
        Deadline {
            start: Instant::now(),
            limit,
        }
    }

    /// Polls `step` until it reports [`Progress::Done`] or fails; [`Error::Timeout`] naming
    /// `what` once the deadline passes. Spins briefly, then sleeps, so a quick completion is
    /// seen within microseconds and a slow one costs no CPU.
    pub fn poll(&self, what: &str, mut step: impl FnMut() -> Result<Progress>) -> Result<()> {
        let mut spins = 0u32;
        loop {
            if step()? == Progress::Done {
                return Ok(());
            }
            let waited = self.start.elapsed();
            if waited >= self.limit {
                return Err(Error::Timeout {
                    what: text!("{what} still in progress"),
                    after_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
            }
            spins = spins.saturating_add(1);
            if spins < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_out_with_the_name() {
        let d = Deadline::after(Duration::from_millis(20));
        let e = d.poll("split", || Ok(Progress::InProgress)).unwrap_err();
        assert!(
            matches!(e, Error::Timeout { ref what, after_ms } if what.contains("split") && after_ms >= 20)
        );
    }

    #[test]
    fn returns_when_done_and_passes_errors() {
        let d = Deadline::after(Duration::from_secs(5));
        let mut n = 0;
        d.poll("init", || {
            n += 1;
            Ok(if n < 3 {
                Progress::InProgress
            } else {
                Progress::Done
            })
        })
        .unwrap();
        assert_eq!(n, 3);
        let e = d
            .poll("init", || Err(Error::Remote { detail: text!("x") }))
            .unwrap_err();
        assert!(matches!(e, Error::Remote { .. }));
    }
}

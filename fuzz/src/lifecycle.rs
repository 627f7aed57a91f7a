//! Random lifecycle transitions: never leaves Destroyed, abort is idempotent, the first failure
//! reason is kept, only Ready accepts operations.

use arbitrary::{Arbitrary, Unstructured};
use oxccl_core::state::lifecycle::{CommState, Lifecycle};

#[derive(Debug, Arbitrary)]
enum Step {
    InitDone,
    Fail(u8),
    Abort(u8),
    FinalizeStart,
    FinalizeDone,
    Destroy,
}

const REASONS: [&str; 4] = ["timeout", "remote", "user", ""];

fn reason(i: u8) -> &'static str {
    REASONS
        .get(usize::from(i) % REASONS.len())
        .copied()
        .unwrap_or("")
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let Ok(input) = <(bool, Vec<Step>)>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let (initializing, steps) = input;
    let mut l = if initializing {
        Lifecycle::initializing()
    } else {
        Lifecycle::ready()
    };
    // The (non-empty) reason once the communicator has failed or been aborted: it must never change.
    let mut kept: Option<String> = None;
    for step in steps {
        let before = l.clone();
        match step {
            Step::InitDone => {
                let _ = l.init_done();
            }
            Step::Fail(r) => l.fail(reason(r)),
            Step::Abort(r) => {
                l.abort(reason(r));
                let once = l.clone();
                l.abort("again");
                assert_eq!(l, once, "abort is idempotent");
            }
            Step::FinalizeStart => {
                let _ = l.finalize_start();
            }
            Step::FinalizeDone => {
                let _ = l.finalize_done();
            }
            Step::Destroy => l.destroy(),
        }
        if before.state() == CommState::Destroyed {
            assert_eq!(l.state(), CommState::Destroyed, "left Destroyed");
        }
        if before.state().is_dead() {
            assert!(
                l.state().is_dead(),
                "{} revived to {}",
                before.state(),
                l.state()
            );
        }
        match &kept {
            Some(r) => assert_eq!(l.reason(), r, "first failure reason lost"),
            // An empty reason is the caller's; destroy may fill it in.
            None if matches!(l.state(), CommState::Failed | CommState::Aborted)
                && !l.reason().is_empty() =>
            {
                kept = Some(l.reason().to_string())
            }
            None => {}
        }
        assert_eq!(l.ensure_ready("op").is_ok(), l.state() == CommState::Ready);
    }
}

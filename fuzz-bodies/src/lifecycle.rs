//! Random lifecycle transitions against a reference model (state, reason and every refusal
//! equal after each step): never leaves Destroyed, abort is idempotent, the first failure
//! reason is kept, only Ready accepts operations, an abort in the background is released once
//! and ends Aborted, a revoke leaves a communicator that only Ready or Revoked may reshape,
//! a suspended one accepts nothing until resumed.

use arbitrary::{Arbitrary, Unstructured};
use oxccl_core::comm_state::CommState;
use oxccl_core::state::lifecycle::Lifecycle;
use oxccl_core::Error;

#[derive(Debug, Arbitrary)]
enum Step {
    InitDone,
    Fail(u8),
    Abort(u8),
    AbortBegin(u8),
    AbortDone,
    FinalizeStart,
    FinalizeDone,
    Destroy,
    RevokeBegin(u8),
    RevokeDone,
    Suspend,
    Resume,
}

const REASONS: [&str; 4] = ["timeout", "remote", "user", ""];

fn reason(i: u8) -> &'static str {
    REASONS
        .get(usize::from(i) % REASONS.len())
        .copied()
        .unwrap_or("")
}

/// The reference model, restated from the lifecycle's documented rules.
#[derive(Debug, Clone)]
struct Model {
    state: CommState,
    reason: String,
}

impl Model {
    fn refuse(&self, attempted: &'static str) -> (CommState, &'static str, String) {
        let reason = if self.reason.is_empty() {
            self.state.name().to_string()
        } else {
            self.reason.clone()
        };
        (self.state, attempted, reason)
    }

    /// `Err((state, attempted, reason))` for a refused transition.
    fn step(&mut self, step: &Step) -> Result<(), (CommState, &'static str, String)> {
        use CommState::*;
        match step {
            Step::InitDone => match self.state {
                Initializing | Ready => self.state = Ready,
                _ => return Err(self.refuse("complete init")),
            },
            Step::Fail(r) => {
                if matches!(self.state, Initializing | Ready | Finalizing) {
                    self.state = Failed;
                    self.reason = reason(*r).to_string();
                }
            }
            Step::Abort(r) | Step::AbortBegin(r) => {
                let to = match step {
                    Step::Abort(_) => Aborted,
                    _ => Aborting,
                };
                match self.state {
                    Aborted | Aborting | Destroyed => {}
                    Failed | Revoking | Revoked => self.state = to,
                    _ => {
                        self.state = to;
                        self.reason = reason(*r).to_string();
                    }
                }
            }
            Step::AbortDone => {
                if self.state == Aborting {
                    self.state = Aborted;
                }
            }
            Step::FinalizeStart => match self.state {
                Ready => self.state = Finalizing,
                _ => return Err(self.refuse("finalize")),
            },
            Step::FinalizeDone => match self.state {
                Finalizing => {
                    self.state = Finalized;
                    self.reason = "finalized".to_string();
                }
                _ => return Err(self.refuse("complete finalize")),
            },
            Step::RevokeBegin(r) => match self.state {
                Ready => {
                    self.state = Revoking;
                    self.reason = reason(*r).to_string();
                }
                Failed => self.state = Revoking,
                Revoking | Revoked => {}
                _ => return Err(self.refuse("revoke")),
            },
            Step::RevokeDone => {
                if self.state == Revoking {
                    self.state = Revoked;
                }
            }
            Step::Suspend => match self.state {
                Ready => self.state = Suspended,
                _ => return Err(self.refuse("suspend")),
            },
            Step::Resume => match self.state {
                Suspended => self.state = Ready,
                _ => return Err(self.refuse("resume")),
            },
            Step::Destroy => {
                if self.state != Destroyed {
                    if self.reason.is_empty() {
                        self.reason = "destroyed".to_string();
                    }
                    self.state = Destroyed;
                }
            }
        }
        Ok(())
    }
}

fn refusal(r: oxccl_core::Result<()>) -> Result<(), (CommState, &'static str, String)> {
    match r {
        Ok(()) => Ok(()),
        Err(Error::InvalidState {
            state,
            attempted,
            reason,
        }) => Err((state, attempted, reason.to_string())),
        Err(e) => panic!("a lifecycle refusal is InvalidState, got {e:?}"),
    }
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
    let mut m = Model {
        state: l.state(),
        reason: String::new(),
    };
    for step in steps {
        let before = l.clone();
        let want = m.step(&step);
        match step {
            Step::InitDone => assert_eq!(refusal(l.init_done()), want),
            Step::Fail(r) => l.fail(reason(r)),
            Step::Abort(r) => {
                l.abort(reason(r));
                let once = l.clone();
                l.abort("again");
                assert_eq!(l, once, "abort is idempotent");
            }
            Step::FinalizeStart => assert_eq!(refusal(l.finalize_start()), want),
            Step::FinalizeDone => assert_eq!(refusal(l.finalize_done()), want),
            Step::AbortBegin(r) => {
                let fresh = !matches!(
                    before.state(),
                    CommState::Aborted | CommState::Aborting | CommState::Destroyed
                );
                assert_eq!(l.abort_begin(reason(r)), fresh, "released once");
                assert!(!l.abort_begin("again"), "released once");
            }
            Step::AbortDone => l.abort_done(),
            Step::Destroy => l.destroy(),
            Step::RevokeBegin(r) => assert_eq!(refusal(l.revoke_begin(reason(r))), want),
            Step::RevokeDone => l.revoke_done(),
            Step::Suspend => assert_eq!(refusal(l.suspend()), want),
            Step::Resume => assert_eq!(refusal(l.resume()), want),
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
            None if matches!(
                l.state(),
                CommState::Failed | CommState::Aborted | CommState::Aborting
            ) && !l.reason().is_empty() =>
            {
                kept = Some(l.reason().to_string())
            }
            None => {}
        }
        assert_eq!(
            (l.state(), l.reason()),
            (m.state, m.reason.as_str()),
            "after {step:?}"
        );
        // No operation is accepted on a communicator that is not ready; an aborted one says
        // why, with its first cause.
        match l.ensure_ready("op") {
            Ok(()) => assert_eq!(m.state, CommState::Ready),
            Err(Error::Aborted { reason }) => {
                assert!(m.state.is_aborted());
                assert_eq!(reason.as_str(), m.reason);
            }
            Err(Error::InvalidState {
                state, attempted, ..
            }) => {
                assert!(!matches!(m.state, CommState::Ready) && !m.state.is_aborted());
                assert_eq!((state, attempted), (m.state, "op"));
            }
            Err(e) => panic!("ensure_ready gave {e:?}"),
        }
        // Split and shrink: ready or revoked; otherwise what an operation would get.
        let reshape = l.ensure_reshapable("shrink");
        match m.state {
            CommState::Ready | CommState::Revoked => assert!(reshape.is_ok(), "{reshape:?}"),
            s if s.is_aborted() => assert!(matches!(reshape, Err(Error::Aborted { .. }))),
            s => assert!(
                matches!(reshape, Err(Error::InvalidState { state, attempted: "shrink", .. }) if state == s),
                "{reshape:?}"
            ),
        }
    }
}

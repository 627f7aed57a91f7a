//! What the watchdog needs to know of a group: its error-handling mode, its completion hooks,
//! and the flight recorder its works are recorded in.

use crate::pg::recorder::Recorder;
use oxccl_core::env::ErrorHandling;
use oxccl_core::OpKind;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// What a completion hook is told about a finished operation (timing on).
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedWork {
    /// The group's uid.
    pub group: u64,
    /// The operation (the first of a coalesced block).
    pub op: OpKind,
    /// Whether the work stood for a coalesced block.
    pub coalesced: bool,
    /// Its sequence number in the group.
    pub seq: u64,
    /// When it was issued, in nanoseconds of the process's monotonic clock.
    pub created_ns: u64,
    /// When the watchdog saw it completed, same clock.
    pub completed_ns: u64,
    /// How long it ran on its stream, from its start and end events.
    pub duration: Duration,
}

/// A completion hook: an error it returns is reported (logged and kept on the group).
pub type CompletionHook = Box<dyn Fn(&CompletedWork) -> Result<(), String> + Send + Sync>;

/// A group's part of the watchdog's configuration, shared by its works.
pub(crate) struct GroupWatch {
    pub uid: u64,
    pub desc: String,
    pub global_rank: u32,
    pub mode: ErrorHandling,
    pub dump_on_timeout: bool,
    pub recorder: Recorder,
    hooks: Mutex<Vec<CompletionHook>>,
    hook_errors: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl GroupWatch {
    pub fn new(
        uid: u64,
        desc: String,
        global_rank: u32,
        mode: ErrorHandling,
        dump_on_timeout: bool,
        recorder: Recorder,
    ) -> Arc<GroupWatch> {
        Arc::new(GroupWatch {
            uid,
            desc,
            global_rank,
            mode,
            dump_on_timeout,
            recorder,
            hooks: Mutex::new(Vec::new()),
            hook_errors: Mutex::new(Vec::new()),
        })
    }

    pub fn add_hook(&self, hook: CompletionHook) {
        lock(&self.hooks).push(hook);
    }

    /// Runs every hook on `done`; a failing or panicking hook is reported, not lost.
    pub fn run_hooks(&self, done: &CompletedWork) {
        let hooks = lock(&self.hooks);
        for (i, hook) in hooks.iter().enumerate() {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(done)));
            let failure = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(_) => String::from("the hook panicked"),
            };
            let msg = format!(
                "completion hook {i} of group {} failed on seq {}: {failure}",
                self.uid, done.seq
            );
            log::error!("{msg}");
            lock(&self.hook_errors).push(msg);
        }
    }

    pub fn hook_errors(&self) -> Vec<String> {
        lock(&self.hook_errors).clone()
    }
}

//! Going on after a lost rank: the survivors' decision of who goes on, through the store.
//! (The rules are the core's, pure and fuzzed: [`oxccl_core::membership::survivors`].)

mod survivors;

pub use oxccl_core::membership::survivors::Verdict;
pub use survivors::{Outcome, Survivors};

//! What the case suites (`tests/pg_cases`, `tests/capture_cases`) share: a case's shape and
//! the two macros its body checks with. Each suite includes this file as a module.
#![allow(dead_code)]

use oxccl::pg::{PgOptions, ProcessGroup};

/// A case's verdict on one rank.
pub type Verdict = Result<(), String>;

/// Makes this rank's default group of the case with the given options.
pub type MakeGroup<'a, B> = &'a dyn Fn(PgOptions) -> oxccl::Result<ProcessGroup<B>>;

/// A case: its name and its body for one rank.
pub type Case<B> = (&'static str, fn(MakeGroup<'_, B>, u32) -> Verdict);

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!("{}:{}: {}", file!(), line!(), format!($($fmt)*)));
        }
    };
}

/// `r` unwrapped, or the error as a verdict.
macro_rules! ok {
    ($r:expr) => {
        $r.map_err(|e| format!("{}:{}: {e}", file!(), line!()))?
    };
}

//! NCCL calls chained until the first one fails: its code is the outcome.

/// `first` when it failed, else the code of `next` (NCCL calls chained until one fails).
pub(super) fn then(first: i32, next: impl FnOnce() -> i32) -> i32 {
    if first != 0 {
        first
    } else {
        next()
    }
}

/// Calls `f` for each rank in order, stopping at the first failing code.
pub(super) fn each_rank(size: usize, f: impl FnMut(usize) -> i32) -> i32 {
    (0..size).map(f).find(|&r| r != 0).unwrap_or(0)
}

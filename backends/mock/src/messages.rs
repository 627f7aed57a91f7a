//! The texts the mock's errors share: NCCL's words for a result code, a short list of ranks.

use oxccl_core::ResultCode;

/// NCCL's `ncclGetErrorString` text for a code.
pub(crate) fn code_text(code: ResultCode) -> &'static str {
    match code.0 {
        0 => "no error",
        1 => "unhandled cuda error",
        2 => "unhandled system error",
        3 => "internal error",
        4 => "invalid argument",
        5 => "invalid usage",
        6 => "remote process exited or there was a network error",
        7 => "NCCL operation in progress",
        8 => "timeout",
        _ => "unknown result code",
    }
}

/// `ranks` as a short list for a message (the first 8, then how many more).
pub(crate) fn rank_list(ranks: &[u32]) -> String {
    let mut s: Vec<String> = ranks.iter().take(8).map(u32::to_string).collect();
    if ranks.len() > 8 {
        s.push(format!("and {} more", ranks.len() - 8));
    }
    s.join(", ")
}

//! NCCL result codes as an open integer newtype.

use core::fmt;

/// An `ncclResult_t`. The set of codes grows across releases (`ncclNumResults` went 6 → 9), so
/// this is not a closed enum: any value not [`ResultCode::SUCCESS`] or [`ResultCode::IN_PROGRESS`]
/// is a failure, including codes this crate has never heard of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResultCode(pub i32);

impl ResultCode {
    /// `ncclSuccess`.
    pub const SUCCESS: ResultCode = ResultCode(0);
    /// `ncclUnhandledCudaError`.
    pub const UNHANDLED_CUDA_ERROR: ResultCode = ResultCode(1);
    /// `ncclSystemError`.
    pub const SYSTEM_ERROR: ResultCode = ResultCode(2);
    /// `ncclInternalError`.
    pub const INTERNAL_ERROR: ResultCode = ResultCode(3);
    /// `ncclInvalidArgument`.
    pub const INVALID_ARGUMENT: ResultCode = ResultCode(4);
    /// `ncclInvalidUsage`.
    pub const INVALID_USAGE: ResultCode = ResultCode(5);
    /// `ncclRemoteError` (2.13+): a peer failed.
    pub const REMOTE_ERROR: ResultCode = ResultCode(6);
    /// `ncclInProgress` (2.14+): a nonblocking call has not finished.
    pub const IN_PROGRESS: ResultCode = ResultCode(7);
    /// `ncclTimeout` (2.30.3+).
    pub const TIMEOUT: ResultCode = ResultCode(8);

    /// Whether the call succeeded.
    pub const fn is_success(self) -> bool {
        self.0 == 0
    }

    /// Whether a nonblocking call is still running.
    pub const fn is_in_progress(self) -> bool {
        self.0 == 7
    }

    /// NCCL's name for a known code; `None` for codes newer than this crate.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "ncclSuccess",
            1 => "ncclUnhandledCudaError",
            2 => "ncclSystemError",
            3 => "ncclInternalError",
            4 => "ncclInvalidArgument",
            5 => "ncclInvalidUsage",
            6 => "ncclRemoteError",
            7 => "ncclInProgress",
            8 => "ncclTimeout",
            _ => return None,
        })
    }
}

impl fmt::Display for ResultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "unknown NCCL result {}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_zero_is_success() {
        for c in [-1, 1, 6, 7, 8, 9, 42, i32::MIN, i32::MAX] {
            assert!(!ResultCode(c).is_success(), "{c}");
        }
        assert!(ResultCode(0).is_success());
        assert!(ResultCode(7).is_in_progress());
    }

    #[test]
    fn unknown_codes_have_no_name() {
        assert_eq!(ResultCode(8).name(), Some("ncclTimeout"));
        assert_eq!(ResultCode(9).name(), None);
        assert_eq!(ResultCode(-3).name(), None);
    }
}

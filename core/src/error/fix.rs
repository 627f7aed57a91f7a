//! What to do about an error, for the errors a newcomer meets first: no launcher, no GPU, a
//! library too old for a feature, a rank that never came. `Debug` shows it after the message,
//! so a program that returns the error from `main` (or unwraps it) prints the fix too.

use super::Error;
use crate::feature::Missing;
use crate::result::ResultCode;
use core::fmt;

/// The fix for an error ([`Error::fix`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    /// No launcher's variables: start the ranks under one, or as threads.
    StartRanks,
    /// `env://` without rank 0's address.
    MasterAddr,
    /// The backend asked for cannot run here.
    Backend,
    /// The loaded NCCL is older than the release a feature needs.
    NewerNccl(crate::version::Version),
    /// The loaded NCCL lacks a symbol its version should have.
    OtherNccl,
    /// No CUDA driver: the NCCL backend cannot run on this machine.
    NoGpu,
    /// A rank did not take part in time.
    RanksInTime,
    /// Another rank failed.
    RemoteFailed,
}

impl fmt::Debug for Fix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// How to get a usable NCCL, said wherever one is missing or too old.
pub const GET_NCCL: &str = "`pip install nvidia-nccl-cu12` (or -cu13) installs one, and \
OXCCL_NCCL_LIBRARY=/path/to/libnccl.so.2 points oxccl at a file";

impl fmt::Display for Fix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fix::StartRanks => f.write_str(
                "start the ranks with a launcher, which sets RANK and WORLD_SIZE (torchrun \
                 --nproc-per-node N, srun, mpirun), or run them as threads of this process \
                 with oxccl::launch::spawn",
            ),
            Fix::MasterAddr => f.write_str(
                "set MASTER_ADDR and MASTER_PORT to rank 0's host and a free port (torchrun \
                 sets both), or use a tcp:// or file:// init method",
            ),
            Fix::Backend => f.write_str(
                "unset OXCCL_BACKEND (auto takes NCCL where a GPU and NCCL are, else the \
                 mock), or set OXCCL_BACKEND=mock on a machine without a GPU",
            ),
            Fix::NewerNccl(need) => write!(f, "load NCCL {need} or newer: {GET_NCCL}"),
            Fix::OtherNccl => write!(f, "load an NCCL build that exports it: {GET_NCCL}"),
            Fix::NoGpu => f.write_str(
                "the NCCL backend needs an NVIDIA GPU and its driver; without one, run on the \
                 mock world (OXCCL_BACKEND=mock, or oxccl::mock::World for a Comm-level test)",
            ),
            Fix::RanksInTime => f.write_str(
                "check that every rank was started, with the same world size and store \
                 address, and that none is stuck before this call; OXCCL_TIMEOUT_MS raises \
                 the limit, and OXCCL_DUMP_ON_TIMEOUT=1 with `oxccl trace` shows where each \
                 rank was",
            ),
            Fix::RemoteFailed => f.write_str(
                "read the failed rank's own log for the cause; this communicator is done: \
                 abort it and make a new one, or run an elastic group (OXCCL_ELASTIC=1) to go \
                 on without the lost rank",
            ),
        }
    }
}

impl Error {
    /// What to do about this error, for the kinds a program is likely to meet first (`None`
    /// where the message itself says it: a wrong argument names the argument and what it
    /// should have been).
    pub fn fix(&self) -> Option<Fix> {
        match self {
            Error::InvalidArgument { arg, .. } => match *arg {
                "RANK" | "WORLD_SIZE" => Some(Fix::StartRanks),
                "MASTER_ADDR" | "MASTER_PORT" => Some(Fix::MasterAddr),
                "OXCCL_BACKEND" => Some(Fix::Backend),
                _ => None,
            },
            Error::Unsupported { missing, .. } => match missing {
                Missing::TooOld { need, .. } => Some(Fix::NewerNccl(*need)),
                Missing::SymbolAbsent { .. } => Some(Fix::OtherNccl),
                Missing::Disabled => None,
            },
            Error::Backend { code, text, .. }
                if *code == ResultCode::UNHANDLED_CUDA_ERROR && text.contains("no CUDA driver") =>
            {
                Some(Fix::NoGpu)
            }
            Error::Timeout { .. } => Some(Fix::RanksInTime),
            Error::Remote { .. } => Some(Fix::RemoteFailed),
            _ => None,
        }
    }
}

/// The message, then the fix on a line of its own: what `main` returning the error, `unwrap`
/// and `{:?}` print.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)?;
        match self.fix() {
            Some(fix) => write!(f, "\n  to fix: {fix}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feature::Feature;
    use crate::text::text_str;
    use crate::version::Version;

    /// A fixed-size buffer to format into (the core may have no allocator).
    type Buf = heapless::String<1024>;

    fn debug(e: &Error) -> Buf {
        let mut s = Buf::new();
        core::fmt::write(&mut s, format_args!("{e:?}")).unwrap();
        s
    }

    #[test]
    fn debug_is_the_message_then_the_fix() {
        let e = Error::invalid(
            "RANK",
            format_args!("a launcher's rank and size; none is set"),
        );
        let d = debug(&e);
        assert!(
            d.starts_with("invalid argument `RANK`: expected a launcher's rank and size"),
            "{d}"
        );
        assert!(
            d.contains("\n  to fix: start the ranks with a launcher"),
            "{d}"
        );
        assert!(d.contains("oxccl::launch::spawn"), "{d}");
    }

    #[test]
    fn a_feature_too_new_names_the_release_to_load_and_how() {
        let e = Error::Unsupported {
            feature: Feature::Shrink,
            missing: Missing::TooOld {
                need: Version::new(2, 27, 0),
                have: Version::new(2, 19, 3),
            },
        };
        let d = debug(&e);
        assert!(d.contains("needs NCCL 2.27.0, loaded 2.19.3"), "{d}");
        assert!(d.contains("to fix: load NCCL 2.27.0 or newer"), "{d}");
        assert!(d.contains("pip install nvidia-nccl-cu12") && d.contains("OXCCL_NCCL_LIBRARY"));
    }

    #[test]
    fn each_first_error_has_its_fix_and_a_plain_wrong_argument_none() {
        let cases = [
            (
                Error::invalid("WORLD_SIZE", format_args!("x")),
                Some(Fix::StartRanks),
            ),
            (
                Error::invalid("MASTER_ADDR", format_args!("x")),
                Some(Fix::MasterAddr),
            ),
            (
                Error::invalid("OXCCL_BACKEND", format_args!("x")),
                Some(Fix::Backend),
            ),
            (Error::invalid("recv", format_args!("x")), None),
            (
                Error::Timeout {
                    what: text_str("rank 1 never arrived"),
                    after_ms: 5,
                },
                Some(Fix::RanksInTime),
            ),
            (
                Error::Remote {
                    detail: text_str("peer closed"),
                },
                Some(Fix::RemoteFailed),
            ),
            (
                Error::Backend {
                    code: ResultCode::UNHANDLED_CUDA_ERROR,
                    text: text_str("no CUDA driver: the NCCL backend needs NVIDIA GPUs"),
                    last: text_str(""),
                },
                Some(Fix::NoGpu),
            ),
            (
                Error::Backend {
                    code: ResultCode::UNHANDLED_CUDA_ERROR,
                    text: text_str("CUDA driver error while opening the device"),
                    last: text_str(""),
                },
                None,
            ),
            (
                Error::Unsupported {
                    feature: Feature::Shrink,
                    missing: Missing::Disabled,
                },
                None,
            ),
        ];
        for (e, fix) in cases {
            assert_eq!(e.fix(), fix, "{e}");
            assert_eq!(debug(&e).contains("to fix:"), fix.is_some(), "{e}");
        }
    }
}

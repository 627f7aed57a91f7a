//! Graph capture: a stream records the work issued on it instead of running it, and the
//! recording (a graph) is launched later, as many times as wanted (CUDA graphs; the mock
//! replays its recorded jobs).
//!
//! An optional capability, as embedded-hal's are: a stream that can capture implements
//! [`Capture`]; code that needs it says so with a bound. While a stream captures, nothing may
//! ask the host to wait for it (no synchronize, no event query, no allocation that
//! synchronizes): an implementation refuses such calls with [`Error::Capture`] and
//! [`CaptureError::Forbidden`], and a capture that saw one ends with
//! [`CaptureError::Invalidated`].

use crate::error::{Error, Result};

/// What went wrong with a capture, for [`Error::Capture`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CaptureError {
    /// The backend, the stream or the operation cannot be captured (a library too old, an
    /// operation that allocates, a host callback the mock cannot replay).
    Unsupported,
    /// `begin_capture` on a stream that is already capturing (captures do not nest).
    AlreadyCapturing,
    /// `end_capture` on a stream that is not capturing.
    NotCapturing,
    /// A call not allowed while the stream captures: synchronize, an event query, a wait on
    /// an event recorded outside the capture, launching a graph on the capturing stream.
    Forbidden,
    /// The capture saw a forbidden call (or the library invalidated it): `end_capture`
    /// returns no graph; capture again.
    Invalidated,
    /// A graph launched with what it was not captured with (another stream's device, buffers
    /// that are not the captured ones).
    Mismatch,
}

impl CaptureError {
    /// A short name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            CaptureError::Unsupported => "unsupported",
            CaptureError::AlreadyCapturing => "already capturing",
            CaptureError::NotCapturing => "not capturing",
            CaptureError::Forbidden => "forbidden while capturing",
            CaptureError::Invalidated => "capture invalidated",
            CaptureError::Mismatch => "launched with other arguments than captured",
        }
    }

    /// An [`Error::Capture`] of this kind with a formatted detail.
    pub fn error(self, detail: core::fmt::Arguments<'_>) -> Error {
        Error::Capture {
            kind: self,
            detail: crate::text::text(detail),
        }
    }

    /// An [`Error::Capture`] of this kind with a fixed detail.
    pub fn error_str(self, detail: &str) -> Error {
        Error::Capture {
            kind: self,
            detail: crate::text::text_str(detail),
        }
    }
}

impl core::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A stream that can record its work into a [`Graph`] (CUDA's stream capture).
///
/// Between [`Capture::begin_capture`] and [`Capture::end_capture`], work issued on the stream
/// (operations, event records) is recorded, not run. Captures do not nest, and one stream
/// captures from one thread at a time.
pub trait Capture: crate::traits::Stream {
    /// The recording a capture ends with.
    type Graph: Graph<Stream = Self>;

    /// Starts recording. [`CaptureError::AlreadyCapturing`] when the stream already captures.
    fn begin_capture(&self) -> Result<()>;

    /// Stops recording and returns the graph. [`CaptureError::NotCapturing`] without a begin;
    /// [`CaptureError::Invalidated`] when a forbidden call happened meanwhile (the stream no
    /// longer captures either way).
    fn end_capture(&self) -> Result<Self::Graph>;

    /// Whether the stream is capturing now.
    fn is_capturing(&self) -> bool;
}

/// A recorded graph of work, launched on a stream as many times as wanted. Dropping it frees
/// it (never waits, never panics); launches already made still run.
pub trait Graph: Send + Sync {
    /// The stream type it launches on.
    type Stream;

    /// Runs the recorded work once on `stream`, after the work issued there before (the
    /// stream it was captured on, or another of the same device). Returns once the launch is
    /// queued. [`CaptureError::Forbidden`] when `stream` is capturing.
    ///
    /// # Safety
    /// Every buffer of every operation captured must be valid again for the launch as
    /// [`Communicator::issue`](crate::Communicator::issue) requires: alive, of the captured
    /// lengths, and untouched by others until the launched work has completed.
    unsafe fn launch(&self, stream: &Self::Stream) -> Result<()>;
}

/// The detail of a refused call, for implementations: "`what` while the stream captures".
pub fn forbidden(what: &str) -> Error {
    CaptureError::Forbidden.error(format_args!(
        "{what} while the stream is capturing a graph (the host must not wait for it)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_errors_name_their_kind_and_detail() {
        let e = forbidden("synchronizing the stream");
        assert!(matches!(
            e,
            Error::Capture {
                kind: CaptureError::Forbidden,
                ..
            }
        ));
        let mut s = heapless::String::<256>::new();
        core::fmt::write(&mut s, format_args!("{e}")).unwrap();
        assert!(
            s.starts_with(
                "graph capture (forbidden while capturing): synchronizing the stream while"
            ),
            "{s}"
        );
        assert!(
            !e.is_fatal(),
            "a misused capture leaves the communicator usable"
        );
        let n = CaptureError::NotCapturing.error_str("end without begin");
        assert_eq!(n.code(), None);
    }
}

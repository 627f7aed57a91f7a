//! Graph capture: a stream records the work issued on it instead of running it, and the
//! recording (a graph) is replayed later, as many times as wanted (CUDA graphs; the mock
//! replays its recorded jobs).
//!
//! Every communicator's stream implements [`Capture`] (the trait
//! [`Communicator`](crate::Communicator) asks it of its stream), so code generic over a backend
//! captures without a bound of its own; a backend that cannot capture refuses
//! [`Capture::begin_capture`] with [`CaptureError::Unsupported`]. While a stream captures, nothing may
//! ask the host to wait for it (no synchronize, no event query, no allocation that
//! synchronizes): an implementation refuses such calls with [`Error::Capture`] and
//! [`CaptureError::Forbidden`], and a capture that saw one ends with
//! [`CaptureError::Invalidated`].

use crate::error::{CaptureError, Error, Result};

/// A stream that can record its work into a [`Graph`] (CUDA's stream capture).
///
/// Between [`Capture::begin_capture`] and [`Capture::end_capture`], work issued on the stream
/// (operations, event records) is recorded, not run. Captures do not nest, and one stream
/// captures from one thread at a time.
pub trait Capture: crate::traits::stream::Stream {
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

/// A recorded graph of work, replayed on a stream as many times as wanted. Dropping it frees
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
    unsafe fn replay(&self, stream: &Self::Stream) -> Result<()>;
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

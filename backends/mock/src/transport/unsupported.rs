//! Where the transport does not exist (it needs Linux: abstract Unix sockets, memfd), the mock
//! stays in one process: no link is ever made, and an id that spans processes meets the error
//! said here.

use oxccl_core::Error;

/// The error a process-spanning id meets here.
pub(crate) fn refused_join() -> Error {
    Error::invalid(
        "backend",
        format_args!("an in-process mock: the mock across processes needs Linux (abstract Unix sockets, memfd)"),
    )
}

/// The connection to a host, absent: no link is ever made.
pub(crate) mod link {
    /// Never constructed here.
    pub(crate) struct Link(());

    impl Link {
        /// Never called (no link exists).
        pub(crate) fn tell_dead(&self, _: &str) {}
    }
}

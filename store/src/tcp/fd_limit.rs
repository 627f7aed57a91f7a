//! What the system bounds a server's clients by: the process's file-descriptor limit (each
//! connection is one descriptor) and the listening socket's queue of connections not yet
//! accepted. The soft limit is raised to the hard one (once per process,
//! where the system allows it), since a store server of a large job needs more than the
//! usual 1,024.

use std::sync::OnceLock;

/// The listen queue asked for: the most `net.core.somaxconn` can be set to.
#[cfg(unix)]
const LISTEN_QUEUE: libc::c_int = 65535;

/// Descriptors left to the rest of the process (its files, libraries, other sockets) when the
/// connection limit is derived from the descriptor limit.
pub(super) const RESERVE: usize = 256;

/// The process's soft limit on open descriptors, after raising it to the hard limit where
/// allowed (on the first call only; a server does so when it starts); `None` where it cannot
/// be read. A process that opens many clients itself calls it for the same room.
pub fn descriptor_limit() -> Option<usize> {
    static RAISED: OnceLock<Option<usize>> = OnceLock::new();
    *RAISED.get_or_init(raise)
}

/// The descriptor limit, for messages.
pub(super) fn limit_text() -> String {
    descriptor_limit().map_or_else(|| "unknown".into(), |n| n.to_string())
}

#[cfg(unix)]
fn raise() -> Option<usize> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit read by setrlimit only; failure leaves the
        // limit as it was.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    Some(usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX))
}

#[cfg(not(unix))]
fn raise() -> Option<usize> {
    None
}

/// Lets the listening socket queue as many unaccepted connections as the system allows (the
/// kernel caps the length asked for at `net.core.somaxconn`, 4,096 by default) instead of
/// std's 128: when a whole job connects at once, a full queue drops attempts and each dropped
/// client waits for its kernel's retry, a second or more. A host that serves the store of a
/// large job raises `net.core.somaxconn`; the server then gets the longer queue.
#[cfg(unix)]
pub(super) fn deepen_backlog(listener: &std::net::TcpListener) {
    use std::os::fd::AsRawFd;
    // SAFETY: listen only reads the descriptor number, which `listener` keeps open for the
    // call; calling it again on a listening socket changes only its queue length.
    if unsafe { libc::listen(listener.as_raw_fd(), LISTEN_QUEUE) } != 0 {
        log::debug!(
            "oxccl store: the listen queue stays at its default: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(unix))]
pub(super) fn deepen_backlog(_listener: &std::net::TcpListener) {}

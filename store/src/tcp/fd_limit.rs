//! The process's file-descriptor limit, which bounds how many clients a server can hold: each
//! connection is one descriptor. The soft limit is raised to the hard one (once per process,
//! where the system allows it), since a store server of a large job needs more than the
//! usual 1,024.

use std::sync::OnceLock;

/// Descriptors left to the rest of the process (its files, libraries, other sockets) when the
/// connection limit is derived from the descriptor limit.
pub(super) const RESERVE: usize = 256;

/// The soft limit on open descriptors after raising it to the hard limit where allowed;
/// `None` where it cannot be read. Raised on the first call only.
pub(super) fn soft_limit() -> Option<usize> {
    static RAISED: OnceLock<Option<usize>> = OnceLock::new();
    *RAISED.get_or_init(raise)
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

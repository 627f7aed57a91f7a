//! NCCL groups: per thread and per loaded library (each library keeps its own group depth in
//! its own thread-local), spanning every communicator of that library. The depth is tracked
//! here with the core's [`GroupState`], so an end without a start is refused before NCCL is
//! called and the depth always equals the `ncclGroupEnd` calls NCCL is still owed.

use oxccl_core::{text, Ended, Error, GroupKind, GroupState, Progress, Result, ResultCode};
use oxccl_loader::{Library, RawComm};
use std::cell::RefCell;

/// The open groups of this thread: one depth per library with a group open (a library whose
/// depth falls back to 0 is forgotten, so the list holds only open groups).
type Depths = Vec<(usize, GroupState<0>)>;

thread_local! {
    static DEPTHS: RefCell<Depths> = const { RefCell::new(Vec::new()) };
}

fn tls_gone() -> Error {
    Error::Backend {
        code: ResultCode::INTERNAL_ERROR,
        text: text!("internal error"),
        last: text!("thread-local group state is gone (thread exiting)"),
    }
}

/// Runs `f` on this thread's group state for `lib` (created closed when absent, dropped again
/// once closed).
fn with_depth<T>(
    lib: &Library,
    f: impl FnOnce(&mut GroupState<0>) -> std::result::Result<T, Error>,
) -> Result<T> {
    let key = lib as *const Library as usize;
    DEPTHS
        .try_with(|d| {
            let mut d = d.try_borrow_mut().map_err(|_| tls_gone())?;
            let i = match d.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    d.push((key, GroupState::new()));
                    d.len() - 1
                }
            };
            let out = d.get_mut(i).map(|(_, g)| f(g)).ok_or_else(tls_gone)?;
            if d.get(i).is_some_and(|(_, g)| !g.is_open()) {
                d.swap_remove(i);
            }
            out
        })
        .map_err(|_| tls_gone())?
}

/// Whether this thread has a group open on `lib` (a thread whose group state is gone, while
/// it exits, counts as having none).
pub(crate) fn is_open(lib: &Library) -> bool {
    let key = lib as *const Library as usize;
    DEPTHS
        .try_with(|d| {
            d.try_borrow()
                .is_ok_and(|d| d.iter().any(|(k, g)| *k == key && g.is_open()))
        })
        .unwrap_or(false)
}

/// `ncclGroupStart` on `lib`, counted.
pub(crate) fn start(lib: &Library) -> Result<()> {
    // A library without it is refused before the count moves.
    if lib.api().group_start.is_none() {
        return Err(crate::absent::base_symbol("ncclGroupStart"));
    }
    with_depth(lib, |g| g.start(GroupKind::Group).map_err(Error::from))?;
    let r = crate::ffi::group_start(lib.api()).and_then(|code| lib.check(code, RawComm::NULL));
    if r.is_err() {
        // NCCL did not open it: take the count back.
        let _ = with_depth(lib, |g| g.end(GroupKind::Group).map_err(Error::from));
    }
    r
}

/// `ncclGroupEnd` on `lib`; an end without a start is refused before NCCL is called.
pub(crate) fn end(lib: &Library) -> Result<Progress> {
    if lib.api().group_end.is_none() {
        return Err(crate::absent::base_symbol("ncclGroupEnd"));
    }
    let _: Ended = with_depth(lib, |g| g.end(GroupKind::Group).map_err(Error::from))?;
    let code = crate::ffi::group_end(lib.api())?;
    lib.progress(code, RawComm::NULL)
}

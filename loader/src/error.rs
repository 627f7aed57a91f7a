//! Why a library could not be loaded.
//!
//! `LoadError` is separate from [`oxccl_core::Error`] on purpose: loading happens once, on std,
//! and its errors carry paths and `dlerror` texts of any length (`PathBuf`, `String`, a list of
//! every place tried), while the core's error is `no_std`, heap-free and bounded, made for the
//! hot path. There is no `From<LoadError> for oxccl_core::Error`: squeezing a load failure into
//! a 192-byte `Text` would lose exactly the details a user needs to fix their installation.
//!
//! The fields keep paths and texts as they are; `Display` shows them escaped (control
//! characters as `\e`, `\x7f`, …; see [`oxccl_core::text`](mod@oxccl_core::text)), bytes that
//! are not UTF-8 as `\xNN` ([`crate::text::os_text`]).

use crate::elf::ElfError;
use crate::file::{FileKind, NotRegular};
use crate::text::os_text;
use oxccl_core::text::{write_escaped, Escaped};
use oxccl_core::Version;
use std::fmt;
use std::path::{Path, PathBuf};

/// One place the discovery looked at, and why nothing usable was there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tried {
    /// The place: a path, a library name given to the system search, or an environment
    /// variable.
    pub place: String,
    /// Why it did not give a usable NCCL.
    pub reason: String,
}

impl fmt::Display for Tried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", Escaped(&self.place), Escaped(&self.reason))
    }
}

/// A library that could not be loaded, each kind naming the path. `Debug` is the same message
/// followed by how to get a usable NCCL, so `main` returning the error prints both.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No file at the path (or the system search found no library of that name).
    #[error("{}: no such file", shown(.path))]
    Missing {
        /// The path or library name.
        path: PathBuf,
    },
    /// Something other than a regular file at the path (a FIFO, a socket, a device, a
    /// directory), or at the file the system search would take for a name: refused before
    /// anything opens it, since opening a FIFO waits for a writer, in `dlopen` too.
    #[error("{}: {}", shown(.path), NotRegular(*.kind))]
    NotAFile {
        /// The path (for a name found through `LD_LIBRARY_PATH`, the file there).
        path: PathBuf,
        /// What it is.
        kind: FileKind,
    },
    /// The file exists but the dynamic loader refused it: not an ELF shared object, the wrong
    /// architecture, a dependency missing.
    #[error("{}: not a loadable shared library: {}", shown(.path), Escaped(.reason))]
    NotLoadable {
        /// The path or library name.
        path: PathBuf,
        /// The dynamic loader's message (`dlerror`), its bytes that are not UTF-8 as `\xNN`
        /// ([`crate::text::os_text`]).
        reason: String,
    },
    /// The file failed the check of its ELF header and segments made before `dlopen`
    /// ([`crate::elf`]): cut short, corrupt, or not a 64-bit shared object for this machine.
    /// Refused here because `dlopen` of a cut file dies of `SIGBUS` instead of failing.
    #[error("{}: not a loadable shared library: {problem}", shown(.path))]
    BadElf {
        /// The file checked (for a name found through `LD_LIBRARY_PATH`, the file there).
        path: PathBuf,
        /// What is wrong with it.
        problem: ElfError,
    },
    /// A shared library, but not NCCL: it exports no `ncclGetVersion`.
    #[error("{}: a shared library but not NCCL (no ncclGetVersion symbol)", shown(.path))]
    NotNccl {
        /// The path of the library.
        path: PathBuf,
    },
    /// `ncclGetVersion` failed or returned a code no release has.
    #[error("{}: ncclGetVersion returned result {result} and version code {code}", shown(.path))]
    BadVersion {
        /// The path of the library.
        path: PathBuf,
        /// The `ncclResult_t` of the call.
        result: i32,
        /// The version code it wrote.
        code: i32,
    },
    /// NCCL, but older than oxccl supports.
    #[error("{}: NCCL {found} is too old; oxccl needs NCCL {minimum} or newer", shown(.path))]
    TooOld {
        /// The path of the library.
        path: PathBuf,
        /// The version it reported.
        found: Version,
        /// [`Version::MIN_SUPPORTED`].
        minimum: Version,
    },
    /// The discovery found no usable library anywhere.
    #[error("no usable NCCL library found; tried:{}", ListTried(.tried))]
    NothingFound {
        /// Every place looked at, in order, with the reason it failed.
        tried: Vec<Tried>,
    },
}

/// A path as messages show it: [`os_text`] (bytes that are not UTF-8 as `\xNN`) with control
/// characters escaped (see [`oxccl_core::text`](mod@oxccl_core::text)), so a path never writes
/// them to a terminal.
fn shown(path: &Path) -> Shown<'_> {
    Shown(path)
}

struct Shown<'a>(&'a Path);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, &os_text(self.0.as_os_str()))
    }
}

struct ListTried<'a>(&'a [Tried]);

impl fmt::Display for ListTried<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in self.0 {
            write!(f, "\n  - {t}")?;
        }
        Ok(())
    }
}

/// The message, then how to get a usable library (what `main` returning the error, `unwrap`
/// and `{:?}` print).
impl fmt::Debug for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)?;
        write!(f, "\n  to fix: {}", oxccl_core::error::GET_NCCL)
    }
}

impl LoadError {
    /// The path the error is about; `None` for [`LoadError::NothingFound`].
    pub fn path(&self) -> Option<&Path> {
        match self {
            LoadError::Missing { path }
            | LoadError::NotAFile { path, .. }
            | LoadError::NotLoadable { path, .. }
            | LoadError::BadElf { path, .. }
            | LoadError::NotNccl { path }
            | LoadError::BadVersion { path, .. }
            | LoadError::TooOld { path, .. } => Some(path),
            LoadError::NothingFound { .. } => None,
        }
    }

    /// Why this place failed, without the path (for a [`Tried`] entry).
    pub(crate) fn reason(&self) -> String {
        match self {
            LoadError::Missing { .. } => "no such file".to_owned(),
            LoadError::NotAFile { path, kind } => {
                format!(
                    "not loadable: {}: {}",
                    os_text(path.as_os_str()),
                    NotRegular(*kind)
                )
            }
            LoadError::NotLoadable { reason, .. } => format!("not loadable: {reason}"),
            LoadError::BadElf { path, problem } => {
                format!("not loadable: {}: {problem}", os_text(path.as_os_str()))
            }
            LoadError::NotNccl { .. } => "not NCCL (no ncclGetVersion)".to_owned(),
            LoadError::BadVersion { result, code, .. } => {
                format!("ncclGetVersion returned result {result}, version code {code}")
            }
            LoadError::TooOld { found, minimum, .. } => {
                format!("NCCL {found} is older than the minimum {minimum}")
            }
            LoadError::NothingFound { tried } => format!("{} places tried", tried.len()),
        }
    }
}

//! oxccl-loader: finds libnccl at run time, resolves every function once, and describes the
//! release it loaded: its version, each feature available or why not, and the `ncclConfig_t`
//! that release understands.
//!
//! ```no_run
//! let lib = std::sync::Arc::new(oxccl_loader::Library::load()?);
//! println!("NCCL {} from {}", lib.version(), lib.path().display());
//! # Ok::<(), oxccl_loader::LoadError>(())
//! ```
//!
//! Nothing here needs a GPU: loading, version gating, error texts and the failing init path
//! work on any Linux machine with the library file.

pub mod api;
mod codes;
pub mod coll_config;
pub mod config;
pub mod elf;
pub mod error;
pub mod file;
pub mod find;
mod library;
pub mod raw;
pub mod text;

pub use api::Api;
pub use config::{ConfigBuf, RawConfig};
pub use elf::ElfError;
pub use error::{LoadError, Tried};
pub use file::FileKind;
pub use find::{Place, ENV_LIBRARY};
pub use library::Library;
pub use raw::{RawComm, RawStream, RawWindow};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

//! A loaded libnccl: the handle, its function table, its version and what it can do.

use crate::api::Api;
use crate::elf;
use crate::error::{LoadError, Tried};
use crate::file::{self, FileKind};
use crate::find::{self, Place, ENV_LIBRARY};
use crate::text::os_text;
use core::ffi::{c_char, c_int, c_void};
use oxccl_core::{FeatureSet, Version};
use std::ffi::{CStr, CString, OsStr};
use std::mem::ManuallyDrop;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One NCCL library, loaded and described. Cheap to share: backends hold an `Arc<Library>`.
///
/// Every function pointer of [`Library::api`] stays valid as long as this value lives (and in
/// fact for the rest of the process: see `_handle`).
pub struct Library {
    api: Api,
    version: Version,
    features: FeatureSet,
    path: PathBuf,
    load_time: Duration,
    // Never closed: NCCL starts threads (proxy, watchdog of its own) and registers exit
    // handlers that would run in unmapped code after a dlclose. One NCCL stays mapped for the
    // life of the process, as when it is linked.
    _handle: ManuallyDrop<libloading::Library>,
}

// `Library` must cross threads (a watchdog thread aborts communicators of the same library).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Library>();
};

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("load_time", &self.load_time)
            .field("api", &self.api)
            .finish()
    }
}

impl Library {
    /// Loads the library at `path`. A bare name without `/` (e.g. `"libnccl.so.2"`) goes
    /// through the system search, as `dlopen` does.
    pub fn open(path: impl AsRef<Path>) -> Result<Library, LoadError> {
        let path = path.as_ref();
        if path.as_os_str().as_bytes().contains(&b'/') {
            Self::open_place(&Place::Path(path.to_path_buf()))
        } else {
            Self::open_name(path)
        }
    }

    /// Finds and loads NCCL: `OXCCL_NCCL_LIBRARY` when set (that library or its error, never
    /// a silent fallback to another NCCL), else the first usable of [`find::places`]. When none
    /// is usable, [`LoadError::NothingFound`] lists every place and why it failed.
    pub fn load() -> Result<Library, LoadError> {
        Self::load_from(None)
    }

    /// [`Library::load`] with an explicit path first: when `explicit` is given, only it is
    /// tried (the caller chose it, so its error is the answer).
    pub fn load_from(explicit: Option<&Path>) -> Result<Library, LoadError> {
        if let Some(p) = explicit {
            return Self::open(p);
        }
        let mut tried = Vec::new();
        match std::env::var_os(ENV_LIBRARY).filter(|v| !v.is_empty()) {
            Some(p) => return Self::open(Path::new(&p)),
            None => tried.push(Tried {
                place: ENV_LIBRARY.to_owned(),
                reason: "not set".to_owned(),
            }),
        }
        for place in find::places() {
            match Self::open_place(&place) {
                Ok(lib) => return Ok(lib),
                Err(e) => tried.push(Tried {
                    place: place.describe(),
                    reason: e.reason(),
                }),
            }
        }
        Err(LoadError::NothingFound { tried })
    }

    fn open_name(name: &Path) -> Result<Library, LoadError> {
        match name
            .to_str()
            .and_then(|n| find::SYSTEM_NAMES.iter().find(|s| **s == n))
        {
            Some(n) => Self::open_place(&Place::Name(n)),
            None => {
                check_by_name(name)?;
                Self::dlopen(name, true)
            }
        }
    }

    fn open_place(place: &Place) -> Result<Library, LoadError> {
        match place {
            Place::Name(n) => {
                check_by_name(Path::new(n))?;
                Self::dlopen(Path::new(n), true)
            }
            Place::Path(p) => {
                // Classified before anything opens it: a FIFO would block the ELF check's open
                // and dlopen's alike.
                match file::kind(p) {
                    Err(_) => return Err(LoadError::Missing { path: p.clone() }),
                    Ok(FileKind::Regular) => {}
                    Ok(kind) => {
                        return Err(LoadError::NotAFile {
                            path: p.clone(),
                            kind,
                        })
                    }
                }
                // Before dlopen: a file cut short kills the process inside it (SIGBUS).
                elf::check_file(p).map_err(|problem| refused(p.clone(), problem))?;
                Self::dlopen(p, false)
            }
        }
    }

    fn dlopen(path: &Path, by_name: bool) -> Result<Library, LoadError> {
        let start = Instant::now();
        // RTLD_NOW: a library with unresolvable symbols fails here, not at its first call.
        // RTLD_LOCAL: two NCCLs loaded side by side (tests) do not interpose on each other.
        let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL;
        // dlopen and dlerror called here rather than through libloading, whose error text
        // replaces the bytes of a path that are not UTF-8: dlerror's bytes go through os_text.
        let Ok(name) = CString::new(path.as_os_str().as_bytes()) else {
            return Err(LoadError::NotLoadable {
                path: path.to_path_buf(),
                reason: "the path holds a NUL byte, which no file name can".to_owned(),
            });
        };
        // SAFETY: loading runs the library's initialisers. NCCL's (and libc's, for the "not
        // NCCL" case) are benign; loading arbitrary code is the documented purpose here.
        // `name` is a NUL-terminated string that outlives the call.
        let raw = unsafe { dlopen(name.as_ptr(), flags) };
        if raw.is_null() {
            // SAFETY: dlerror returns null or a NUL-terminated string that stays valid until
            // the next dl* call of this thread; it is copied out at once.
            let reason = unsafe {
                let e = dlerror();
                if e.is_null() {
                    "dlopen failed".to_owned()
                } else {
                    os_text(OsStr::from_bytes(CStr::from_ptr(e).to_bytes())).into_owned()
                }
            };
            let missing = by_name && reason.contains("No such file");
            return Err(if missing {
                LoadError::Missing {
                    path: path.to_path_buf(),
                }
            } else {
                LoadError::NotLoadable {
                    path: path.to_path_buf(),
                    reason,
                }
            });
        }
        // SAFETY: `raw` is the non-null handle of a successful dlopen.
        let handle: libloading::Library =
            unsafe { libloading::os::unix::Library::from_raw(raw) }.into();
        let api = Api::resolve(&handle);
        let Some(get_version) = api.get_version else {
            return Err(LoadError::NotNccl {
                path: path.to_path_buf(),
            });
        };
        let real_path = loaded_path(get_version as *const c_void).unwrap_or_else(|| path.into());
        let mut code: c_int = 0;
        // SAFETY: ncclGetVersion(int*) writes one int through a valid pointer.
        let result = unsafe { get_version(&mut code) };
        let version = match Version::from_code(code) {
            Some(v) if result == 0 => v,
            _ => {
                return Err(LoadError::BadVersion {
                    path: real_path,
                    result,
                    code,
                })
            }
        };
        if version < Version::MIN_SUPPORTED {
            return Err(LoadError::TooOld {
                path: real_path,
                found: version,
                minimum: Version::MIN_SUPPORTED,
            });
        }
        let features = FeatureSet::resolve(version, |sym| api.has(sym));
        Ok(Library {
            api,
            version,
            features,
            path: real_path,
            load_time: start.elapsed(),
            _handle: ManuallyDrop::new(handle),
        })
    }

    /// The function table.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The release, from `ncclGetVersion`.
    pub fn version(&self) -> Version {
        self.version
    }

    /// What the release can do, with the reason for each missing feature.
    pub fn features(&self) -> &FeatureSet {
        &self.features
    }

    /// The file loaded (resolved by the dynamic loader when it was found by name).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How long `dlopen`, resolving every symbol and reading the version took.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }
}

/// Checks the file the dynamic loader's search would take for the bare `name`, as far as
/// [`find::library_path_candidates`] can tell: the first file in `LD_LIBRARY_PATH` order,
/// passing over those glibc's search passes over too (another class or machine) and those
/// that cannot be read (nothing to map), so that a cut file there is refused instead of
/// mapped. A name found elsewhere (RUNPATH, the ld cache) is left to `dlopen` unchecked.
///
/// Anything but a regular file there is refused too (by [`elf::check_file`], which classifies
/// it before opening it): the search would open it, and block on a FIFO.
fn check_by_name(name: &Path) -> Result<(), LoadError> {
    for candidate in find::library_path_candidates(name.as_os_str()) {
        match elf::check_file(&candidate) {
            Ok(()) => return Ok(()),
            Err(problem) if problem.skipped_by_search() => continue,
            // What cannot be read cannot be mapped either: dlopen answers for it.
            Err(elf::ElfError::Unreadable { .. }) => continue,
            Err(problem) => return Err(refused(candidate, problem)),
        }
    }
    Ok(())
}

/// The load error of a file [`elf::check_file`] refused: [`LoadError::NotAFile`] for what is
/// not a regular file, [`LoadError::BadElf`] for the rest.
fn refused(path: PathBuf, problem: elf::ElfError) -> LoadError {
    match problem {
        elf::ElfError::NotAFile { kind } => LoadError::NotAFile { path, kind },
        problem => LoadError::BadElf { path, problem },
    }
}

#[repr(C)]
struct DlInfo {
    dli_fname: *const c_char,
    dli_fbase: *mut c_void,
    dli_sname: *const c_char,
    dli_saddr: *mut c_void,
}

extern "C" {
    // glibc and musl export these; libloading links libdl where they live apart from libc.
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

/// The file that holds `addr`, as the dynamic loader mapped it.
fn loaded_path(addr: *const c_void) -> Option<PathBuf> {
    let mut info = DlInfo {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads `addr` as a number and fills `info`, a valid out-pointer.
    let found = unsafe { dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader, valid while the
    // object stays loaded (it is: we hold its handle); copied out at once.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    if name.contains(&b'/') {
        Some(PathBuf::from(OsStr::from_bytes(name)))
    } else {
        None
    }
}

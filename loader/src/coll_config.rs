//! The `ncclCollConfig_t` a per-call configuration ([`CollConfig`]) becomes for the loaded
//! release: unset fields `NCCL_CONFIG_UNDEF_INT` / null, `size` covering the fields that
//! release knows (2.31 ends before `launchCompletionEvent`), the selection string owned here.

use crate::raw::{RawCollConfig, API_MAGIC, CONFIG_UNDEF_INT};
use oxccl_core::coll_config::CollConfig;
use oxccl_core::{Error, Result, Version};
use std::ffi::{c_int, CString};
use std::mem::offset_of;

/// A `ncclCollConfig_t` and the string it points to.
pub struct CollConfigBuf {
    raw: RawCollConfig,
    _algorithms: Option<CString>,
}

// SAFETY: the only pointer in `raw` points into the CString this value owns and never
// mutates (the event and the extension list stay null).
unsafe impl Send for CollConfigBuf {}
// SAFETY: as above; `&CollConfigBuf` gives read-only access.
unsafe impl Sync for CollConfigBuf {}

/// The bytes of `ncclCollConfig_t` a release of `version` knows.
pub fn coll_config_size(version: Version) -> usize {
    if version < Version::new(2, 32, 0) {
        offset_of!(RawCollConfig, launch_completion_event)
    } else {
        std::mem::size_of::<RawCollConfig>()
    }
}

impl CollConfigBuf {
    /// `cfg` (checked) for a library of `version`.
    pub fn new(cfg: &CollConfig, version: Version) -> Result<CollConfigBuf> {
        cfg.check()?;
        let code = crate::config::version_code(version)?;
        let int = |v: Option<u32>| v.map_or(CONFIG_UNDEF_INT, |v| v as c_int);
        let algorithms = match &cfg.algorithms {
            None => None,
            Some(a) => Some(CString::new(a.as_str()).map_err(|_| {
                Error::invalid("algorithms", format_args!("a selection without NUL bytes"))
            })?),
        };
        let raw = RawCollConfig {
            size: coll_config_size(version),
            magic: API_MAGIC,
            version: code,
            ext: std::ptr::null_mut(),
            // Checked to fit an int.
            min_ctas: int(cfg.min_ctas),
            max_ctas: int(cfg.max_ctas),
            nvls_ctas: int(cfg.nvls_ctas),
            cga_cluster_size: int(cfg.cga_cluster_size),
            alg_selection: algorithms.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            force_alg_selection: c_int::from(cfg.force_algorithms),
            cta_policy: int(cfg.cta_policy),
            user_profiler_tag: cfg.profiler_tag,
            launch_completion_event: std::ptr::null_mut(),
        };
        Ok(CollConfigBuf {
            raw,
            _algorithms: algorithms,
        })
    }

    /// The struct, valid while `self` lives.
    pub fn as_ptr(&self) -> *const RawCollConfig {
        &self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_follow_the_release_and_unset_fields_stay_undefined() {
        // The 2.32 struct: 8 + 4 + 4 + 8 + 4 * 4 + 8 + 4 + 4 + 8 + 8 bytes.
        assert_eq!(coll_config_size(Version::new(2, 32, 3)), 72);
        assert_eq!(coll_config_size(Version::new(2, 31, 2)), 64);
        let b = CollConfigBuf::new(
            &CollConfig {
                max_ctas: Some(4),
                ..CollConfig::default()
            }
            .algorithms("ring"),
            Version::new(2, 32, 3),
        )
        .unwrap();
        // SAFETY: `b` lives for the reads.
        let raw = unsafe { &*b.as_ptr() };
        assert_eq!((raw.size, raw.magic, raw.version), (72, API_MAGIC, 23203));
        assert_eq!((raw.min_ctas, raw.max_ctas), (CONFIG_UNDEF_INT, 4));
        assert_eq!(raw.force_alg_selection, 1);
        // SAFETY: the selection is a live NUL-terminated string owned by `b`.
        let sel = unsafe { std::ffi::CStr::from_ptr(raw.alg_selection) };
        assert_eq!(sel.to_str().unwrap(), "ring");
        assert!(CollConfigBuf::new(
            &CollConfig {
                min_ctas: Some(0),
                ..CollConfig::default()
            },
            Version::new(2, 32, 3)
        )
        .is_err());
    }
}

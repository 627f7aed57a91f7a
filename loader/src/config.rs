//! `ncclConfig_t` built for the loaded release.
//!
//! The struct is append-only and versioned by its `size` and `version` fields: NCCL copies
//! `min(size, sizeof(its own struct))` bytes and ignores groups of fields newer than `version`.
//! So oxccl always lays out the newest struct, but tells each library exactly the prefix that
//! library knows, and refuses (rather than silently drops) a field the user set that the loaded
//! release does not have.

use crate::raw::{API_MAGIC, CONFIG_UNDEF_INT};
use core::ffi::{c_char, c_int, c_uint};
use core::mem::{align_of, offset_of, size_of};
use oxccl_core::{CommConfig, ConfigField, Error, Result, Version};
use std::ffi::CString;

/// `ncclConfig_t` in its newest layout (2.32.3's `ncclConfig_v23100`, 120 bytes on 64-bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)] // Each field is the C field of the same name; see `ConfigField`.
pub struct RawConfig {
    /// Bytes of the struct the library may read.
    pub size: usize,
    /// `NCCL_API_MAGIC`.
    pub magic: c_uint,
    /// The `NCCL_VERSION_CODE` the struct describes.
    pub version: c_uint,
    pub blocking: c_int,
    pub cga_cluster_size: c_int,
    pub min_ctas: c_int,
    pub max_ctas: c_int,
    pub net_name: *const c_char,
    pub split_share: c_int,
    pub traffic_class: c_int,
    pub comm_name: *const c_char,
    pub collnet_enable: c_int,
    pub cta_policy: c_int,
    pub shrink_share: c_int,
    pub nvls_ctas: c_int,
    pub n_channels_per_net_peer: c_int,
    pub nvlink_centric_sched: c_int,
    pub graph_usage_mode: c_int,
    pub num_rma_ctx: c_int,
    pub max_p2p_peers: c_int,
    pub graph_stream_ordering: c_int,
    pub launch_order_implicit: c_int,
    pub num_rma_sig: c_int,
    pub rma_eager_init: c_int,
    pub host_cft_mode: c_int,
    pub nvls_host_mode: c_int,
}

impl RawConfig {
    /// `NCCL_CONFIG_INITIALIZER` of the newest header: every field unset, `size` the whole
    /// struct.
    pub const fn undefined() -> RawConfig {
        let u = CONFIG_UNDEF_INT;
        RawConfig {
            size: size_of::<RawConfig>(),
            magic: API_MAGIC,
            version: 0,
            blocking: u,
            cga_cluster_size: u,
            min_ctas: u,
            max_ctas: u,
            net_name: core::ptr::null(),
            split_share: u,
            traffic_class: u,
            comm_name: core::ptr::null(),
            collnet_enable: u,
            cta_policy: u,
            shrink_share: u,
            nvls_ctas: u,
            n_channels_per_net_peer: u,
            nvlink_centric_sched: u,
            graph_usage_mode: u,
            num_rma_ctx: u,
            max_p2p_peers: u,
            graph_stream_ordering: u,
            launch_order_implicit: u,
            num_rma_sig: u,
            rma_eager_init: u,
            host_cft_mode: u,
            nvls_host_mode: u,
        }
    }

    /// The byte offset of `field` in the struct (the same in every release that has it,
    /// because the struct only grows at its end).
    pub const fn offset_of(field: ConfigField) -> usize {
        match field {
            ConfigField::Blocking => offset_of!(RawConfig, blocking),
            ConfigField::CgaClusterSize => offset_of!(RawConfig, cga_cluster_size),
            ConfigField::MinCtas => offset_of!(RawConfig, min_ctas),
            ConfigField::MaxCtas => offset_of!(RawConfig, max_ctas),
            ConfigField::NetName => offset_of!(RawConfig, net_name),
            ConfigField::SplitShare => offset_of!(RawConfig, split_share),
            ConfigField::TrafficClass => offset_of!(RawConfig, traffic_class),
            ConfigField::CommName => offset_of!(RawConfig, comm_name),
            ConfigField::CollnetEnable => offset_of!(RawConfig, collnet_enable),
            ConfigField::CtaPolicy => offset_of!(RawConfig, cta_policy),
            ConfigField::ShrinkShare => offset_of!(RawConfig, shrink_share),
            ConfigField::NvlsCtas => offset_of!(RawConfig, nvls_ctas),
            ConfigField::NChannelsPerNetPeer => offset_of!(RawConfig, n_channels_per_net_peer),
            ConfigField::NvlinkCentricSched => offset_of!(RawConfig, nvlink_centric_sched),
            ConfigField::GraphUsageMode => offset_of!(RawConfig, graph_usage_mode),
            ConfigField::NumRmaCtx => offset_of!(RawConfig, num_rma_ctx),
            ConfigField::MaxP2pPeers => offset_of!(RawConfig, max_p2p_peers),
            ConfigField::GraphStreamOrdering => offset_of!(RawConfig, graph_stream_ordering),
            ConfigField::LaunchOrderImplicit => offset_of!(RawConfig, launch_order_implicit),
            ConfigField::NumRmaSig => offset_of!(RawConfig, num_rma_sig),
            ConfigField::RmaEagerInit => offset_of!(RawConfig, rma_eager_init),
            ConfigField::HostCftMode => offset_of!(RawConfig, host_cft_mode),
            ConfigField::NvlsHostMode => offset_of!(RawConfig, nvls_host_mode),
        }
    }

    /// The fields `version`'s `ncclConfig_t` has, in order.
    pub fn fields_for(version: Version) -> impl Iterator<Item = ConfigField> {
        ConfigField::ALL
            .into_iter()
            .take_while(move |f| f.since() <= version)
    }

    /// `sizeof(ncclConfig_t)` in `version`'s header: the prefix of the fields that release
    /// knows, rounded up to the struct's alignment as a C compiler lays it out (so the padding
    /// NCCL copies is the unset start of the next field, never past our struct).
    pub fn size_for(version: Version) -> usize {
        match ConfigField::ALL.into_iter().find(|f| f.since() > version) {
            None => size_of::<RawConfig>(),
            Some(first_unknown) => {
                let end = Self::offset_of(first_unknown);
                end.next_multiple_of(align_of::<RawConfig>())
            }
        }
    }

    fn int_slot(&mut self, field: ConfigField) -> Option<&mut c_int> {
        Some(match field {
            ConfigField::Blocking => &mut self.blocking,
            ConfigField::CgaClusterSize => &mut self.cga_cluster_size,
            ConfigField::MinCtas => &mut self.min_ctas,
            ConfigField::MaxCtas => &mut self.max_ctas,
            ConfigField::SplitShare => &mut self.split_share,
            ConfigField::TrafficClass => &mut self.traffic_class,
            ConfigField::CollnetEnable => &mut self.collnet_enable,
            ConfigField::CtaPolicy => &mut self.cta_policy,
            ConfigField::ShrinkShare => &mut self.shrink_share,
            ConfigField::NvlsCtas => &mut self.nvls_ctas,
            ConfigField::NChannelsPerNetPeer => &mut self.n_channels_per_net_peer,
            ConfigField::NvlinkCentricSched => &mut self.nvlink_centric_sched,
            ConfigField::GraphUsageMode => &mut self.graph_usage_mode,
            ConfigField::NumRmaCtx => &mut self.num_rma_ctx,
            ConfigField::MaxP2pPeers => &mut self.max_p2p_peers,
            ConfigField::GraphStreamOrdering => &mut self.graph_stream_ordering,
            ConfigField::LaunchOrderImplicit => &mut self.launch_order_implicit,
            ConfigField::NumRmaSig => &mut self.num_rma_sig,
            ConfigField::RmaEagerInit => &mut self.rma_eager_init,
            ConfigField::HostCftMode => &mut self.host_cft_mode,
            ConfigField::NvlsHostMode => &mut self.nvls_host_mode,
            ConfigField::NetName | ConfigField::CommName => return None,
        })
    }
}

impl Default for RawConfig {
    fn default() -> RawConfig {
        RawConfig::undefined()
    }
}

/// An `ncclConfig_t` for one loaded release, with the strings it points to.
///
/// Pass [`ConfigBuf::as_mut_ptr`] to `ncclCommInitRankConfig`, `ncclCommSplit`, … and keep the
/// buffer alive until the call returns.
#[derive(Debug)]
pub struct ConfigBuf {
    raw: RawConfig,
    // Owned here so `raw.net_name` / `raw.comm_name` stay valid wherever the buffer moves
    // (a CString's bytes live on the heap).
    _net_name: Option<CString>,
    _comm_name: Option<CString>,
}

// SAFETY: the only pointers in `raw` point into the CStrings this value owns and never
// mutates; sending or sharing the buffer sends or shares them along with it.
unsafe impl Send for ConfigBuf {}
// SAFETY: as above; `&ConfigBuf` gives read-only access.
unsafe impl Sync for ConfigBuf {}

/// `version`'s code as the configuration structs carry it (`NCCL_VERSION_CODE`).
pub(crate) fn version_code(version: Version) -> Result<c_uint> {
    version
        .code()
        .and_then(|c| c_uint::try_from(c).ok())
        .ok_or_else(|| {
            Error::invalid(
                "version",
                format_args!("an NCCL version with a code, got {version}"),
            )
        })
}

impl ConfigBuf {
    /// The `ncclConfig_t` stating `cfg` to a library of `version`: refuses a set field that
    /// release does not know (the error names the field and the release that brought it);
    /// unset fields are `NCCL_CONFIG_UNDEF_INT` / null; `size` covers exactly the fields the
    /// release knows and `version` is its code.
    pub fn new(cfg: &CommConfig, version: Version) -> Result<ConfigBuf> {
        cfg.check_for(version)?;
        let code = version_code(version)?;
        let mut raw = RawConfig::undefined();
        raw.size = RawConfig::size_for(version);
        raw.version = code;
        for field in cfg.set_fields() {
            if let (Some(slot), Some(v)) = (raw.int_slot(field), cfg.int(field)) {
                *slot = v;
            }
        }
        let net_name = Self::c_string(cfg, ConfigField::NetName)?;
        let comm_name = Self::c_string(cfg, ConfigField::CommName)?;
        if let Some(s) = &net_name {
            raw.net_name = s.as_ptr();
        }
        if let Some(s) = &comm_name {
            raw.comm_name = s.as_ptr();
        }
        Ok(ConfigBuf {
            raw,
            _net_name: net_name,
            _comm_name: comm_name,
        })
    }

    fn c_string(cfg: &CommConfig, field: ConfigField) -> Result<Option<CString>> {
        match cfg.string(field) {
            None => Ok(None),
            // CommConfig already refuses NULs; this guards the invariant without a panic.
            Some(s) => CString::new(s).map(Some).map_err(|_| {
                Error::invalid(
                    "config",
                    format_args!("`{}` without NUL bytes", field.c_name()),
                )
            }),
        }
    }

    /// The struct as built.
    pub fn raw(&self) -> &RawConfig {
        &self.raw
    }

    /// The `size` sent to the library.
    pub fn size(&self) -> usize {
        self.raw.size
    }

    /// The pointer to pass to NCCL. It points into `self`: valid until `self` is moved or
    /// dropped, so take it right before the call.
    pub fn as_mut_ptr(&mut self) -> *mut RawConfig {
        &mut self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_layout_matches_the_2_32_3_header() {
        assert_eq!(size_of::<RawConfig>(), 120);
        assert_eq!(RawConfig::offset_of(ConfigField::NetName), 32);
        assert_eq!(RawConfig::size_for(Version::new(2, 32, 3)), 120);
    }

    #[test]
    fn sizes_per_release() {
        assert_eq!(RawConfig::size_for(Version::new(2, 13, 4)), 16);
        assert_eq!(RawConfig::size_for(Version::new(2, 14, 3)), 24);
        assert_eq!(RawConfig::size_for(Version::new(2, 17, 1)), 40);
        assert_eq!(RawConfig::size_for(Version::new(2, 18, 3)), 48);
        assert_eq!(RawConfig::size_for(Version::new(2, 26, 2)), 48);
        assert_eq!(RawConfig::size_for(Version::new(2, 27, 3)), 72);
    }

    #[test]
    fn unset_is_undef_and_set_is_sent() {
        let cfg = CommConfig::new().blocking(false).net_name("IB").unwrap();
        let mut b = ConfigBuf::new(&cfg, Version::new(2, 28, 3)).unwrap();
        let r = *b.raw();
        assert_eq!(r.magic, 0xcafe_beef);
        assert_eq!(r.version, 22803);
        assert_eq!(r.blocking, 0);
        assert_eq!(r.max_ctas, i32::MIN);
        assert!(r.comm_name.is_null());
        // SAFETY: net_name points to the CString owned by `b`, alive here.
        let name = unsafe { core::ffi::CStr::from_ptr(r.net_name) };
        assert_eq!(name.to_str(), Ok("IB"));
        assert_eq!(b.as_mut_ptr().cast_const(), b.raw() as *const RawConfig);
    }

    #[test]
    fn a_field_the_release_lacks_is_refused() {
        let cfg = CommConfig::new().comm_name("trainer").unwrap();
        let e = ConfigBuf::new(&cfg, Version::new(2, 18, 3)).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "config", .. }),
            "{e:?}"
        );
        let text = format!("{e}");
        assert!(
            text.contains("commName") && text.contains("2.27.3"),
            "{text}"
        );
        assert!(ConfigBuf::new(&CommConfig::new().blocking(true), Version::new(2, 13, 4)).is_err());
        assert!(ConfigBuf::new(&CommConfig::new(), Version::new(2, 13, 4)).is_ok());
    }
}

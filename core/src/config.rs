//! Communicator configuration as the user states it, independent of any NCCL version.
//!
//! The loader turns it into the `ncclConfig_t` of the loaded release; a field that release does
//! not know is refused there (with the version that brought it), never silently dropped.

use crate::text::Text;
use crate::version::Version;

/// Longest communicator or network name accepted (bytes, without the terminating NUL).
pub const NAME_CAPACITY: usize = 127;

/// A name sent to NCCL as a C string.
pub type ConfigName = heapless::String<NAME_CAPACITY>;

/// One user-settable field of `ncclConfig_t`, in header order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ConfigField {
    /// `blocking`: 0 makes init, split, finalize and group end return at once (InProgress).
    Blocking,
    /// `cgaClusterSize`.
    CgaClusterSize,
    /// `minCTAs`.
    MinCtas,
    /// `maxCTAs`.
    MaxCtas,
    /// `netName` (a string).
    NetName,
    /// `splitShare`: a split child shares its parent's resources.
    SplitShare,
    /// `trafficClass`.
    TrafficClass,
    /// `commName` (a string).
    CommName,
    /// `collnetEnable`.
    CollnetEnable,
    /// `CTAPolicy`.
    CtaPolicy,
    /// `shrinkShare`.
    ShrinkShare,
    /// `nvlsCTAs`.
    NvlsCtas,
    /// `nChannelsPerNetPeer`.
    NChannelsPerNetPeer,
    /// `nvlinkCentricSched`.
    NvlinkCentricSched,
    /// `graphUsageMode`.
    GraphUsageMode,
    /// `numRmaCtx`.
    NumRmaCtx,
    /// `maxP2pPeers`.
    MaxP2pPeers,
    /// `graphStreamOrdering`.
    GraphStreamOrdering,
    /// `launchOrderImplicit`.
    LaunchOrderImplicit,
    /// `numRmaSig`.
    NumRmaSig,
    /// `rmaEagerInit`.
    RmaEagerInit,
    /// `hostCftMode`.
    HostCftMode,
    /// `nvlsHostMode`.
    NvlsHostMode,
}

impl ConfigField {
    /// Every field, in the order of `ncclConfig_t`.
    pub const ALL: [ConfigField; 23] = [
        ConfigField::Blocking,
        ConfigField::CgaClusterSize,
        ConfigField::MinCtas,
        ConfigField::MaxCtas,
        ConfigField::NetName,
        ConfigField::SplitShare,
        ConfigField::TrafficClass,
        ConfigField::CommName,
        ConfigField::CollnetEnable,
        ConfigField::CtaPolicy,
        ConfigField::ShrinkShare,
        ConfigField::NvlsCtas,
        ConfigField::NChannelsPerNetPeer,
        ConfigField::NvlinkCentricSched,
        ConfigField::GraphUsageMode,
        ConfigField::NumRmaCtx,
        ConfigField::MaxP2pPeers,
        ConfigField::GraphStreamOrdering,
        ConfigField::LaunchOrderImplicit,
        ConfigField::NumRmaSig,
        ConfigField::RmaEagerInit,
        ConfigField::HostCftMode,
        ConfigField::NvlsHostMode,
    ];

    /// Number of fields.
    pub const COUNT: usize = Self::ALL.len();

    /// The C name of the field.
    pub const fn c_name(self) -> &'static str {
        match self {
            ConfigField::Blocking => "blocking",
            ConfigField::CgaClusterSize => "cgaClusterSize",
            ConfigField::MinCtas => "minCTAs",
            ConfigField::MaxCtas => "maxCTAs",
            ConfigField::NetName => "netName",
            ConfigField::SplitShare => "splitShare",
            ConfigField::TrafficClass => "trafficClass",
            ConfigField::CommName => "commName",
            ConfigField::CollnetEnable => "collnetEnable",
            ConfigField::CtaPolicy => "CTAPolicy",
            ConfigField::ShrinkShare => "shrinkShare",
            ConfigField::NvlsCtas => "nvlsCTAs",
            ConfigField::NChannelsPerNetPeer => "nChannelsPerNetPeer",
            ConfigField::NvlinkCentricSched => "nvlinkCentricSched",
            ConfigField::GraphUsageMode => "graphUsageMode",
            ConfigField::NumRmaCtx => "numRmaCtx",
            ConfigField::MaxP2pPeers => "maxP2pPeers",
            ConfigField::GraphStreamOrdering => "graphStreamOrdering",
            ConfigField::LaunchOrderImplicit => "launchOrderImplicit",
            ConfigField::NumRmaSig => "numRmaSig",
            ConfigField::RmaEagerInit => "rmaEagerInit",
            ConfigField::HostCftMode => "hostCftMode",
            ConfigField::NvlsHostMode => "nvlsHostMode",
        }
    }

    /// Whether the field is a string (`const char*`) rather than an `int`.
    pub const fn is_string(self) -> bool {
        matches!(self, ConfigField::NetName | ConfigField::CommName)
    }

    /// The first release whose `ncclConfig_t` has the field (read from each release's header).
    pub const fn since(self) -> Version {
        let (minor, patch) = match self {
            ConfigField::Blocking => (14, 3),
            ConfigField::CgaClusterSize
            | ConfigField::MinCtas
            | ConfigField::MaxCtas
            | ConfigField::NetName => (17, 1),
            ConfigField::SplitShare => (18, 1),
            // Not in 2.25.1's header; first in 2.26.2's.
            ConfigField::TrafficClass => (26, 2),
            ConfigField::CommName
            | ConfigField::CollnetEnable
            | ConfigField::CtaPolicy
            | ConfigField::ShrinkShare
            | ConfigField::NvlsCtas => (27, 3),
            ConfigField::NChannelsPerNetPeer | ConfigField::NvlinkCentricSched => (28, 3),
            ConfigField::GraphUsageMode | ConfigField::NumRmaCtx => (29, 1),
            ConfigField::MaxP2pPeers => (30, 3),
            // 2.30.3 and 2.30.4 end at maxP2pPeers; 2.30.7 adds graphStreamOrdering.
            ConfigField::GraphStreamOrdering => (30, 7),
            // First in 2.31.2's header.
            ConfigField::LaunchOrderImplicit
            | ConfigField::NumRmaSig
            | ConfigField::RmaEagerInit
            | ConfigField::HostCftMode => (31, 0),
            // Not in 2.31.2's header; first in 2.32.3's.
            ConfigField::NvlsHostMode => (32, 0),
        };
        Version::new(2, minor, patch)
    }
}

/// A communicator's configuration: every field unset (NCCL's default) unless the user sets it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommConfig {
    ints: [Option<i32>; ConfigField::COUNT],
    net_name: Option<ConfigName>,
    comm_name: Option<ConfigName>,
}

impl CommConfig {
    /// All fields unset.
    pub fn new() -> CommConfig {
        CommConfig::default()
    }

    /// Sets an integer field. String fields are refused (use [`CommConfig::net_name`] and
    /// [`CommConfig::comm_name`]).
    pub fn set(mut self, field: ConfigField, value: i32) -> crate::error::Result<CommConfig> {
        if field.is_string() {
            return Err(crate::error::Error::invalid(
                "field",
                format_args!("an integer field, {} is a string", field.c_name()),
            ));
        }
        if field == ConfigField::Blocking && !(0..=1).contains(&value) {
            return Err(crate::error::Error::invalid(
                "blocking",
                format_args!("0 or 1, got {value}"),
            ));
        }
        self.ints[field as usize] = Some(value);
        Ok(self)
    }

    /// Blocking (the default) or nonblocking communicator calls.
    pub fn blocking(mut self, blocking: bool) -> CommConfig {
        self.ints[ConfigField::Blocking as usize] = Some(i32::from(blocking));
        self
    }

    /// Sets `netName`; refused when longer than [`NAME_CAPACITY`] or holding a NUL.
    pub fn net_name(mut self, name: &str) -> crate::error::Result<CommConfig> {
        self.net_name = Some(Self::name("net_name", name)?);
        Ok(self)
    }

    /// Sets `commName`; refused when longer than [`NAME_CAPACITY`] or holding a NUL.
    pub fn comm_name(mut self, name: &str) -> crate::error::Result<CommConfig> {
        self.comm_name = Some(Self::name("comm_name", name)?);
        Ok(self)
    }

    fn name(arg: &'static str, name: &str) -> crate::error::Result<ConfigName> {
        if name.contains('\0') {
            return Err(crate::error::Error::invalid(
                arg,
                format_args!("a name without NUL bytes"),
            ));
        }
        ConfigName::try_from(name).map_err(|_| {
            crate::error::Error::invalid(
                arg,
                format_args!("at most {NAME_CAPACITY} bytes, got {}", name.len()),
            )
        })
    }

    /// The value of an integer field, if set.
    pub fn int(&self, field: ConfigField) -> Option<i32> {
        self.ints[field as usize]
    }

    /// The value of a string field, if set.
    pub fn string(&self, field: ConfigField) -> Option<&str> {
        match field {
            ConfigField::NetName => self.net_name.as_deref(),
            ConfigField::CommName => self.comm_name.as_deref(),
            _ => None,
        }
    }

    /// Whether the user set `field`.
    pub fn is_set(&self, field: ConfigField) -> bool {
        if field.is_string() {
            self.string(field).is_some()
        } else {
            self.int(field).is_some()
        }
    }

    /// Whether communicator calls return at once (blocking = 0).
    pub fn is_nonblocking(&self) -> bool {
        self.int(ConfigField::Blocking) == Some(0)
    }

    /// The fields the user set, in header order.
    pub fn set_fields(&self) -> impl Iterator<Item = ConfigField> + '_ {
        ConfigField::ALL
            .iter()
            .copied()
            .filter(move |f| self.is_set(*f))
    }

    /// `Ok` when every set field exists in `version`'s `ncclConfig_t`; else an error naming the
    /// first field that does not and the release that brought it.
    pub fn check_for(&self, version: Version) -> crate::error::Result<()> {
        match self.set_fields().find(|f| f.since() > version) {
            None => Ok(()),
            Some(f) => Err(crate::error::Error::InvalidArgument {
                arg: "config",
                expected: crate::text!(
                    "fields the loaded NCCL {version} knows: `{}` needs NCCL {}",
                    f.c_name(),
                    f.since()
                ),
            }),
        }
    }
}

/// A short description of a config for messages.
pub fn describe(cfg: &CommConfig) -> Text {
    let mut t = Text::new();
    for f in cfg.set_fields() {
        let _ = t.push_str(f.c_name());
        let _ = t.push(' ');
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_by_default() {
        let c = CommConfig::new();
        assert_eq!(c.set_fields().count(), 0);
        assert!(!c.is_nonblocking());
        assert!(c.check_for(Version::new(2, 13, 4)).is_ok());
    }

    #[test]
    fn fields_newer_than_the_library_are_refused_by_name() {
        let c = CommConfig::new()
            .blocking(false)
            .comm_name("trainer")
            .unwrap();
        assert!(c.check_for(Version::new(2, 28, 3)).is_ok());
        let e = c.check_for(Version::new(2, 18, 3)).unwrap_err();
        match e {
            crate::error::Error::InvalidArgument {
                arg: "config",
                expected,
            } => {
                assert!(expected.contains("commName"), "{expected}");
                assert!(expected.contains("2.27.3"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(CommConfig::new().set(ConfigField::Blocking, 2).is_err());
        assert!(CommConfig::new().set(ConfigField::NetName, 2).is_err());
        assert!(CommConfig::new().net_name("a\0b").is_err());
        let long = [b'a'; 200];
        assert!(CommConfig::new()
            .comm_name(core::str::from_utf8(&long).unwrap())
            .is_err());
        let c = CommConfig::new().set(ConfigField::MaxCtas, 4).unwrap();
        assert_eq!(c.int(ConfigField::MaxCtas), Some(4));
        assert!(c.is_set(ConfigField::MaxCtas));
    }
}

//! Capabilities gated by the loaded NCCL: the version that brought each, the symbols it needs,
//! and why one is missing.

use crate::version::Version;
use core::fmt;

/// A capability that some NCCL releases have and others lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Feature {
    /// `ncclAvg` reduction.
    Avg,
    /// `ncclBfloat16` element type.
    Bfloat16,
    /// Premul-sum reductions created per communicator.
    PreMulSum,
    /// `ncclGetLastError`: NCCL's text for the last failure.
    LastError,
    /// `ncclCommInitRankConfig` with `ncclConfig_t`, nonblocking communicators.
    NonBlocking,
    /// `ncclCommFinalize`: a clean, flushing end before destroy.
    Finalize,
    /// `ncclCommSplit` (color, key, NOCOLOR).
    Split,
    /// User buffer registration (`ncclCommRegister` / `ncclCommDeregister`).
    BufferRegistration,
    /// NCCL's allocator (`ncclMemAlloc` / `ncclMemFree`).
    MemAlloc,
    /// `ncclGroupSimulateEnd`.
    GroupSimulate,
    /// `ncclCommInitRankScalable`: init from several unique ids.
    ScalableInit,
    /// `ncclFloat8e4m3` / `ncclFloat8e5m2` element types: needed to reduce fp8; operations that
    /// only move data carry fp8 as `ncclUint8` without it ([`crate::check::wire_dtype`]).
    Float8,
    /// `ncclCommShrink`: a communicator without some ranks.
    Shrink,
    /// Window registration (`ncclCommWindowRegister` / `ncclCommWindowDeregister`).
    WindowRegistration,
    /// Native `ncclAlltoAll` (grouped send/recv before it).
    AllToAll,
    /// Native `ncclGather` / `ncclScatter` (grouped send/recv before them).
    GatherScatter,
    /// `ncclCommRevoke`.
    Revoke,
    /// `ncclCommGetUniqueId` / `ncclCommGrow`: adding ranks to a communicator.
    Grow,
    /// One-sided `ncclPutSignal` / `ncclSignal` / `ncclWaitSignal`.
    OneSided,
    /// `ncclCommSuspend` / `ncclCommResume`.
    SuspendResume,
    /// `ncclCommMemStats`.
    MemStats,
    /// The `ncclTimeout` (8) result code.
    TimeoutCode,
    /// Per-collective configuration entry points (`ncclAllReduceConfig`, …).
    CollConfig,
}

impl Feature {
    /// Every feature, in the order of the version that brought it.
    pub const ALL: [Feature; 23] = [
        Feature::Avg,
        Feature::Bfloat16,
        Feature::PreMulSum,
        Feature::LastError,
        Feature::NonBlocking,
        Feature::Finalize,
        Feature::Split,
        Feature::BufferRegistration,
        Feature::MemAlloc,
        Feature::GroupSimulate,
        Feature::ScalableInit,
        Feature::Float8,
        Feature::Shrink,
        Feature::WindowRegistration,
        Feature::AllToAll,
        Feature::GatherScatter,
        Feature::Revoke,
        Feature::Grow,
        Feature::OneSided,
        Feature::SuspendResume,
        Feature::MemStats,
        Feature::TimeoutCode,
        Feature::CollConfig,
    ];

    /// Number of features.
    pub const COUNT: usize = Self::ALL.len();

    /// The place of `self` in [`Feature::ALL`]: an exhaustive match, so a new variant fails to
    /// build here until it is given its place, and the assertion after this `impl` holds only
    /// when `ALL` has it there.
    const fn place_in_all(self) -> usize {
        match self {
            Feature::Avg => 0,
            Feature::Bfloat16 => 1,
            Feature::PreMulSum => 2,
            Feature::LastError => 3,
            Feature::NonBlocking => 4,
            Feature::Finalize => 5,
            Feature::Split => 6,
            Feature::BufferRegistration => 7,
            Feature::MemAlloc => 8,
            Feature::GroupSimulate => 9,
            Feature::ScalableInit => 10,
            Feature::Float8 => 11,
            Feature::Shrink => 12,
            Feature::WindowRegistration => 13,
            Feature::AllToAll => 14,
            Feature::GatherScatter => 15,
            Feature::Revoke => 16,
            Feature::Grow => 17,
            Feature::OneSided => 18,
            Feature::SuspendResume => 19,
            Feature::MemStats => 20,
            Feature::TimeoutCode => 21,
            Feature::CollConfig => 22,
        }
    }

    /// The first release whose API has this feature.
    pub const fn since(self) -> Version {
        let (minor, patch) = match self {
            Feature::Avg | Feature::Bfloat16 => (10, 3),
            Feature::PreMulSum => (11, 4),
            Feature::LastError => (13, 4),
            Feature::NonBlocking | Feature::Finalize => (14, 3),
            Feature::Split => (18, 1),
            Feature::BufferRegistration | Feature::MemAlloc => (19, 1),
            Feature::GroupSimulate => (22, 3),
            Feature::ScalableInit => (23, 4),
            Feature::Float8 => (24, 3),
            Feature::Shrink | Feature::WindowRegistration => (27, 3),
            Feature::AllToAll | Feature::GatherScatter => (28, 3),
            Feature::Revoke => (28, 7),
            Feature::Grow | Feature::OneSided => (29, 2),
            // Absent from the headers and libraries of 2.29.2 and 2.29.3; first in 2.29.7.
            Feature::SuspendResume | Feature::MemStats => (29, 7),
            Feature::TimeoutCode => (30, 3),
            // The 2.31.2 header and library already have every `nccl…Config` entry point.
            Feature::CollConfig => (31, 2),
        };
        Version::new(2, minor, patch)
    }

    /// The exported symbols the feature needs (empty for enum values and types).
    pub const fn symbols(self) -> &'static [&'static str] {
        match self {
            Feature::Avg | Feature::Bfloat16 | Feature::Float8 | Feature::TimeoutCode => &[],
            Feature::PreMulSum => &["ncclRedOpCreatePreMulSum", "ncclRedOpDestroy"],
            Feature::LastError => &["ncclGetLastError"],
            Feature::NonBlocking => &["ncclCommInitRankConfig"],
            Feature::Finalize => &["ncclCommFinalize"],
            Feature::Split => &["ncclCommSplit"],
            Feature::BufferRegistration => &["ncclCommRegister", "ncclCommDeregister"],
            Feature::MemAlloc => &["ncclMemAlloc", "ncclMemFree"],
            Feature::GroupSimulate => &["ncclGroupSimulateEnd"],
            Feature::ScalableInit => &["ncclCommInitRankScalable"],
            Feature::Shrink => &["ncclCommShrink"],
            Feature::WindowRegistration => &["ncclCommWindowRegister", "ncclCommWindowDeregister"],
            Feature::AllToAll => &["ncclAlltoAll"],
            Feature::GatherScatter => &["ncclGather", "ncclScatter"],
            Feature::Revoke => &["ncclCommRevoke"],
            Feature::Grow => &["ncclCommGetUniqueId", "ncclCommGrow"],
            Feature::OneSided => &["ncclPutSignal", "ncclSignal", "ncclWaitSignal"],
            Feature::SuspendResume => &["ncclCommSuspend", "ncclCommResume"],
            Feature::MemStats => &["ncclCommMemStats"],
            Feature::CollConfig => &[
                "ncclAllReduceConfig",
                "ncclBroadcastConfig",
                "ncclReduceConfig",
                "ncclAllGatherConfig",
                "ncclReduceScatterConfig",
                "ncclAlltoAllConfig",
                "ncclGatherConfig",
                "ncclScatterConfig",
            ],
        }
    }

    /// A stable kebab-case name ("buffer-registration").
    pub const fn name(self) -> &'static str {
        match self {
            Feature::Avg => "avg",
            Feature::Bfloat16 => "bfloat16",
            Feature::PreMulSum => "premul-sum",
            Feature::LastError => "last-error",
            Feature::NonBlocking => "nonblocking",
            Feature::Finalize => "finalize",
            Feature::Split => "split",
            Feature::BufferRegistration => "buffer-registration",
            Feature::MemAlloc => "mem-alloc",
            Feature::GroupSimulate => "group-simulate",
            Feature::ScalableInit => "scalable-init",
            Feature::Float8 => "float8",
            Feature::Shrink => "shrink",
            Feature::WindowRegistration => "window-registration",
            Feature::AllToAll => "all-to-all",
            Feature::GatherScatter => "gather-scatter",
            Feature::Revoke => "revoke",
            Feature::Grow => "grow",
            Feature::OneSided => "one-sided",
            Feature::SuspendResume => "suspend-resume",
            Feature::MemStats => "mem-stats",
            Feature::TimeoutCode => "timeout-code",
            Feature::CollConfig => "coll-config",
        }
    }

    const fn bit(self) -> u64 {
        1u64 << (self as u8)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// The feature set is a u64 bitset.
const _: () = assert!(Feature::COUNT <= 64);

// `ALL` holds each variant at the place its exhaustive match gives (a new variant is a build
// error there until it has one), and that place is its declaration order, which the bitset
// and `FeatureSet`'s table index by.
const _: () = {
    let mut i = 0;
    while i < Feature::COUNT {
        let f = Feature::ALL[i];
        assert!(f.place_in_all() == i && f as usize == i);
        i += 1;
    }
};

/// Why a feature is unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The loaded library is older than the release that brought the feature.
    TooOld {
        /// The release that brought it.
        need: Version,
        /// The release loaded.
        have: Version,
    },
    /// The version allows it, but the library does not export this symbol.
    SymbolAbsent {
        /// The first missing symbol.
        symbol: &'static str,
    },
    /// The library has it, but it was hidden from this backend (to exercise the fallback paths
    /// older releases take, or to test code against an older feature set).
    Disabled,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::TooOld { need, have } => write!(f, "needs NCCL {need}, loaded {have}"),
            Missing::SymbolAbsent { symbol } => write!(f, "symbol {symbol} absent"),
            Missing::Disabled => write!(f, "disabled (hidden from this backend by the user)"),
        }
    }
}

/// What one loaded library (or mock world) can do: each feature available, or the reason not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureSet {
    version: Version,
    available: u64,
    missing: [Option<Missing>; Feature::COUNT],
}

impl FeatureSet {
    /// The set a library of `version` has by its version gates alone, all symbols present.
    pub fn for_version(version: Version) -> FeatureSet {
        Self::resolve(version, |_| true)
    }

    /// The set of a library of `version` that exports the symbols for which `has_symbol` is true:
    /// a feature is available when its version gate holds and every symbol it needs is present.
    pub fn resolve(version: Version, mut has_symbol: impl FnMut(&str) -> bool) -> FeatureSet {
        let mut set = FeatureSet {
            version,
            available: 0,
            missing: [None; Feature::COUNT],
        };
        for f in Feature::ALL {
            if version < f.since() {
                continue;
            }
            match f.symbols().iter().find(|s| !has_symbol(s)) {
                Some(&symbol) => set.missing[f as usize] = Some(Missing::SymbolAbsent { symbol }),
                None => set.available |= f.bit(),
            }
        }
        set
    }

    /// The version the set was resolved for.
    pub const fn version(&self) -> Version {
        self.version
    }

    /// Whether `f` is available.
    pub const fn has(&self, f: Feature) -> bool {
        self.available & f.bit() != 0
    }

    /// `Ok` when `f` is available, else why not.
    pub fn check(&self, f: Feature) -> core::result::Result<(), Missing> {
        if self.has(f) {
            return Ok(());
        }
        match self.missing[f as usize] {
            Some(why) => Err(why),
            None => Err(Missing::TooOld {
                need: f.since(),
                have: self.version,
            }),
        }
    }

    /// The same set with `f` taken away (a mock world or a test that hides a feature).
    pub fn without(mut self, f: Feature) -> FeatureSet {
        if self.has(f) {
            self.available &= !f.bit();
            self.missing[f as usize] = Some(Missing::Disabled);
        }
        self
    }

    /// Every feature with its availability.
    pub fn iter(&self) -> impl Iterator<Item = (Feature, core::result::Result<(), Missing>)> + '_ {
        Feature::ALL.iter().map(move |&f| (f, self.check(f)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_gates() {
        let s = FeatureSet::for_version(Version::new(2, 18, 3));
        assert!(s.has(Feature::Split));
        assert!(s.has(Feature::NonBlocking));
        assert_eq!(
            s.check(Feature::BufferRegistration),
            Err(Missing::TooOld {
                need: Version::new(2, 19, 1),
                have: Version::new(2, 18, 3)
            })
        );
        let all = FeatureSet::for_version(Version::new(2, 32, 3));
        assert!(Feature::ALL.iter().all(|&f| all.has(f)));
        let old = FeatureSet::for_version(Version::new(2, 13, 4));
        assert!(old.has(Feature::LastError) && !old.has(Feature::NonBlocking));
    }

    #[test]
    fn an_absent_symbol_beats_the_version() {
        let s = FeatureSet::resolve(Version::new(2, 28, 3), |sym| sym != "ncclGather");
        assert_eq!(
            s.check(Feature::GatherScatter),
            Err(Missing::SymbolAbsent {
                symbol: "ncclGather"
            })
        );
        assert!(s.has(Feature::AllToAll));
    }

    #[test]
    fn a_hidden_feature_says_so() {
        let s = FeatureSet::for_version(Version::new(2, 28, 3)).without(Feature::Split);
        assert_eq!(s.check(Feature::Split), Err(Missing::Disabled));
        // hiding what the library lacks keeps the real reason
        let old = FeatureSet::for_version(Version::new(2, 14, 3)).without(Feature::Split);
        assert!(matches!(
            old.check(Feature::Split),
            Err(Missing::TooOld { .. })
        ));
    }

    #[test]
    fn without_hides_a_feature() {
        let s = FeatureSet::for_version(Version::new(2, 28, 3)).without(Feature::AllToAll);
        assert!(!s.has(Feature::AllToAll));
        assert_eq!(s.iter().count(), Feature::COUNT);
    }

    #[test]
    fn features_fit_the_bitset() {
        for (i, f) in Feature::ALL.iter().enumerate() {
            assert_eq!(*f as usize, i);
        }
    }
}

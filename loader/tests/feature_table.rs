//! The core's feature table (`Feature::since`, `Feature::symbols`) against the loader's function
//! table (`api_table!`: each symbol with the release whose header first declares it, checked
//! against every cached `nccl.h` by `api_abi.rs`). The two are written apart; this ties them:
//! every symbol a feature needs is one the loader resolves, and a feature's release is the
//! latest of its symbols' releases, unless listed below with the reason it needs a later one.

use oxccl_core::{Feature, Version};
use oxccl_loader::Api;

/// Features whose release is later than their symbols': (feature, why). Empty while every
/// feature's first release is the one that declared its last symbol.
const LATER_THAN_SYMBOLS: &[(Feature, &str)] = &[];

/// Features gated by release alone, with no symbol of their own: an enum value or a result
/// code is compiled into callers, so nothing can be looked up in the library.
const WITHOUT_SYMBOLS: &[(Feature, &str)] = &[
    (Feature::Avg, "`ncclAvg` is a value of ncclRedOp_t"),
    (
        Feature::Bfloat16,
        "`ncclBfloat16` is a value of ncclDataType_t",
    ),
    (
        Feature::Float8,
        "`ncclFloat8e4m3`/`e5m2` are values of ncclDataType_t",
    ),
    (
        Feature::TimeoutCode,
        "`ncclTimeout` is a value of ncclResult_t",
    ),
];

/// The release the loader's table gives for `symbol`; panics naming `feature` when the table
/// lacks it (the loader would never resolve it, so the feature could never be available).
fn declared_since(feature: Feature, symbol: &str) -> Version {
    let text = Api::declared_since(symbol).unwrap_or_else(|| {
        panic!("{feature} needs {symbol}, which the loader's api_table! does not declare")
    });
    Version::parse(text).unwrap_or_else(|| panic!("{symbol}: unparsable release {text:?}"))
}

/// The latest release among `feature`'s symbols, `None` for a feature without any.
fn latest_symbol_release(feature: Feature) -> Option<(Version, &'static str)> {
    feature
        .symbols()
        .iter()
        .map(|s| (declared_since(feature, s), *s))
        .max()
}

fn listed(list: &[(Feature, &str)], f: Feature) -> bool {
    list.iter().any(|(g, _)| *g == f)
}

#[test]
fn every_symbol_a_feature_needs_is_in_the_loader_s_table() {
    for f in Feature::ALL {
        for s in f.symbols() {
            assert!(Api::SYMBOLS.contains(s), "{f}: {s} not in Api::SYMBOLS");
            declared_since(f, s);
        }
    }
}

#[test]
fn a_feature_s_release_is_the_latest_of_its_symbols_releases() {
    let mut wrong = Vec::new();
    for f in Feature::ALL {
        let Some((latest, symbol)) = latest_symbol_release(f) else {
            continue;
        };
        let since = f.since();
        if since < latest {
            wrong.push(format!(
                "{f}: since {since}, but {symbol} is declared only from {latest}: the feature \
                 would be reported available on releases that lack the symbol"
            ));
        } else if since > latest && !listed(LATER_THAN_SYMBOLS, f) {
            wrong.push(format!(
                "{f}: since {since}, later than its latest symbol ({symbol}, {latest}): fix \
                 since() or list the feature in LATER_THAN_SYMBOLS with the reason"
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// The exception lists hold nothing stale: each entry is a feature that needs it.
#[test]
fn the_exceptions_are_exceptions() {
    for (f, why) in LATER_THAN_SYMBOLS {
        assert!(!why.is_empty(), "{f}: give the reason");
        let (latest, _) = latest_symbol_release(*f).expect("a listed feature has symbols");
        assert!(
            f.since() > latest,
            "{f} is listed in LATER_THAN_SYMBOLS but its release {} is its symbols' {latest}",
            f.since()
        );
    }
    for f in Feature::ALL {
        assert_eq!(
            f.symbols().is_empty(),
            listed(WITHOUT_SYMBOLS, f),
            "{f}: WITHOUT_SYMBOLS must list exactly the features without symbols"
        );
    }
}

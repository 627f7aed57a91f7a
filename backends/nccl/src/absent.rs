//! The errors for a function the loaded library does not export.

use oxccl_core::{text, Error, Feature, FeatureSet, Missing, Result, ResultCode};

/// The function of a gated feature, `f` as the loaded table has it: refused when `features`
/// (what this library's communicators may use: its release, less what the user hid) lack
/// `feature`, or the library does not export `symbol`.
pub(crate) fn gated<F>(
    features: &FeatureSet,
    feature: Feature,
    f: Option<F>,
    symbol: &'static str,
) -> Result<F> {
    features.require(feature)?;
    f.ok_or(feature_symbol(feature, symbol))
}

/// A gated feature's function is absent: [`Error::Unsupported`] naming the symbol.
pub(crate) fn feature_symbol(feature: Feature, symbol: &'static str) -> Error {
    Error::Unsupported {
        feature,
        missing: Missing::SymbolAbsent { symbol },
    }
}

/// A function every supported release has is absent (a broken or stripped library).
pub(crate) fn base_symbol(symbol: &str) -> Error {
    Error::Backend {
        code: ResultCode::INTERNAL_ERROR,
        text: text!("symbol absent"),
        last: text!("{symbol}"),
    }
}

//! The errors for a function the loaded library does not export.

use oxccl_core::{text, Error, Feature, Missing, ResultCode};

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

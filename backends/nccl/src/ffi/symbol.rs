//! A function of the loaded table, or the error that names it missing: the one check every
//! wrapper makes before it calls.

use oxccl_core::{Feature, Result};

/// An `ncclResult_t` as NCCL returned it, for the caller to settle.
pub(crate) type Code = i32;

/// `f`, or the error for a function every supported release has ([`crate::absent::base_symbol`]).
pub(super) fn base<F>(f: Option<F>, symbol: &'static str) -> Result<F> {
    f.ok_or_else(|| crate::absent::base_symbol(symbol))
}

/// `f`, or the error for a gated feature's function ([`crate::absent::feature_symbol`]).
pub(super) fn gated<F>(f: Option<F>, feature: Feature, symbol: &'static str) -> Result<F> {
    f.ok_or(crate::absent::feature_symbol(feature, symbol))
}

//! The value a flight-recorder dump is built of, before it is written: one tree, written as a
//! pickle ([`to_pickle`](super::pickle::to_pickle)) and as JSON ([`to_json`](super::json::to_json)).

/// A value of a dump: the plain data both forms hold (Python's types, which the pickle keeps;
/// the JSON writes tuples as arrays).
#[derive(Debug, Clone, PartialEq)]
pub enum DumpValue {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An `int` (Python ints are unbounded; 128 bits cover every u64 and i64).
    Int(i128),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `list`.
    List(Vec<DumpValue>),
    /// A `tuple`.
    Tuple(Vec<DumpValue>),
    /// A `dict`, in insertion order (Python keeps it).
    Dict(Vec<(DumpValue, DumpValue)>),
}

impl DumpValue {
    /// A `str`.
    pub fn str(s: impl Into<String>) -> DumpValue {
        DumpValue::Str(s.into())
    }

    /// An `int` from anything that widens to 128 bits.
    pub fn int(i: impl Into<i128>) -> DumpValue {
        DumpValue::Int(i.into())
    }

    /// A dict with string keys.
    pub fn dict<K: Into<String>>(items: impl IntoIterator<Item = (K, DumpValue)>) -> DumpValue {
        DumpValue::Dict(
            items
                .into_iter()
                .map(|(k, v)| (DumpValue::Str(k.into()), v))
                .collect(),
        )
    }
}

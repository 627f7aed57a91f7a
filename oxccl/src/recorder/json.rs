//! The JSON text of a [`DumpValue`], as the JSON dump (`rank_<r>.json`) holds it: tuples as
//! arrays, dict keys as text, in the dict's order.

use super::value::DumpValue;
use std::fmt::Write as _;

/// The JSON text of `value`. Ints beyond 64 bits are written as their decimal text (JSON
/// readers disagree past 64 bits); floats that are not finite as `null`, which JSON has no
/// other word for; a dict key that is not a string as the JSON text of the key.
pub fn to_json(value: &DumpValue) -> String {
    let mut out = String::new();
    write(&mut out, value);
    out
}

fn write(out: &mut String, value: &DumpValue) {
    match value {
        DumpValue::None => out.push_str("null"),
        DumpValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        DumpValue::Int(i) => {
            if i64::try_from(*i).is_ok() || u64::try_from(*i).is_ok() {
                // Writing into a String cannot fail.
                let _ = write!(out, "{i}");
            } else {
                write_str(out, &i.to_string());
            }
        }
        // `{:?}` is the shortest text that reads back as the same float, and always has a
        // digit after a point or an exponent, so readers take it for a float.
        DumpValue::Float(f) if f.is_finite() => {
            let _ = write!(out, "{f:?}");
        }
        DumpValue::Float(_) => out.push_str("null"),
        DumpValue::Str(s) => write_str(out, s),
        DumpValue::List(items) | DumpValue::Tuple(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(out, item);
            }
            out.push(']');
        }
        DumpValue::Dict(items) => {
            out.push('{');
            for (i, (k, v)) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                match k {
                    DumpValue::Str(s) => write_str(out, s),
                    other => write_str(out, &to_json(other)),
                }
                out.push(':');
                write(out, v);
            }
            out.push('}');
        }
    }
}

/// `s` as a JSON string: quotes, backslashes and control characters escaped, everything else
/// as it is (JSON text is UTF-8).
fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(v: &DumpValue) -> serde_json::Value {
        serde_json::from_str(&to_json(v)).unwrap()
    }

    #[test]
    fn strings_escape_what_json_requires_and_read_back_whole() {
        let s = "quote \" backslash \\ nl \n cr \r tab \t bell \u{7} nul \0 del \u{7f} é 🦀";
        assert_eq!(parsed(&DumpValue::str(s)), serde_json::Value::from(s));
        assert_eq!(to_json(&DumpValue::str("\u{1}\u{8}")), "\"\\u0001\\b\"");
    }

    #[test]
    fn numbers_keep_their_value_and_kind() {
        assert_eq!(to_json(&DumpValue::int(-5)), "-5");
        assert_eq!(to_json(&DumpValue::int(u64::MAX)), u64::MAX.to_string());
        assert_eq!(
            to_json(&DumpValue::Int(i128::from(u64::MAX) + 1)),
            format!("\"{}\"", i128::from(u64::MAX) + 1)
        );
        for f in [0.0, 3.0, 0.1, 1.5e-7, 2.5e21, -1.25] {
            let v = parsed(&DumpValue::Float(f));
            assert!(v.is_f64(), "{f}: {v}");
            assert_eq!(v.as_f64(), Some(f));
        }
        assert_eq!(to_json(&DumpValue::Float(f64::NAN)), "null");
        assert_eq!(to_json(&DumpValue::Float(f64::INFINITY)), "null");
    }

    #[test]
    fn containers_keep_their_order_and_nesting() {
        let v = DumpValue::dict([
            (
                "b",
                DumpValue::List(vec![DumpValue::None, DumpValue::Bool(true)]),
            ),
            (
                "a",
                DumpValue::Tuple(vec![DumpValue::str("x"), DumpValue::int(1)]),
            ),
            ("e", DumpValue::Dict(Vec::new())),
        ]);
        assert_eq!(to_json(&v), r#"{"b":[null,true],"a":["x",1],"e":{}}"#);
        let odd_key = DumpValue::Dict(vec![(DumpValue::int(7), DumpValue::Bool(false))]);
        assert_eq!(to_json(&odd_key), r#"{"7":false}"#);
    }
}

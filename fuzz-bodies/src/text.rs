//! The escaping of outside text (`oxccl_core::text`) on any bytes: `EscapedBytes` and
//! `Escaped` against a model written from the documented table, the output free of unsafe
//! characters and unchanged when escaped again, a `Text` built from it cut at a character
//! boundary and still safe, `Error`'s `Display` safe whatever its texts hold, and `JsonSafe`
//! over serde_json's output parsing back to the same value with nothing raw.

use oxccl_core::text::{is_unsafe, Escaped, EscapedBytes, JsonSafe, TEXT_CAPACITY};
use oxccl_core::{Error, ResultCode};
use std::fmt::Display;

/// Whether `c` is one the documentation says must never be written raw (restated here from
/// the table, not taken from the code under test).
fn forbidden(c: char) -> bool {
    let u = c as u32;
    u < 0x20
        || u == 0x7f
        || (0x80..=0x9f).contains(&u)
        || (0x202a..=0x202e).contains(&u)
        || (0x2066..=0x2069).contains(&u)
}

/// Panics when `shown` holds a character that must not reach a terminal (`allow`: those
/// that may, such as a report's own line feeds).
pub fn assert_terminal_safe(shown: &str, allow: &[char]) {
    if let Some(c) = shown.chars().find(|c| forbidden(*c) && !allow.contains(c)) {
        panic!("{c:?} written raw in {shown:?}");
    }
}

/// Panics when `d`'s `Display` writes a character that must not reach a terminal.
pub fn assert_shows_safely(d: &dyn Display) {
    assert_terminal_safe(&d.to_string(), &[]);
}

/// The documented escape of one character.
fn model_char(c: char, out: &mut String) {
    let u = c as u32;
    match c {
        '\0' => out.push_str("\\0"),
        '\x07' => out.push_str("\\a"),
        '\x08' => out.push_str("\\b"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\x0b' => out.push_str("\\v"),
        '\x0c' => out.push_str("\\f"),
        '\r' => out.push_str("\\r"),
        '\x1b' => out.push_str("\\e"),
        _ if u < 0x20 || u == 0x7f => out.push_str(&format!("\\x{u:02x}")),
        _ if forbidden(c) => out.push_str(&format!("\\u{{{u:x}}}")),
        _ => out.push(c),
    }
}

/// The documented escape of `bytes`: each character that decodes there, escaped as the table
/// says; each byte that starts none, as `\xNN`.
fn model(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let one = (1..=4)
            .filter(|n| i + n <= bytes.len())
            .find_map(|n| std::str::from_utf8(&bytes[i..i + n]).ok().map(|s| (n, s)));
        match one {
            Some((n, s)) => {
                s.chars().for_each(|c| model_char(c, &mut out));
                i += n;
            }
            None => {
                out.push_str(&format!("\\x{:02x}", bytes[i]));
                i += 1;
            }
        }
    }
    out
}

/// One fuzz input: any bytes, taken as the outside text.
pub fn fuzz(data: &[u8]) {
    let shown = EscapedBytes(data).to_string();
    assert_eq!(shown, model(data), "escaping {data:?}");
    assert_terminal_safe(&shown, &[]);
    assert_eq!(
        Escaped(&shown).to_string(),
        shown,
        "escaping twice changed it"
    );
    for c in shown.chars() {
        assert_eq!(is_unsafe(c), forbidden(c), "is_unsafe({c:?})");
    }

    let lossy = String::from_utf8_lossy(data);
    if let Ok(s) = std::str::from_utf8(data) {
        assert_eq!(Escaped(s).to_string(), shown);
    }
    let t = oxccl_core::text!("{}", Escaped(&lossy));
    let full = Escaped(&lossy).to_string();
    assert!(t.len() <= TEXT_CAPACITY);
    assert!(
        full.starts_with(t.as_str()),
        "a Text is a prefix of the escaped text"
    );
    assert!(
        t.len() == full.len() || t.len() + 4 > TEXT_CAPACITY,
        "cut early: {t:?}"
    );
    assert_terminal_safe(&t, &[]);

    // Texts built raw are still shown safely by the error (its backstop).
    let raw = oxccl_core::text::text_str(&lossy);
    assert_shows_safely(&Error::invalid("value", format_args!("{lossy}")));
    assert_shows_safely(&Error::Backend {
        code: ResultCode(2),
        text: raw.clone(),
        last: raw.clone(),
    });
    assert_shows_safely(&Error::Aborted { reason: raw });

    // JSON keeps the exact value; only JSON's own white space is raw.
    let v = serde_json::json!({ lossy.as_ref(): [lossy.as_ref(), 1] });
    for json in [
        serde_json::to_string(&v).unwrap(),
        serde_json::to_string_pretty(&v).unwrap(),
    ] {
        let safe = JsonSafe(&json).to_string();
        assert_terminal_safe(&safe, &['\n']);
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back, v, "{safe}");
    }
}

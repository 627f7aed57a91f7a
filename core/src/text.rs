//! Text for people: bounded messages for errors, and the one rule for showing text that oxccl
//! did not write.
//!
//! # Showing outside text
//!
//! A path, an environment variable's value, a host name, a store key, a library's message or a
//! name read from a dump can hold any character. Written raw to a terminal, control characters
//! act instead of showing (an escape sequence recolours or clears the screen, a bell rings, a
//! carriage return overwrites what came before) and bidi overrides reorder what the reader sees.
//! So every such string is shown through [`Escaped`] (or [`EscapedBytes`] for bytes that need
//! not be UTF-8, such as a Unix path), which writes printable text as it is and each character
//! that [`is_unsafe`] as a visible escape, in Rust's and the C shell's notation:
//!
//! | character | shown as |
//! |---|---|
//! | NUL, BEL, BS, TAB, LF, VT, FF, CR, ESC | `\0` `\a` `\b` `\t` `\n` `\v` `\f` `\r` `\e` |
//! | other C0 controls (U+0001–U+001F), DEL (U+007F) | `\x01` … `\x1f`, `\x7f` |
//! | C1 controls (U+0080–U+009F) | `\u{80}` … `\u{9f}` |
//! | bidi embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069) | `\u{202a}` … `\u{2069}` |
//! | a byte that is not UTF-8 ([`EscapedBytes`] only) | `\x80` … `\xff` |
//!
//! Everything else, the backslash included, is written as it is. So the escaped form holds no
//! unsafe character and escaping it again changes nothing: text may pass through several
//! layers that each escape it (a [`Text`] built with [`Escaped`], then shown by
//! [`crate::Error`]'s `Display`) without doubling backslashes. The price is that a literal `\e`
//! in the input reads like an escaped ESC; the aim is a safe, readable terminal, not a
//! reversible encoding (the JSON outputs keep exact values, see [`JsonSafe`]).
//!
//! Where the rule applies: outside text is escaped where it is written into a message. A
//! [`Text`] (or a `String` message) is escaped as it is built, in the format arguments
//! (`text!("store {}", Escaped(host))`), since it is already the rendered message; a field that
//! keeps the raw value as data (a `PathBuf`, a dump's group name) is escaped by the `Display`
//! that shows it. [`crate::Error`]'s `Display` also escapes every text it holds, as a backstop
//! for texts built elsewhere. Messages oxccl writes itself (multi-line reports) keep their own
//! line breaks; only the outside strings inside them are escaped.

use core::fmt::{self, Write};

/// Capacity of a [`Text`] in bytes; longer messages are cut at a character boundary.
pub const TEXT_CAPACITY: usize = 192;

/// A short owned message (NCCL's error text, an expectation, a reason) that needs no allocator.
pub type Text = heapless::String<TEXT_CAPACITY>;

/// Writes into a [`Text`] until the first character that does not fit, then nothing more:
/// a later, shorter piece must not land after the gap.
struct Truncating<'a> {
    out: &'a mut Text,
    full: bool,
}

impl Write for Truncating<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            if self.full || self.out.push(ch).is_err() {
                self.full = true;
                break;
            }
        }
        Ok(())
    }
}

/// Formats `args` into a [`Text`], cutting what does not fit at a character boundary: the
/// result is a prefix of the whole message (never fails, never panics).
pub fn text(args: fmt::Arguments<'_>) -> Text {
    let mut out = Text::new();
    let _ = Truncating {
        out: &mut out,
        full: false,
    }
    .write_fmt(args);
    out
}

/// A [`Text`] holding `s`, cut to capacity.
pub fn text_str(s: &str) -> Text {
    text(format_args!("{s}"))
}

/// `format!` into a [`Text`].
#[macro_export]
macro_rules! text {
    ($($arg:tt)*) => { $crate::text::text(format_args!($($arg)*)) };
}

/// Whether `c` must not reach a terminal as it is: a C0 control (U+0000–U+001F), DEL, a C1
/// control (U+0080–U+009F) or a bidi embedding, override or isolate (U+202A–U+202E,
/// U+2066–U+2069). See the [module documentation](self).
pub const fn is_unsafe(c: char) -> bool {
    matches!(
        c,
        '\0'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// Writes the visible escape of `c` (an [`is_unsafe`] character): `\e`, `\x7f`, `\u{9b}`, ….
fn write_escape(out: &mut impl Write, c: char) -> fmt::Result {
    let named = match c {
        '\0' => "\\0",
        '\x07' => "\\a",
        '\x08' => "\\b",
        '\t' => "\\t",
        '\n' => "\\n",
        '\x0b' => "\\v",
        '\x0c' => "\\f",
        '\r' => "\\r",
        '\x1b' => "\\e",
        c if c.is_ascii() => return write!(out, "\\x{:02x}", c as u32),
        c => return write!(out, "\\u{{{:x}}}", c as u32),
    };
    out.write_str(named)
}

/// Writes `s` to `out` with every [`is_unsafe`] character as its visible escape (the
/// [module documentation](self) lists them), the rest as it is.
pub fn write_escaped(out: &mut impl Write, s: &str) -> fmt::Result {
    let mut plain = 0;
    for (i, c) in s.char_indices() {
        if is_unsafe(c) {
            out.write_str(&s[plain..i])?;
            write_escape(out, c)?;
            plain = i + c.len_utf8();
        }
    }
    out.write_str(&s[plain..])
}

/// Writes `bytes` as [`write_escaped`] does, each byte that is not part of valid UTF-8 as
/// `\xNN`.
pub fn write_escaped_bytes(out: &mut impl Write, bytes: &[u8]) -> fmt::Result {
    for chunk in bytes.utf8_chunks() {
        write_escaped(out, chunk.valid())?;
        for b in chunk.invalid() {
            write!(out, "\\x{b:02x}")?;
        }
    }
    Ok(())
}

/// Shows outside text safely: `format!("{}", Escaped("a\u{1b}[2Jb"))` is `a\e[2Jb`. The
/// one way oxccl displays a string it did not write (see the [module documentation](self)).
/// Width and precision flags are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0)
    }
}

/// [`Escaped`] for bytes that need not be UTF-8 (a Unix path or environment value as bytes,
/// `path.as_os_str().as_encoded_bytes()`): invalid bytes show as `\xNN` instead of being
/// replaced, so two different names never show alike for that reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscapedBytes<'a>(pub &'a [u8]);

impl fmt::Display for EscapedBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped_bytes(f, self.0)
    }
}

/// A JSON text made safe for a terminal without changing the value it denotes: each
/// [`is_unsafe`] character other than JSON's own white space (tab, line feed, carriage return)
/// is written as a `\uXXXX` escape.
///
/// For the output of a JSON writer such as serde_json, which escapes the C0 controls inside
/// strings but leaves DEL, the C1 controls and the bidi characters raw (JSON allows them):
/// outside strings, a JSON text holds only ASCII punctuation, literals and white space, so
/// every character replaced here is inside a string, where `\uXXXX` denotes that same
/// character. The result parses to the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonSafe<'a>(pub &'a str);

impl fmt::Display for JsonSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        let mut plain = 0;
        for (i, c) in s.char_indices() {
            if is_unsafe(c) && !matches!(c, '\t' | '\n' | '\r') {
                f.write_str(&s[plain..i])?;
                // Every unsafe character is in the Basic Multilingual Plane: one escape each.
                write!(f, "\\u{:04x}", c as u32)?;
                plain = i + c.len_utf8();
            }
        }
        f.write_str(&s[plain..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_not_refused() {
        let long = [b'x'; 500];
        let t = text_str(core::str::from_utf8(&long).unwrap());
        assert_eq!(t.len(), TEXT_CAPACITY);
    }

    #[test]
    fn multibyte_text_is_cut_at_a_char_boundary() {
        let mut s = heapless::String::<600>::new();
        for _ in 0..200 {
            s.push('é').unwrap();
        }
        let t = text_str(&s);
        assert!(t.len() <= TEXT_CAPACITY);
        assert!(t.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_cut_text_is_a_prefix_of_the_message() {
        // 191 bytes, then a 3-byte character that does not fit, then one byte that would.
        let mut head = heapless::String::<200>::new();
        for _ in 0..TEXT_CAPACITY - 1 {
            head.push('x').unwrap();
        }
        let t = crate::text!("{head}{}{}", '\u{fffd}', 'y');
        assert_eq!(t.as_str(), head.as_str());
    }

    fn shown(d: impl core::fmt::Display) -> heapless::String<512> {
        let mut s = heapless::String::new();
        core::fmt::write(&mut s, format_args!("{d}")).unwrap();
        s
    }

    #[test]
    fn controls_show_as_escapes() {
        assert_eq!(
            shown(Escaped("/x\u{1b}[31mRED\x07")).as_str(),
            "/x\\e[31mRED\\a"
        );
        assert_eq!(
            shown(Escaped("\0\x07\x08\t\n\x0b\x0c\r\x1b")).as_str(),
            "\\0\\a\\b\\t\\n\\v\\f\\r\\e"
        );
        assert_eq!(shown(Escaped("\x01\x1f\x7f")).as_str(), "\\x01\\x1f\\x7f");
        assert_eq!(
            shown(Escaped("a\u{80}b\u{9b}c\u{9f}")).as_str(),
            "a\\u{80}b\\u{9b}c\\u{9f}"
        );
        assert_eq!(
            shown(Escaped("\u{202a}\u{202e}x\u{2066}\u{2069}")).as_str(),
            "\\u{202a}\\u{202e}x\\u{2066}\\u{2069}"
        );
    }

    #[test]
    fn printable_text_is_unchanged() {
        let s = "host-01.example:29500 /opt/nccl/lib/libnccl.so.2 é 日本 \\e \" ' \u{a0} \u{2029} \u{202f}";
        assert_eq!(shown(Escaped(s)).as_str(), s);
    }

    #[test]
    fn escaping_twice_changes_nothing() {
        let once = shown(Escaped("a\x1b\u{9b}\u{202e}\\e\x7f"));
        assert_eq!(shown(Escaped(&once)), once);
        assert!(!once.chars().any(is_unsafe));
    }

    #[test]
    fn bytes_that_are_not_utf8_show_as_hex() {
        assert_eq!(
            shown(EscapedBytes(b"/x\xff\x1b\xc3\xa9\xc3")).as_str(),
            "/x\\xff\\e\u{e9}\\xc3"
        );
        assert_eq!(
            shown(EscapedBytes("a\u{9b}".as_bytes())),
            shown(Escaped("a\u{9b}"))
        );
    }

    #[test]
    fn a_text_built_from_escaped_input_is_safe_when_cut() {
        let mut long = heapless::String::<600>::new();
        for _ in 0..100 {
            long.push_str("\x1b\u{9b}").unwrap();
        }
        let t = crate::text!("value {}", Escaped(&long));
        assert!(t.starts_with("value \\e\\u{9b}"));
        assert!(t.len() <= TEXT_CAPACITY);
        assert!(!t.chars().any(is_unsafe));
    }

    #[test]
    fn json_keeps_its_white_space_and_escapes_the_rest_inside_strings() {
        let json = "{\n  \"k\u{7f}\": \"a\u{9b}\u{202e}b\\u001b\"\n}";
        assert_eq!(
            shown(JsonSafe(json)).as_str(),
            "{\n  \"k\\u007f\": \"a\\u009b\\u202eb\\u001b\"\n}"
        );
    }
}

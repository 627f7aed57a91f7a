//! The one rendering of bytes that need not be UTF-8 (a path, an environment variable, a
//! `dlerror` message) as text, for the loader's errors and `oxccl info`.
//!
//! A Unix path is bytes. Rendered with `to_string_lossy` or `Path::display`, a byte that is not
//! UTF-8 becomes U+FFFD, so two different paths can read alike and the file cannot be named
//! back from the message; rendered with [`os_text`] it becomes `\xNN`, the escape
//! [`oxccl_core::text::EscapedBytes`] writes. The result is a `String` that can be stored or
//! put in JSON; shown through [`oxccl_core::text::Escaped`] it reads exactly as
//! `EscapedBytes` of the raw bytes, since the escape itself is plain ASCII.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt::Write;

/// `s` as text: UTF-8 as it is (control characters included: escaping them for a terminal is
/// [`oxccl_core::text::Escaped`]'s job where the text is shown), each byte that is not part of
/// valid UTF-8 as `\xNN`. Borrowed when `s` is valid UTF-8.
pub fn os_text(s: &OsStr) -> Cow<'_, str> {
    let bytes = s.as_encoded_bytes();
    if let Ok(s) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::text::{Escaped, EscapedBytes};
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn bytes_that_are_not_utf8_show_as_hex_and_utf8_is_kept() {
        let raw = b"/opt/lib\x9b/\xc3\xa9\x1b\xff.so";
        let s = os_text(OsStr::from_bytes(raw));
        assert_eq!(s, "/opt/lib\\x9b/\u{e9}\x1b\\xff.so");
        assert!(!s.contains('\u{fffd}'));
        // Escaped for a terminal, it reads as the escape of the raw bytes.
        assert_eq!(
            Escaped(&s).to_string(),
            EscapedBytes(raw).to_string(),
            "one rendering"
        );
        assert!(matches!(
            os_text(OsStr::new("plain")),
            Cow::Borrowed("plain")
        ));
    }
}

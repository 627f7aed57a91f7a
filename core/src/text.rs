//! Bounded text for error messages, so errors need no heap.

use core::fmt::{self, Write};

/// Capacity of a [`Text`] in bytes; longer messages are cut at a character boundary.
pub const TEXT_CAPACITY: usize = 192;

/// A short owned message (NCCL's error text, an expectation, a reason) that needs no allocator.
pub type Text = heapless::String<TEXT_CAPACITY>;

struct Truncating<'a>(&'a mut Text);

impl Write for Truncating<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            if self.0.push(ch).is_err() {
                break;
            }
        }
        Ok(())
    }
}

/// Formats `args` into a [`Text`], cutting what does not fit (never fails, never panics).
pub fn text(args: fmt::Arguments<'_>) -> Text {
    let mut out = Text::new();
    let _ = Truncating(&mut out).write_fmt(args);
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
}

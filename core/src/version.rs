//! NCCL versions and their integer codes.

use core::fmt;

/// An NCCL release, e.g. 2.28.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version {
    /// Major number (2 for every NCCL so far).
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Patch number.
    pub patch: u32,
}

impl Version {
    /// The oldest NCCL oxccl loads: 2.13 brought `ncclGetLastError` and `ncclRemoteError`, which
    /// every error path relies on, and is the oldest release CI tests against.
    pub const MIN_SUPPORTED: Version = Version::new(2, 13, 0);

    /// A version from its three numbers.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// `"2.32.3"` as a version; `None` for anything but three dot-separated numbers.
    pub fn parse(s: &str) -> Option<Version> {
        let mut it = s.trim().split('.');
        let v = Version::new(
            it.next()?.parse().ok()?,
            it.next()?.parse().ok()?,
            it.next()?.parse().ok()?,
        );
        it.next().is_none().then_some(v)
    }

    /// The `NCCL_VERSION(X,Y,Z)` code: `X*1000+Y*100+Z` up to 2.8, `X*10000+Y*100+Z` after.
    /// `None` when a number is too large to encode unambiguously.
    pub const fn code(&self) -> Option<i32> {
        if self.minor > 99 || self.patch > 99 || self.major > 200_000 {
            return None;
        }
        let (m, n, p) = (self.major as i32, self.minor as i32, self.patch as i32);
        if self.major <= 2 && self.minor <= 8 {
            Some(m * 1000 + n * 100 + p)
        } else {
            Some(m * 10000 + n * 100 + p)
        }
    }

    /// Decodes what `ncclGetVersion` returns, either formula. `None` for codes no release has
    /// (negative, or too small to hold a major number).
    pub const fn from_code(code: i32) -> Option<Version> {
        if code < 1000 {
            return None;
        }
        let c = code as u32;
        if c < 10000 {
            // Old formula: X*1000 + Y*100 + Z with Y <= 8 (so 2.9+ never lands here).
            let v = Version::new(c / 1000, (c % 1000) / 100, c % 100);
            if v.minor > 8 || v.major > 2 {
                return None;
            }
            Some(v)
        } else {
            Some(Version::new(c / 10000, (c % 10000) / 100, c % 100))
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formulas_both_ways() {
        let cases = [
            (Version::new(2, 28, 3), 22803),
            (Version::new(2, 13, 4), 21304),
            (Version::new(2, 32, 3), 23203),
            (Version::new(2, 9, 6), 20906),
            (Version::new(2, 8, 4), 2804),
            (Version::new(2, 4, 2), 2402),
        ];
        for (v, c) in cases {
            assert_eq!(v.code(), Some(c), "{v}");
            assert_eq!(Version::from_code(c), Some(v), "{c}");
        }
    }

    #[test]
    fn displays_dotted() {
        use core::fmt::Write;
        let mut s = heapless::String::<16>::new();
        write!(s, "{}", Version::new(2, 28, 3)).unwrap();
        assert_eq!(s.as_str(), "2.28.3");
    }

    #[test]
    fn impossible_codes_are_none() {
        for c in [i32::MIN, -1, 0, 999, 2900, 3000] {
            assert_eq!(Version::from_code(c), None, "{c}");
        }
        assert_eq!(Version::new(2, 100, 0).code(), None);
        assert!(Version::from_code(i32::MAX).is_some());
    }

    #[test]
    fn ordering() {
        assert!(Version::new(2, 9, 0) > Version::new(2, 8, 99));
        assert!(Version::new(2, 13, 4) >= Version::MIN_SUPPORTED);
    }
}

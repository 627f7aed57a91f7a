//! The fields of the messages between a rank's process and its host (see `wire`): fixed-width
//! little-endian numbers, strings, byte strings and lists, every read bounds-checked, and the
//! errors that cross with what the ranks need of them.

use oxccl_core::text::text_str;
use oxccl_core::{text, Error, Result, ResultCode};

/// Appends fields to a payload.
#[derive(Default)]
pub(crate) struct W(pub Vec<u8>);

impl W {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn str(&mut self, s: &str) {
        self.u32(u32::try_from(s.len()).unwrap_or(0));
        if u32::try_from(s.len()).is_ok() {
            self.0.extend_from_slice(s.as_bytes());
        }
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
    }
    pub(crate) fn list(&mut self, v: &[usize]) {
        self.u32(u32::try_from(v.len()).unwrap_or(0));
        for c in v.iter().take(u32::MAX as usize) {
            self.u64(*c as u64);
        }
    }
}

/// Reads fields from a payload; every read is bounds-checked (a short frame is an error).
pub(crate) struct R<'a>(pub &'a [u8]);

pub(crate) fn short() -> Error {
    Error::Remote {
        detail: text!("malformed message from the peer process"),
    }
}

impl R<'_> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            return Err(short());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    pub(crate) fn usize(&mut self) -> Result<usize> {
        usize::try_from(self.u64()?).map_err(|_| short())
    }
    pub(crate) fn str(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = self.usize()?;
        Ok(self.take(n)?.to_vec())
    }
    pub(crate) fn list(&mut self) -> Result<Vec<usize>> {
        let n = self.u32()? as usize;
        if n > self.0.len() / 8 {
            return Err(short());
        }
        (0..n).map(|_| self.usize()).collect()
    }
}

/// The static name a mismatch's `what` takes back (the mock's own names).
fn what_static(s: &str) -> &'static str {
    [
        "operation",
        "dtype",
        "op",
        "root",
        "counts",
        "count",
        "size",
        "color",
        "key",
    ]
    .into_iter()
    .find(|w| *w == s)
    .unwrap_or("collective")
}

pub(crate) fn put_error(w: &mut W, e: &Error) {
    match e {
        Error::Mismatch { what, detail } => {
            w.u8(1);
            w.str(what);
            w.str(detail);
        }
        Error::Timeout { what, after_ms } => {
            w.u8(2);
            w.str(what);
            w.u64(*after_ms);
        }
        Error::Backend { code, text, last } => {
            w.u8(3);
            w.u32(code.0 as u32);
            w.str(text);
            w.str(last);
        }
        Error::Aborted { reason } => {
            w.u8(4);
            w.str(reason);
        }
        Error::Remote { detail } => {
            w.u8(5);
            w.str(detail);
        }
        other => {
            w.u8(5);
            w.str(&other.to_string());
        }
    }
}

pub(crate) fn get_error(r: &mut R<'_>) -> Result<Error> {
    Ok(match r.u8()? {
        1 => {
            let what = what_static(&r.str()?);
            Error::Mismatch {
                what,
                detail: text_str(&r.str()?),
            }
        }
        2 => Error::Timeout {
            what: text_str(&r.str()?),
            after_ms: r.u64()?,
        },
        3 => Error::Backend {
            code: ResultCode(r.u32()? as i32),
            text: text_str(&r.str()?),
            last: text_str(&r.str()?),
        },
        4 => Error::Aborted {
            reason: text_str(&r.str()?),
        },
        5 => Error::Remote {
            detail: text_str(&r.str()?),
        },
        _ => return Err(short()),
    })
}

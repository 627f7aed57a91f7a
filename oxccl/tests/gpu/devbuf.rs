//! Device buffers described by host values, the tally of checks, and one checked issue.

use super::values::{close, decode, encode};
use cudarc::driver::{CudaSlice, DevicePtr};
use oxccl::{Comm, CommOp, DataType, RawBuf, RawBufMut};

/// A device buffer of `elems` elements (no memory at all when empty: NCCL takes null then).
pub struct DevBuf {
    mem: Option<CudaSlice<u8>>,
    pub addr: usize,
    elems: usize,
}

impl DevBuf {
    pub fn new(c: &Comm, dt: DataType, vals: &[f64]) -> DevBuf {
        if vals.is_empty() {
            return DevBuf {
                mem: None,
                addr: 0,
                elems: 0,
            };
        }
        let mem = c.stream().clone_htod(&encode(dt, vals)).expect("upload");
        let addr = {
            let (p, _g) = mem.device_ptr(c.stream());
            p as usize
        };
        DevBuf {
            mem: Some(mem),
            addr,
            elems: vals.len(),
        }
    }
    pub fn zeros(c: &Comm, dt: DataType, n: usize) -> DevBuf {
        DevBuf::new(c, dt, &vec![0.0; n])
    }
    pub fn r(&self) -> RawBuf {
        RawBuf::new(self.addr, self.elems)
    }
    pub fn w(&self) -> RawBufMut {
        RawBufMut::new(self.addr, self.elems)
    }
    /// `len` elements from element `off`.
    pub fn part(&self, dt: DataType, off: usize, len: usize) -> RawBufMut {
        if len == 0 {
            return RawBufMut::EMPTY;
        }
        RawBufMut::new(self.addr + off * dt.size(), len)
    }
    pub fn read(&self, c: &Comm, dt: DataType) -> Vec<f64> {
        match &self.mem {
            None => Vec::new(),
            Some(m) => decode(dt, &c.stream().clone_dtoh(m).expect("download")),
        }
    }
}

/// Outcome of a suite run on one rank.
#[derive(Default, Debug)]
pub struct Tally {
    pub passed: usize,
    pub failed: Vec<String>,
}

impl Tally {
    pub fn check(&mut self, name: &str, got: &[f64], want: &[f64], dt: DataType) {
        let bad = got.len() != want.len() || got.iter().zip(want).any(|(g, w)| !close(dt, *g, *w));
        if bad {
            let at = got.iter().zip(want).position(|(g, w)| !close(dt, *g, *w));
            self.failed.push(format!(
                "{name}: len {} vs {}, first difference at {at:?}: got {:?} want {:?}",
                got.len(),
                want.len(),
                at.map(|i| got[i]),
                at.map(|i| want[i])
            ));
        } else {
            self.passed += 1;
        }
    }

    /// Counts `other`'s checks as this one's (the peer-kernel tests' parts; the suite has
    /// one tally).
    #[allow(dead_code)]
    pub fn absorb(&mut self, other: Tally) {
        self.passed += other.passed;
        self.failed.extend(other.failed);
    }

    pub fn error(&mut self, name: &str, e: oxccl::Error) {
        self.failed.push(format!("{name}: {e}"));
    }
}

pub fn run(c: &mut Comm, t: &mut Tally, name: &str, op: CommOp<'_>) -> bool {
    // SAFETY: every buffer of `op` is a DevBuf of this comm's device, alive until the read-back.
    let r = unsafe { c.issue(&op) }.and_then(|_| c.synchronize());
    match r {
        Ok(()) => true,
        Err(e) => {
            t.error(name, e);
            false
        }
    }
}

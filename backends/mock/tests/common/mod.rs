//! Shared test helpers: aligned host buffers, a thread per rank, and a plain host reference of
//! the reductions that follows the rules documented in the crate (rank order, wrapping integers,
//! rounding to the type after every step (fp8 through half), Avg as premul by the type's
//! `float(1/n)` for floats, sum/n truncated for integers).
#![allow(dead_code)]

use half::{bf16, f16};
use oxccl_core::{CommOp, Communicator, DataType, Progress, RawBuf, RawBufMut, ReduceOp, Stream};
use oxccl_mock::fp8;
use oxccl_mock::{MockBackend, MockComm, MockStream};
use std::time::Duration;

/// Groups of the mock are per thread and span every mock communicator: any backend opens them.
pub fn groups() -> MockBackend {
    MockBackend::new()
}

/// A host buffer aligned to 8 bytes (every type's alignment).
pub struct Buf {
    words: Vec<u64>,
    bytes: usize,
}

impl Buf {
    pub fn from_bytes(b: &[u8]) -> Buf {
        let mut buf = Buf::filled(b.len(), 0);
        buf.bytes_mut().copy_from_slice(b);
        buf
    }
    pub fn filled(bytes: usize, v: u8) -> Buf {
        let mut words = vec![0u64; bytes.div_ceil(8).max(1)];
        for w in &mut words {
            *w = u64::from_ne_bytes([v; 8]);
        }
        Buf { words, bytes }
    }
    pub fn addr(&self) -> usize {
        self.words.as_ptr() as usize
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: words holds at least `bytes` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.bytes) }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.bytes) }
    }
    /// The whole buffer as `len` elements of `dt`, read-only.
    pub fn rd(&self, dt: DataType) -> RawBuf {
        RawBuf::new(
            if self.bytes == 0 { 0 } else { self.addr() },
            self.bytes / dt.size(),
        )
    }
    pub fn wr(&mut self, dt: DataType) -> RawBufMut {
        RawBufMut::new(
            if self.bytes == 0 { 0 } else { self.addr() },
            self.bytes / dt.size(),
        )
    }
    /// Elements `from..from+len` of `dt`, read-only.
    pub fn rd_at(&self, dt: DataType, from: usize, len: usize) -> RawBuf {
        RawBuf::new(self.addr() + from * dt.size(), len)
    }
    pub fn wr_at(&mut self, dt: DataType, from: usize, len: usize) -> RawBufMut {
        RawBufMut::new(self.addr() + from * dt.size(), len)
    }
}

/// `v` as the bytes of an i64 buffer (native endian, as the mock reads them).
pub fn i64s(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// `v` as the bytes of an i32 buffer.
pub fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// `v` as the bytes of an f32 buffer.
pub fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// An in-place all_reduce of the whole of `b` as elements of `dt`.
pub fn in_place(b: &mut Buf, dt: DataType, op: ReduceOp) -> CommOp<'static> {
    let r = b.wr(dt);
    CommOp::AllReduce {
        send: r.as_read(),
        recv: r,
        dtype: dt,
        op,
    }
}

/// Issues [`in_place`] of `b` on `c`, on `s`.
///
/// # Safety
/// `b` must stay alive and untouched until `s` is past the op (synchronized), or `c` aborted.
pub unsafe fn all_reduce_in_place(
    c: &MockComm,
    s: &MockStream,
    b: &mut Buf,
    dt: DataType,
    op: ReduceOp,
) -> oxccl_core::Result<()> {
    // SAFETY: the caller's promise above is `issue`'s contract for `b`.
    unsafe { c.issue(&in_place(b, dt, op), s) }
}

/// An in-place i64 sum all_reduce of `v` on `c` on a stream of its own, synchronized, then
/// polled: the reduced value, or the error issue or poll gave.
pub fn sum_i64(c: &MockComm, v: i64) -> oxccl_core::Result<i64> {
    let s = stream();
    let mut b = Buf::from_bytes(&i64s(&[v]));
    // SAFETY: `b` outlives the synchronize below.
    unsafe { all_reduce_in_place(c, &s, &mut b, DataType::Int64, ReduceOp::Sum) }?;
    s.synchronize()?;
    match c.poll()? {
        Progress::Done => Ok(i64::from_ne_bytes(b.bytes().try_into().unwrap_or([0; 8]))),
        Progress::InProgress => Err(oxccl_core::Error::invalid(
            "comm",
            format_args!("a communicator whose poll is Done after the sum"),
        )),
    }
}

/// Runs `f(rank, comm)` on a thread per rank and returns the results in rank order.
pub fn on_ranks<T: Send>(comms: Vec<MockComm>, f: impl Fn(MockComm) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms.into_iter().map(|c| s.spawn(|| f(c))).collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

pub fn stream() -> MockStream {
    MockStream::new().expect("stream")
}

/// Polls `f` until it is true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    f()
}

pub fn is_int(dt: DataType) -> bool {
    !dt.is_float()
}

fn signed(dt: DataType) -> bool {
    matches!(dt, DataType::Int8 | DataType::Int32 | DataType::Int64)
}

/// `x` wrapped to the integer type's range.
pub fn wrap(dt: DataType, x: i128) -> i128 {
    let bits = 8 * dt.size() as u32;
    let m = x.rem_euclid(1i128 << bits);
    if signed(dt) && m >= 1i128 << (bits - 1) {
        m - (1i128 << bits)
    } else {
        m
    }
}

/// `x` rounded to the float type (f64 carries every intermediate exactly or with one rounding).
pub fn rnd(dt: DataType, x: f64) -> f64 {
    match dt {
        DataType::Float16 => f16::from_f64(x).to_f64(),
        DataType::Bfloat16 => bf16::from_f64(x).to_f64(),
        DataType::Float32 => x as f32 as f64,
        DataType::Float64 => x,
        // NCCL's fp8 kernels compute in half and convert the half result to fp8.
        DataType::Float8E4M3 => {
            fp8::e4m3_to_f32(fp8::f32_to_e4m3(f16::from_f64(x).to_f32())) as f64
        }
        DataType::Float8E5M2 => {
            fp8::e5m2_to_f32(fp8::f32_to_e5m2(f16::from_f64(x).to_f32())) as f64
        }
        _ => x,
    }
}

/// NCCL's Avg factor for a float type: `float(1.0 / n)` converted to the type (f64: `1.0 / n`).
pub fn avg_factor(dt: DataType, n: usize) -> f64 {
    let f = (1.0 / n as f64) as f32;
    match dt {
        DataType::Float64 => 1.0 / n as f64,
        DataType::Float16 => f16::from_f32(f).to_f64(),
        DataType::Bfloat16 => bf16::from_f32(f).to_f64(),
        DataType::Float32 => f as f64,
        DataType::Float8E4M3 => fp8::e4m3_to_f32(fp8::f32_to_e4m3(f)) as f64,
        DataType::Float8E5M2 => fp8::e5m2_to_f32(fp8::f32_to_e5m2(f)) as f64,
        _ => f as f64,
    }
}

pub fn enc_int(dt: DataType, x: i128) -> Vec<u8> {
    (wrap(dt, x) as u128).to_le_bytes()[..dt.size()].to_vec()
}

pub fn dec_int(dt: DataType, b: &[u8]) -> i128 {
    let mut a = [0u8; 16];
    a[..b.len()].copy_from_slice(b);
    wrap(dt, u128::from_le_bytes(a) as i128)
}

pub fn enc_f(dt: DataType, x: f64) -> Vec<u8> {
    match dt {
        DataType::Float16 => f16::from_f64(x).to_ne_bytes().to_vec(),
        DataType::Bfloat16 => bf16::from_f64(x).to_ne_bytes().to_vec(),
        DataType::Float32 => (x as f32).to_ne_bytes().to_vec(),
        DataType::Float64 => x.to_ne_bytes().to_vec(),
        DataType::Float8E4M3 => vec![fp8::f32_to_e4m3(x as f32)],
        DataType::Float8E5M2 => vec![fp8::f32_to_e5m2(x as f32)],
        _ => unreachable!(),
    }
}

pub fn dec_f(dt: DataType, b: &[u8]) -> f64 {
    match dt {
        DataType::Float16 => f16::from_ne_bytes([b[0], b[1]]).to_f64(),
        DataType::Bfloat16 => bf16::from_ne_bytes([b[0], b[1]]).to_f64(),
        DataType::Float32 => f32::from_ne_bytes(b.try_into().unwrap()) as f64,
        DataType::Float64 => f64::from_ne_bytes(b.try_into().unwrap()),
        DataType::Float8E4M3 => fp8::e4m3_to_f32(b[0]) as f64,
        DataType::Float8E5M2 => fp8::e5m2_to_f32(b[0]) as f64,
        _ => unreachable!(),
    }
}

/// Element `i` of rank `r`'s input for case `salt`: small values, negative ones included.
pub fn gen(dt: DataType, r: usize, i: usize, salt: usize) -> Vec<u8> {
    let k = ((r * 7 + i * 3 + salt) % 11) as i128 - 5;
    if is_int(dt) {
        enc_int(dt, k)
    } else {
        enc_f(dt, k as f64 * 0.75)
    }
}

/// `len` elements of rank `r`'s input.
pub fn input(dt: DataType, r: usize, len: usize, salt: usize) -> Vec<u8> {
    (0..len).flat_map(|i| gen(dt, r, i, salt)).collect()
}

/// The reductions as the reference sees them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RefRed {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
    /// Each rank's factor (already a value of the type).
    PreMul,
}

/// The reference reduction of equally long inputs (rank order), `factors` per rank for PreMul.
pub fn reduce_ref(
    dt: DataType,
    red: RefRed,
    factors: &[f64],
    inputs: &[Vec<u8>],
    n: usize,
) -> Vec<u8> {
    let es = dt.size();
    let len = inputs[0].len() / es;
    let mut out = Vec::new();
    for i in 0..len {
        let el = |r: usize| &inputs[r][i * es..(i + 1) * es];
        if is_int(dt) {
            let xs: Vec<i128> = (0..inputs.len()).map(|r| dec_int(dt, el(r))).collect();
            let v = match red {
                RefRed::Sum => wrap(dt, xs.iter().sum()),
                RefRed::Prod => xs.iter().fold(1i128, |a, x| wrap(dt, a.wrapping_mul(*x))),
                RefRed::Min => *xs.iter().min().unwrap(),
                RefRed::Max => *xs.iter().max().unwrap(),
                RefRed::Avg => wrap(dt, xs.iter().sum()) / n as i128,
                RefRed::PreMul => unreachable!(),
            };
            out.extend(enc_int(dt, v));
        } else {
            let xs: Vec<f64> = (0..inputs.len()).map(|r| dec_f(dt, el(r))).collect();
            let fold =
                |f: &dyn Fn(f64, f64) -> f64| xs[1..].iter().fold(xs[0], |a, x| rnd(dt, f(a, *x)));
            let premul = |fs: &dyn Fn(usize) -> f64| {
                let mut a = rnd(dt, xs[0] * fs(0));
                for (r, x) in xs.iter().enumerate().skip(1) {
                    a = rnd(dt, a + rnd(dt, x * fs(r)));
                }
                a
            };
            let v = match red {
                RefRed::Sum => fold(&|a, b| a + b),
                RefRed::Prod => fold(&|a, b| a * b),
                RefRed::Min => fold(&f64::min),
                RefRed::Max => fold(&f64::max),
                RefRed::Avg => {
                    let f = avg_factor(dt, n);
                    premul(&|_| f)
                }
                RefRed::PreMul => premul(&|r| factors[r]),
            };
            out.extend(enc_f(dt, v));
        }
    }
    out
}

//! Element arithmetic of the reductions, per data type.
//!
//! The rules (and the test reference follows them exactly):
//! * Ranks are combined element by element in rank order: `((x0 ∘ x1) ∘ x2) ∘ …`.
//! * Integers wrap (`wrapping_add`, `wrapping_mul`) as NCCL's kernels do; Avg on integers is
//!   the wrapped sum divided by the number of ranks, truncating toward zero.
//! * f32 and f64 use their own IEEE arithmetic. float16 and bfloat16 widen both operands to f32,
//!   apply the operation and round back once per step; because f32 holds more than twice their
//!   precision, that equals arithmetic in the type's own precision, as NCCL's half kernels do
//!   (`__hadd`, `__hmul`).
//! * fp8 (e4m3, e5m2) is computed as NCCL's sm90 kernels do it: both operands widen to half, the
//!   half operation rounds to half, and the half result converts to fp8 with saturation to the
//!   largest finite value (`__nv_fp8_e4m3(__hadd(__half(x), __half(y)))`). Here: exact f32
//!   arithmetic, rounded to f16, then to fp8 by [`crate::fp8`].
//! * Min and Max follow IEEE minNum/maxNum (`f32::min`): a NaN loses against a number.
//! * Avg is what NCCL's `hostToDevRedOp` makes of `ncclAvg`: on every float type (fp8 included)
//!   a premul-sum whose factor is `float(1.0 / n)` converted to the type (`__float2half`,
//!   `__float2bfloat16`, `__nv_cvt_float_to_fp8(.., __NV_SATFINITE, ..)`; f64 uses `1.0 / n`);
//!   on integers the wrapped sum divided by `n`, truncating toward zero (`ncclDevSumPostDiv`).
//! * PreMulSum is `Σ factor_r × x_r` where each rank brings its own factor; every product and
//!   every partial sum is rounded to the type.

use crate::fp8;
use half::{bf16, f16};
use oxccl_core::DataType;

/// A reduction with its per-rank factors resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Red {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
    PreMulSum,
}

/// One element type's arithmetic.
trait Elem: Copy {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    /// `Some(1/n)` when Avg is a premul-sum for this type, `None` when it is sum-then-divide.
    fn avg_factor(n: u32) -> Option<Self>;
    fn div_n(self, n: u32) -> Self;
}

/// Fills a fixed array from a slice without any panic path (short input reads as zeros).
fn bytes<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    a
}

fn put(b: &mut [u8], src: &[u8]) {
    for (d, s) in b.iter_mut().zip(src) {
        *d = *s;
    }
}

macro_rules! int_elem {
    ($t:ty, $wide:ty) => {
        impl Elem for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes(b))
            }
            fn store(self, b: &mut [u8]) {
                put(b, &self.to_ne_bytes())
            }
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn min(self, o: Self) -> Self {
                Ord::min(self, o)
            }
            fn max(self, o: Self) -> Self {
                Ord::max(self, o)
            }
            fn avg_factor(_: u32) -> Option<Self> {
                None
            }
            fn div_n(self, n: u32) -> Self {
                // n >= 1 and the quotient's magnitude never exceeds self's, so this fits.
                ((self as $wide) / (Ord::max(n, 1) as $wide)) as $t
            }
        }
    };
}

int_elem!(i8, i64);
int_elem!(u8, u64);
int_elem!(i32, i64);
int_elem!(u32, u64);
int_elem!(i64, i64);
int_elem!(u64, u64);

macro_rules! native_float {
    ($t:ty, $avg:expr) => {
        impl Elem for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes(b))
            }
            fn store(self, b: &mut [u8]) {
                put(b, &self.to_ne_bytes())
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn min(self, o: Self) -> Self {
                <$t>::min(self, o)
            }
            fn max(self, o: Self) -> Self {
                <$t>::max(self, o)
            }
            fn avg_factor(n: u32) -> Option<Self> {
                Some($avg(n))
            }
            fn div_n(self, n: u32) -> Self {
                self / (Ord::max(n, 1) as $t)
            }
        }
    };
}

native_float!(f32, inv_f32);
native_float!(f64, |n: u32| 1.0 / f64::from(Ord::max(n, 1)));

/// `float(1.0 / n)`, the factor NCCL's Avg starts from (for f64 it uses `1.0 / n` itself).
fn inv_f32(n: u32) -> f32 {
    (1.0f64 / f64::from(Ord::max(n, 1))) as f32
}

macro_rules! via_f32 {
    ($t:ty, $to:expr, $from:expr, $avg:expr) => {
        impl Elem for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes(b))
            }
            fn store(self, b: &mut [u8]) {
                put(b, &self.to_ne_bytes())
            }
            fn add(self, o: Self) -> Self {
                $from($to(self) + $to(o))
            }
            fn mul(self, o: Self) -> Self {
                $from($to(self) * $to(o))
            }
            fn min(self, o: Self) -> Self {
                $from(f32::min($to(self), $to(o)))
            }
            fn max(self, o: Self) -> Self {
                $from(f32::max($to(self), $to(o)))
            }
            fn avg_factor(n: u32) -> Option<Self> {
                $avg(n)
            }
            fn div_n(self, n: u32) -> Self {
                $from($to(self) / Ord::max(n, 1) as f32)
            }
        }
    };
}

via_f32!(f16, f16::to_f32, f16::from_f32, |n: u32| Some(
    f16::from_f32(inv_f32(n))
));
via_f32!(bf16, bf16::to_f32, bf16::from_f32, |n: u32| Some(
    bf16::from_f32(inv_f32(n))
));

/// An e4m3 value, as its code.
#[derive(Clone, Copy)]
struct E4M3(u8);
/// An e5m2 value, as its code.
#[derive(Clone, Copy)]
struct E5M2(u8);

impl E4M3 {
    fn from_ne_bytes(b: [u8; 1]) -> Self {
        E4M3(b[0])
    }
    fn to_ne_bytes(self) -> [u8; 1] {
        [self.0]
    }
}
impl E5M2 {
    fn from_ne_bytes(b: [u8; 1]) -> Self {
        E5M2(b[0])
    }
    fn to_ne_bytes(self) -> [u8; 1] {
        [self.0]
    }
}

/// An operation's exact f32 result as NCCL's fp8 kernels store it: rounded to half first.
fn via_half(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

via_f32!(
    E4M3,
    |x: E4M3| fp8::e4m3_to_f32(x.0),
    |v: f32| E4M3(fp8::f32_to_e4m3(via_half(v))),
    |n: u32| Some(E4M3(fp8::f32_to_e4m3(inv_f32(n))))
);
via_f32!(
    E5M2,
    |x: E5M2| fp8::e5m2_to_f32(x.0),
    |v: f32| E5M2(fp8::f32_to_e5m2(via_half(v))),
    |n: u32| Some(E5M2(fp8::f32_to_e5m2(inv_f32(n))))
);

/// `o = f(o, x)` element-wise over byte buffers of `T` (generic, not `dyn`: the loop must
/// inline `f` to vectorize).
fn combine<T: Elem>(out: &mut [u8], x: &[u8], f: impl Fn(T, T) -> T) {
    for (o, c) in out.chunks_exact_mut(T::SIZE).zip(x.chunks_exact(T::SIZE)) {
        f(T::load(o), T::load(c)).store(o);
    }
}

thread_local! {
    /// The last result buffer this thread gave back ([`recycle`]): a large result reuses its
    /// pages instead of faulting fresh ones in every call.
    static SPARE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The largest buffer kept for reuse per thread.
const SPARE_MAX: usize = 256 << 20;

/// Gives a result of [`reduce`] back once its outputs were written.
pub(crate) fn recycle(v: Vec<u8>) {
    if v.capacity() <= SPARE_MAX {
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            if v.capacity() > s.capacity() {
                *s = v;
            }
        });
    }
}

/// Combines element-wise in rank order (`((x0 ∘ x1) ∘ x2) ∘ …`), one rank at a time over the
/// whole buffer: the same result as element by element, and loops the compiler vectorizes
/// (the mock's bandwidth across processes rests on them).
fn reduce_as<T: Elem>(
    red: Red,
    factors: &[Vec<u8>],
    inputs: &[&[u8]],
    n: u32,
) -> oxccl_core::Result<Vec<u8>> {
    let first = inputs.first().copied().unwrap_or(&[]);
    let len = first.len() / T::SIZE * T::SIZE;
    let mut out = SPARE.with(|s| std::mem::take(&mut *s.borrow_mut()));
    out.clear();
    // Reserved before any input is read: a length the mock cannot allocate is an error.
    out.try_reserve_exact(len).map_err(|_| {
        let code = oxccl_core::ResultCode::SYSTEM_ERROR;
        oxccl_core::Error::Backend {
            code,
            text: oxccl_core::text::text_str(crate::messages::code_text(code)),
            last: oxccl_core::text!("cannot allocate {len} bytes for the mock's reduction result"),
        }
    })?;
    out.extend_from_slice(first.get(..len).unwrap_or(first));
    let rest = inputs.iter().skip(1);
    // Σ f_r × x_r, every product and partial sum rounded to the type.
    let premul = |out: &mut Vec<u8>, fac: &dyn Fn(usize) -> Option<T>| {
        if let Some(f0) = fac(0) {
            out.chunks_exact_mut(T::SIZE)
                .for_each(|o| T::load(o).mul(f0).store(o));
        }
        for (r, x) in inputs.iter().enumerate().skip(1) {
            if let Some(f) = fac(r) {
                combine::<T>(out, x, |a, b| a.add(b.mul(f)));
            }
        }
    };
    match red {
        Red::Prod => rest.for_each(|x| combine::<T>(&mut out, x, T::mul)),
        Red::Min => rest.for_each(|x| combine::<T>(&mut out, x, T::min)),
        Red::Max => rest.for_each(|x| combine::<T>(&mut out, x, T::max)),
        Red::Sum => rest.for_each(|x| combine::<T>(&mut out, x, T::add)),
        Red::Avg => match T::avg_factor(n) {
            Some(f) => premul(&mut out, &|_| Some(f)),
            None => {
                rest.for_each(|x| combine::<T>(&mut out, x, T::add));
                out.chunks_exact_mut(T::SIZE)
                    .for_each(|o| T::load(o).div_n(n).store(o));
            }
        },
        Red::PreMulSum => {
            let fac: Vec<T> = factors.iter().map(|f| T::load(f)).collect();
            premul(&mut out, &|r| fac.get(r).copied());
        }
    }
    Ok(out)
}

/// Reduces equally long inputs (one per rank, in rank order) of `dt`; `factors` holds each
/// rank's premul-sum factor as one element of `dt` (empty for other reductions); `n` is the
/// number of ranks Avg divides by. Error: `Backend { SystemError }` when the result cannot be
/// allocated (nothing is read then).
pub(crate) fn reduce(
    dt: DataType,
    red: Red,
    factors: &[Vec<u8>],
    inputs: &[&[u8]],
    n: u32,
) -> oxccl_core::Result<Vec<u8>> {
    match dt {
        DataType::Int8 => reduce_as::<i8>(red, factors, inputs, n),
        DataType::Uint8 => reduce_as::<u8>(red, factors, inputs, n),
        DataType::Int32 => reduce_as::<i32>(red, factors, inputs, n),
        DataType::Uint32 => reduce_as::<u32>(red, factors, inputs, n),
        DataType::Int64 => reduce_as::<i64>(red, factors, inputs, n),
        DataType::Uint64 => reduce_as::<u64>(red, factors, inputs, n),
        DataType::Float16 => reduce_as::<f16>(red, factors, inputs, n),
        DataType::Float32 => reduce_as::<f32>(red, factors, inputs, n),
        DataType::Float64 => reduce_as::<f64>(red, factors, inputs, n),
        DataType::Bfloat16 => reduce_as::<bf16>(red, factors, inputs, n),
        DataType::Float8E4M3 => reduce_as::<E4M3>(red, factors, inputs, n),
        DataType::Float8E5M2 => reduce_as::<E5M2>(red, factors, inputs, n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v<T: Copy>(xs: &[T], f: fn(T) -> Vec<u8>) -> Vec<u8> {
        xs.iter().flat_map(|x| f(*x)).collect()
    }

    #[test]
    fn integers_wrap_and_avg_truncates() {
        let a = v(&[100i8, -7], |x| x.to_ne_bytes().to_vec());
        let b = v(&[100i8, 2], |x| x.to_ne_bytes().to_vec());
        let s = reduce(DataType::Int8, Red::Sum, &[], &[&a[..], &b[..]], 2).unwrap();
        assert_eq!(s, v(&[-56i8, -5], |x| x.to_ne_bytes().to_vec()));
        let avg = reduce(DataType::Int8, Red::Avg, &[], &[&a[..], &b[..]], 2).unwrap();
        assert_eq!(avg, v(&[-28i8, -2], |x| x.to_ne_bytes().to_vec()));
    }

    #[test]
    fn fp8_avg_is_premul_by_the_fp8_factor_like_nccl() {
        // 1/3 in e4m3 is 0.34375: 7 × 0.34375 = 2.40625 → 2.5, then 2.5 + 2.5 + 2.5 = 7.5,
        // where sum-then-divide would give 21 / 3 = 7.
        let x = [fp8::f32_to_e4m3(7.0)];
        let r = reduce(
            DataType::Float8E4M3,
            Red::Avg,
            &[],
            &[&x[..], &x[..], &x[..]],
            3,
        )
        .unwrap();
        assert_eq!(fp8::e4m3_to_f32(r[0]), 7.5);
        // f64 Avg multiplies by the double 1/3, f32 by float(1/3).
        let d = 3.0f64.to_ne_bytes().to_vec();
        let r = reduce(
            DataType::Float64,
            Red::Avg,
            &[],
            &[&d[..], &d[..], &d[..]],
            3,
        )
        .unwrap();
        let third = 1.0f64 / 3.0;
        assert_eq!(
            r,
            ((3.0 * third + 3.0 * third) + 3.0 * third)
                .to_ne_bytes()
                .to_vec()
        );
    }

    #[test]
    fn premul_uses_each_ranks_factor() {
        let x = v(&[1.0f32, 2.0], |x| x.to_ne_bytes().to_vec());
        let f = [2.0f32.to_ne_bytes().to_vec(), 3.0f32.to_ne_bytes().to_vec()];
        let r = reduce(DataType::Float32, Red::PreMulSum, &f, &[&x[..], &x[..]], 2).unwrap();
        assert_eq!(r, v(&[5.0f32, 10.0], |x| x.to_ne_bytes().to_vec()));
    }
}

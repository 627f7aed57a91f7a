//! Element values for `perf -c` and `check`: every NCCL type to and from f64, and the
//! tolerance a reduction in that type may be off by.

use oxccl::Element;

/// An element type the tool fills and checks.
pub trait Elem: Element + PartialEq {
    /// `v` in this type (rounded, saturated or wrapped as the type converts).
    fn of(v: f64) -> Self;
    /// The value as f64.
    fn get(self) -> f64;
}

macro_rules! elem_as {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn of(v: f64) -> Self { v as $t }
            fn get(self) -> f64 { self as f64 }
        }
    )*};
}
elem_as!(i8, u8, i32, u32, i64, u64, f32, f64);

impl Elem for half::f16 {
    fn of(v: f64) -> Self {
        half::f16::from_f64(v)
    }
    fn get(self) -> f64 {
        self.to_f64()
    }
}

impl Elem for half::bf16 {
    fn of(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
    fn get(self) -> f64 {
        self.to_f64()
    }
}

impl Elem for float8::F8E4M3 {
    fn of(v: f64) -> Self {
        float8::F8E4M3::from_f64(v)
    }
    fn get(self) -> f64 {
        self.to_f64()
    }
}

impl Elem for float8::F8E5M2 {
    fn of(v: f64) -> Self {
        float8::F8E5M2::from_f64(v)
    }
    fn get(self) -> f64 {
        self.to_f64()
    }
}

/// Runs `$body` with `$t` bound to the Rust type of the [`crate::ops::Dtype`] `$d`.
macro_rules! with_dtype {
    ($d:expr, $t:ident => $body:expr) => {{
        use $crate::ops::Dtype;
        match $d {
            Dtype::Int8 => {
                type $t = i8;
                $body
            }
            Dtype::Uint8 => {
                type $t = u8;
                $body
            }
            Dtype::Int32 => {
                type $t = i32;
                $body
            }
            Dtype::Uint32 => {
                type $t = u32;
                $body
            }
            Dtype::Int64 => {
                type $t = i64;
                $body
            }
            Dtype::Uint64 => {
                type $t = u64;
                $body
            }
            Dtype::Float16 => {
                type $t = half::f16;
                $body
            }
            Dtype::Float32 => {
                type $t = f32;
                $body
            }
            Dtype::Float64 => {
                type $t = f64;
                $body
            }
            Dtype::Bfloat16 => {
                type $t = half::bf16;
                $body
            }
            Dtype::F8e4m3 => {
                type $t = float8::F8E4M3;
                $body
            }
            Dtype::F8e5m2 => {
                type $t = float8::F8E5M2;
                $body
            }
        }
    }};
}

pub(crate) use with_dtype;

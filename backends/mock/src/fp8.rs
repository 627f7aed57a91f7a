//! Exact conversions between the two 8-bit float formats and `f32`.
//!
//! * e4m3 is the "fn" variant NCCL and CUDA use: bias 7, no infinities, a single NaN pattern
//!   per sign (`S.1111.111`), largest finite value 448.
//! * e5m2 follows IEEE 754 rules: bias 15, infinities and NaNs, largest finite value 57344.
//!
//! `f32 → fp8` rounds to nearest, ties to even, and saturates like CUDA's `__nv_cvt_float_to_fp8`
//! with `__NV_SATFINITE`: any finite value beyond the largest finite one and any infinity
//! become the largest finite value of that sign; NaN stays NaN (sign kept). `fp8 → f32` is exact.

/// The shape of one 8-bit float format.
struct Format {
    /// Mantissa bits.
    mant: u32,
    /// Exponent bias.
    bias: i32,
    /// The largest finite magnitude, as a code without its sign bit.
    max_code: u32,
    /// The NaN code written (without its sign bit).
    nan: u8,
    /// Whether the all-ones exponent means infinity/NaN (IEEE) rather than ordinary values.
    ieee: bool,
}

const E4M3: Format = Format {
    mant: 3,
    bias: 7,
    max_code: 0x7E,
    nan: 0x7F,
    ieee: false,
};
const E5M2: Format = Format {
    mant: 2,
    bias: 15,
    max_code: 0x7B,
    nan: 0x7F,
    ieee: true,
};

/// `2^k` for `k` in the normal `f32` range, built from bits so it is exact.
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// `m / 2^shift` rounded to nearest, ties to even (`1 <= shift <= 24`).
fn round_rne(m: u32, shift: u32) -> u32 {
    let q = m >> shift;
    let r = m & ((1u32 << shift) - 1);
    let half = 1u32 << (shift - 1);
    if r > half || (r == half && q & 1 == 1) {
        q + 1
    } else {
        q
    }
}

fn decode(f: &Format, code: u8) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let mag = u32::from(code & 0x7F);
    let e = (mag >> f.mant) as i32;
    let m = mag & ((1 << f.mant) - 1);
    let top = (1i32 << (7 - f.mant)) - 1;
    if e == top {
        if f.ieee {
            return if m == 0 {
                sign * f32::INFINITY
            } else {
                f32::NAN
            };
        }
        if m == (1 << f.mant) - 1 {
            return f32::NAN;
        }
    }
    let scale = f.mant as i32;
    let v = if e == 0 {
        m as f32 * pow2(1 - f.bias - scale)
    } else {
        ((1 << f.mant) + m) as f32 * pow2(e - f.bias - scale)
    };
    sign * v
}

fn encode(f: &Format, x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    if x.is_nan() {
        return sign | f.nan;
    }
    if x.is_infinite() {
        return sign | f.max_code as u8;
    }
    let exp = ((bits >> 23) & 0xFF) as i32;
    if exp == 0 {
        // f32 zeros and subnormals are far below half the smallest fp8 subnormal.
        return sign;
    }
    let sig = (bits & 0x7F_FFFF) | 0x80_0000;
    let e = exp - 127;
    let emin = 1 - f.bias;
    let code = if e >= emin {
        let mut q = round_rne(sig, 23 - f.mant);
        let mut e = e;
        if q == 1 << (f.mant + 1) {
            // Rounding carried into the next binade.
            q >>= 1;
            e += 1;
        }
        (((e + f.bias) as u32) << f.mant) | (q - (1 << f.mant))
    } else {
        let shift = (23 - f.mant) as i32 + (emin - e);
        if shift >= 25 {
            0
        } else {
            // A result of 2^mant is the smallest normal number, which this encodes as is.
            round_rne(sig, shift as u32)
        }
    };
    sign | code.min(f.max_code) as u8
}

/// The value of an e4m3 (fn) code.
pub fn e4m3_to_f32(code: u8) -> f32 {
    decode(&E4M3, code)
}

/// The e4m3 (fn) code nearest to `x` (ties to even, saturating to ±448, NaN kept).
pub fn f32_to_e4m3(x: f32) -> u8 {
    encode(&E4M3, x)
}

/// The value of an e5m2 code.
pub fn e5m2_to_f32(code: u8) -> f32 {
    decode(&E5M2, code)
}

/// The e5m2 code nearest to `x` (ties to even, saturating to ±57344, NaN kept).
pub fn f32_to_e5m2(x: f32) -> u8 {
    encode(&E5M2, x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nearest code by brute force over every finite code: an independent reference.
    fn nearest(x: f32, dec: fn(u8) -> f32) -> u8 {
        let mut best: Option<(f64, u8)> = None;
        for c in 0..=255u8 {
            let v = dec(c);
            if !v.is_finite() {
                continue;
            }
            let d = (f64::from(v) - f64::from(x)).abs();
            let better = match best {
                None => true,
                Some((bd, bc)) => d < bd || (d == bd && c & 1 == 0 && bc & 1 == 1),
            };
            if better {
                best = Some((d, c));
            }
        }
        best.map(|b| b.1).unwrap_or(0)
    }

    #[test]
    fn every_code_round_trips() {
        for c in 0..=255u8 {
            for (dec, enc) in [
                (e4m3_to_f32 as fn(u8) -> f32, f32_to_e4m3 as fn(f32) -> u8),
                (e5m2_to_f32, f32_to_e5m2),
            ] {
                let v = dec(c);
                if v.is_nan() {
                    assert!(dec(enc(v)).is_nan());
                } else if v.is_infinite() {
                    assert!(dec(enc(v)).is_finite());
                } else {
                    assert_eq!(enc(v), c, "code {c:#x} value {v}");
                }
            }
        }
    }

    #[test]
    fn known_values() {
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert!(e4m3_to_f32(0x7F).is_nan());
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(f32_to_e4m3(1000.0), 0x7E);
        assert_eq!(f32_to_e4m3(f32::NEG_INFINITY), 0xFE);
        assert_eq!(e5m2_to_f32(0x7B), 57344.0);
        assert_eq!(e5m2_to_f32(0x7C), f32::INFINITY);
        assert_eq!(f32_to_e5m2(1e9), 0x7B);
        assert_eq!(f32_to_e5m2(-0.0), 0x80);
        // 1 + 1/16 is halfway between 1 and 1.125 in e4m3: ties to even (1.0).
        assert_eq!(f32_to_e4m3(1.0625), 0x38);
        assert_eq!(f32_to_e4m3(1.1875), 0x3A);
    }

    #[test]
    fn every_exponent_and_mantissa_edge_encodes_without_overflow() {
        // Each f32 exponent (zeros, subnormals, normals, inf/NaN) with mantissa edges and both
        // signs: `encode`'s shifts and sums are exercised over the whole input range.
        for exp in 0u32..=0xFF {
            for mant in [0u32, 1, 0x3F_FFFF, 0x40_0000, 0x7F_FFFE, 0x7F_FFFF] {
                for sign in [0u32, 1 << 31] {
                    let x = f32::from_bits(sign | (exp << 23) | mant);
                    for (enc, dec) in [
                        (f32_to_e4m3 as fn(f32) -> u8, e4m3_to_f32 as fn(u8) -> f32),
                        (f32_to_e5m2, e5m2_to_f32),
                    ] {
                        let back = dec(enc(x));
                        assert!(x.is_nan() == back.is_nan(), "{x:e}");
                        if !x.is_nan() {
                            assert!(back.abs() <= 57344.0, "{x:e} -> {back}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn rounding_matches_brute_force() {
        let mut x = -600.0f32;
        while x < 600.0 {
            assert_eq!(
                e4m3_to_f32(f32_to_e4m3(x)),
                e4m3_to_f32(nearest(x, e4m3_to_f32)),
                "{x}"
            );
            assert_eq!(
                e5m2_to_f32(f32_to_e5m2(x)),
                e5m2_to_f32(nearest(x, e5m2_to_f32)),
                "{x}"
            );
            x += 0.037;
        }
        for k in -20..8 {
            for m in 0..64 {
                let x = (1.0 + m as f32 / 64.0) * 2f32.powi(k);
                assert_eq!(
                    e4m3_to_f32(f32_to_e4m3(x)),
                    e4m3_to_f32(nearest(x, e4m3_to_f32)),
                    "{x}"
                );
                assert_eq!(
                    e5m2_to_f32(f32_to_e5m2(x)),
                    e5m2_to_f32(nearest(x, e5m2_to_f32)),
                    "{x}"
                );
            }
        }
    }
}

//! Host encodings of every NCCL type and the reference results the GPU must match.

use oxccl::{DataType, ReduceOp};

fn fp8_decode(bits: u8, e4m3: bool) -> f64 {
    let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
    let (ebits, mbits, bias) = if e4m3 { (4, 3, 7) } else { (5, 2, 15) };
    let e = ((bits >> mbits) & ((1 << ebits) - 1)) as i32;
    let m = (bits & ((1 << mbits) - 1)) as f64;
    let scale = (1u32 << mbits) as f64;
    if e4m3 && e == 15 && m == 7.0 {
        return f64::NAN;
    }
    if !e4m3 && e == 31 {
        return if m == 0.0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    if e == 0 {
        sign * (m / scale) * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + m / scale) * 2f64.powi(e - bias)
    }
}

fn fp8_encode(v: f64, e4m3: bool) -> u8 {
    // Nearest finite code, ties to even mantissa: a brute-force search is plenty for tests.
    let mut best = 0u8;
    let mut best_err = f64::INFINITY;
    for b in 0..=255u8 {
        let x = fp8_decode(b, e4m3);
        if !x.is_finite() {
            continue;
        }
        let err = (x - v).abs();
        if err < best_err || (err == best_err && b & 1 == 0) {
            best = b;
            best_err = err;
        }
    }
    best
}

/// `vals` as the bytes of `dt` elements.
pub fn encode(dt: DataType, vals: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(vals.len() * dt.size());
    for &v in vals {
        match dt {
            DataType::Int8 => out.push(v as i64 as i8 as u8),
            DataType::Uint8 => out.push(v as i64 as u8),
            DataType::Int32 => out.extend((v as i64 as i32).to_ne_bytes()),
            DataType::Uint32 => out.extend((v as i64 as u32).to_ne_bytes()),
            DataType::Int64 => out.extend((v as i64).to_ne_bytes()),
            DataType::Uint64 => out.extend((v as i64 as u64).to_ne_bytes()),
            DataType::Float16 => out.extend(half::f16::from_f64(v).to_bits().to_ne_bytes()),
            DataType::Bfloat16 => out.extend(half::bf16::from_f64(v).to_bits().to_ne_bytes()),
            DataType::Float32 => out.extend((v as f32).to_ne_bytes()),
            DataType::Float64 => out.extend(v.to_ne_bytes()),
            DataType::Float8E4M3 => out.push(fp8_encode(v, true)),
            DataType::Float8E5M2 => out.push(fp8_encode(v, false)),
        }
    }
    out
}

/// The values of `bytes` read as `dt` elements.
pub fn decode(dt: DataType, bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(dt.size())
        .map(|c| match dt {
            DataType::Int8 => c[0] as i8 as f64,
            DataType::Uint8 => c[0] as f64,
            DataType::Int32 => i32::from_ne_bytes(c.try_into().unwrap()) as f64,
            DataType::Uint32 => u32::from_ne_bytes(c.try_into().unwrap()) as f64,
            DataType::Int64 => i64::from_ne_bytes(c.try_into().unwrap()) as f64,
            DataType::Uint64 => u64::from_ne_bytes(c.try_into().unwrap()) as f64,
            DataType::Float16 => {
                half::f16::from_bits(u16::from_ne_bytes(c.try_into().unwrap())).to_f64()
            }
            DataType::Bfloat16 => {
                half::bf16::from_bits(u16::from_ne_bytes(c.try_into().unwrap())).to_f64()
            }
            DataType::Float32 => f32::from_ne_bytes(c.try_into().unwrap()) as f64,
            DataType::Float64 => f64::from_ne_bytes(c.try_into().unwrap()),
            DataType::Float8E4M3 => fp8_decode(c[0], true),
            DataType::Float8E5M2 => fp8_decode(c[0], false),
        })
        .collect()
}

/// Rank `r`'s input element `i` for `op`: small integers every type holds exactly, and whose
/// sums and products over 8 ranks stay exact in every type but fp8.
pub fn input(op: Option<&ReduceOp>, r: u32, i: usize) -> f64 {
    match op {
        Some(ReduceOp::Prod) => 1.0 + f64::from((i + r as usize).is_multiple_of(7) as u8),
        _ => ((i * 3 + r as usize * 5) % 3) as f64,
    }
}

/// The reduction of element `i` over `n` ranks, as NCCL computes it.
pub fn reduced(dt: DataType, op: &ReduceOp, n: u32, i: usize, factor: f64) -> f64 {
    let vals: Vec<f64> = (0..n).map(|r| input(Some(op), r, i)).collect();
    let sum: f64 = vals.iter().sum();
    match op {
        ReduceOp::Sum => sum,
        ReduceOp::Prod => vals.iter().product(),
        ReduceOp::Min => vals.iter().cloned().fold(f64::INFINITY, f64::min),
        ReduceOp::Max => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Avg if !dt.is_float() => (sum as i64 / i64::from(n)) as f64,
        ReduceOp::Avg => sum / f64::from(n),
        ReduceOp::PreMulSum(_) => sum * factor,
    }
}

/// Whether `got` is `want` within what `dt` can hold.
pub fn close(dt: DataType, got: f64, want: f64) -> bool {
    let (rel, abs) = match dt {
        DataType::Float8E4M3 | DataType::Float8E5M2 => (0.25, 1.0),
        DataType::Float16 => (2e-3, 1e-3),
        DataType::Bfloat16 => (1.6e-2, 1e-2),
        DataType::Float32 => (1e-6, 1e-6),
        DataType::Float64 => (1e-12, 1e-12),
        _ => (0.0, 0.0),
    };
    (got - want).abs() <= abs + rel * want.abs()
}

/// Whether NCCL reduces `dt` on this library (fp8 from 2.24.3; every type moves on any
/// library: fp8 travels as uint8 before).
pub fn reduces(fs: &oxccl::FeatureSet, dt: DataType) -> bool {
    !dt.is_fp8() || fs.has(oxccl::Feature::Float8)
}

#[test]
fn fp8_round_trips_small_integers() {
    for v in 0..=16 {
        assert_eq!(
            decode(
                DataType::Float8E4M3,
                &encode(DataType::Float8E4M3, &[v as f64])
            )[0],
            v as f64
        );
    }
    for v in [0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0] {
        assert_eq!(
            decode(DataType::Float8E5M2, &encode(DataType::Float8E5M2, &[v]))[0],
            v
        );
    }
    assert_eq!(decode(DataType::Float8E4M3, &[0x7e])[0], 448.0);
}

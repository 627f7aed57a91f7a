//! Reduction operators, premul-sum scalars included.

use crate::dtype::DataType;
use crate::version::Version;
use core::fmt;

/// A premul-sum factor held on the host, typed like the buffer it scales.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HostScalar {
    /// An IEEE half, as its bits.
    F16(u16),
    /// A bfloat16, as its bits.
    Bf16(u16),
    /// A 32-bit float.
    F32(f32),
    /// A 64-bit float.
    F64(f64),
}

impl HostScalar {
    /// The element type of this factor.
    pub const fn dtype(&self) -> DataType {
        match self {
            HostScalar::F16(_) => DataType::Float16,
            HostScalar::Bf16(_) => DataType::Bfloat16,
            HostScalar::F32(_) => DataType::Float32,
            HostScalar::F64(_) => DataType::Float64,
        }
    }

    /// The factor's bytes as NCCL reads them from host memory (native endian).
    pub fn to_ne_bytes(&self) -> ([u8; 8], usize) {
        let mut out = [0u8; 8];
        match self {
            HostScalar::F16(b) | HostScalar::Bf16(b) => {
                out[..2].copy_from_slice(&b.to_ne_bytes());
                (out, 2)
            }
            HostScalar::F32(v) => {
                out[..4].copy_from_slice(&v.to_ne_bytes());
                (out, 4)
            }
            HostScalar::F64(v) => {
                out.copy_from_slice(&v.to_ne_bytes());
                (out, 8)
            }
        }
    }
}

/// Where a premul-sum factor lives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// Read from host memory when the operator is created (`ncclScalarHostImmediate`).
    Host(HostScalar),
    /// Read from device memory (one element of the buffer's type) when the collective runs
    /// (`ncclScalarDevice`). The address must stay valid until the collective completes.
    Device {
        /// Device (or, for the mock, host) address of one element of the buffer's type.
        addr: usize,
    },
}

/// A reduction: NCCL's built-in operators plus premul-sum (`sum(factor × x)`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReduceOp {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMin`.
    Min,
    /// `ncclMax`.
    Max,
    /// `ncclAvg` (NCCL 2.10+): sum divided by the number of ranks.
    Avg,
    /// Premul-sum (NCCL 2.11+): each rank's input is multiplied by the factor, then summed.
    PreMulSum(Scalar),
}

impl ReduceOp {
    /// The built-in operators, premul-sum aside.
    pub const BUILTIN: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// NCCL's `ncclRedOp_t` for a built-in operator; `None` for premul-sum, whose code is
    /// created per communicator.
    pub const fn builtin_code(&self) -> Option<i32> {
        match self {
            ReduceOp::Sum => Some(0),
            ReduceOp::Prod => Some(1),
            ReduceOp::Max => Some(2),
            ReduceOp::Min => Some(3),
            ReduceOp::Avg => Some(4),
            ReduceOp::PreMulSum(_) => None,
        }
    }

    /// The first NCCL version with this operator.
    pub const fn since(&self) -> Version {
        match self {
            ReduceOp::Avg => Version::new(2, 10, 3),
            ReduceOp::PreMulSum(_) => Version::new(2, 11, 4),
            _ => Version::new(2, 3, 5),
        }
    }

    /// Short lower-case name ("sum", "premul_sum").
    pub const fn name(&self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
            ReduceOp::PreMulSum(_) => "premul_sum",
        }
    }
}

impl DataType {
    /// Whether NCCL applies `op` to this type. Premul-sum is limited to the floating types
    /// with a host representation (f16, bf16, f32, f64), as PyTorch does; every other built-in op
    /// applies to every type (fp8 reductions exist since 2.24, gated by version elsewhere).
    pub fn supports(self, op: &ReduceOp) -> bool {
        match op {
            ReduceOp::PreMulSum(_) => matches!(
                self,
                DataType::Float16 | DataType::Bfloat16 | DataType::Float32 | DataType::Float64
            ),
            _ => true,
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_codes_are_ncclredop_t() {
        let codes: [i32; 5] = [0, 1, 3, 2, 4];
        for (op, c) in ReduceOp::BUILTIN.iter().zip(codes) {
            assert_eq!(op.builtin_code(), Some(c), "{op}");
        }
        assert_eq!(
            ReduceOp::PreMulSum(Scalar::Device { addr: 8 }).builtin_code(),
            None
        );
    }

    #[test]
    fn host_scalar_bytes() {
        let (b, n) = HostScalar::F64(1.5).to_ne_bytes();
        assert_eq!(n, 8);
        assert_eq!(f64::from_ne_bytes(b), 1.5);
        let (b, n) = HostScalar::F16(0x3c00).to_ne_bytes();
        assert_eq!(n, 2);
        assert_eq!(u16::from_ne_bytes([b[0], b[1]]), 0x3c00);
        assert_eq!(HostScalar::Bf16(0).dtype(), DataType::Bfloat16);
    }

    #[test]
    fn premul_sum_only_on_host_floats() {
        let op = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(2.0)));
        assert!(DataType::Float32.supports(&op));
        assert!(!DataType::Int32.supports(&op));
        assert!(!DataType::Float8E4M3.supports(&op));
        assert!(DataType::Int32.supports(&ReduceOp::Avg));
    }
}

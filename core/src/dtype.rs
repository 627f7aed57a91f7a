//! NCCL's element types.

use crate::version::Version;
use core::fmt;

/// An element type NCCL can move (and, for most, reduce). Values are NCCL's `ncclDataType_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum DataType {
    /// `ncclInt8` (also carries bool and raw bytes).
    Int8 = 0,
    /// `ncclUint8`.
    Uint8 = 1,
    /// `ncclInt32`.
    Int32 = 2,
    /// `ncclUint32`.
    Uint32 = 3,
    /// `ncclInt64`.
    Int64 = 4,
    /// `ncclUint64`.
    Uint64 = 5,
    /// `ncclFloat16` (IEEE half).
    Float16 = 6,
    /// `ncclFloat32`.
    Float32 = 7,
    /// `ncclFloat64`.
    Float64 = 8,
    /// `ncclBfloat16` (NCCL 2.10+).
    Bfloat16 = 9,
    /// `ncclFloat8e4m3` (NCCL 2.24.3+; moved as `ncclUint8` before, reduced only from it).
    Float8E4M3 = 10,
    /// `ncclFloat8e5m2` (NCCL 2.24.3+; moved as `ncclUint8` before, reduced only from it).
    Float8E5M2 = 11,
}

impl DataType {
    /// Every type, in NCCL's order.
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8E4M3,
        DataType::Float8E5M2,
    ];

    /// NCCL's integer code for this type.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The type with NCCL code `code`, if there is one.
    pub fn from_code(code: i32) -> Option<DataType> {
        Self::ALL.iter().copied().find(|t| t.code() == code)
    }

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8E4M3 | DataType::Float8E5M2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Bfloat16
                | DataType::Float8E4M3
                | DataType::Float8E5M2
        )
    }

    /// Whether this is one of the 8-bit float types.
    pub const fn is_fp8(self) -> bool {
        matches!(self, DataType::Float8E4M3 | DataType::Float8E5M2)
    }

    /// The first NCCL version that knows this type.
    pub const fn since(self) -> Version {
        match self {
            DataType::Bfloat16 => Version::new(2, 10, 3),
            DataType::Float8E4M3 | DataType::Float8E5M2 => Version::new(2, 24, 3),
            _ => Version::new(2, 3, 5),
        }
    }

    /// Short lower-case name ("float32").
    pub const fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Float16 => "float16",
            DataType::Float32 => "float32",
            DataType::Float64 => "float64",
            DataType::Bfloat16 => "bfloat16",
            DataType::Float8E4M3 => "float8_e4m3",
            DataType::Float8E5M2 => "float8_e5m2",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_none() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_code(t.code()), Some(t));
        }
        assert_eq!(DataType::from_code(12), None);
        assert_eq!(DataType::from_code(-1), None);
        assert_eq!(DataType::from_code(i32::MAX), None);
    }

    #[test]
    fn sizes_are_powers_of_two() {
        // check::buffers relies on it to test alignment with a mask.
        assert!(DataType::ALL.iter().all(|t| t.size().is_power_of_two()));
    }

    #[test]
    fn sizes_match_nccl() {
        let sizes: [usize; 12] = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1];
        for (t, s) in DataType::ALL.iter().zip(sizes) {
            assert_eq!(t.size(), s, "{t}");
        }
    }
}

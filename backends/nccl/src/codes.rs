//! The values NCCL is called with for an operation: its `ncclDataType_t` (for the element type
//! the loaded library takes: fp8 that is only moved goes as `ncclUint8` to a library without
//! fp8) and a built-in operator's `ncclRedOp_t`. One mapping: the backend's `issue` calls NCCL
//! with these, and so does code that calls NCCL's function pointers itself (the `oxccl` tool's
//! raw layer), so the two never drift apart.

use oxccl_core::{check, CommOp, DataType, Error, FeatureSet, ReduceOp, Result};

/// `dtype`'s `ncclDataType_t`.
pub const fn data_type(dtype: DataType) -> i32 {
    dtype.code()
}

/// A built-in operator's `ncclRedOp_t`; `None` for premul-sum, whose value NCCL creates per
/// communicator (`ncclRedOpCreatePreMulSum`).
pub const fn builtin_red_op(op: &ReduceOp) -> Option<i32> {
    op.builtin_code()
}

/// `op` as a library with `features` is called with it: the same buffers and counts, its
/// element type the one the library takes ([`check::wire_op`]).
pub fn wire<'a>(op: &CommOp<'a>, features: &FeatureSet) -> CommOp<'a> {
    check::wire_op(op, features)
}

/// NCCL's values for one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpCodes {
    /// The `ncclDataType_t` of its wire element type; `None` for an operation without one.
    pub dtype: Option<i32>,
    /// The `ncclRedOp_t` of its operator; `None` for an operation that does not reduce.
    pub red_op: Option<i32>,
}

/// The values a library with `features` is called with for `op`. A premul-sum operator is an
/// error: its `ncclRedOp_t` is made on a communicator, not mapped.
pub fn op_codes(op: &CommOp<'_>, features: &FeatureSet) -> Result<OpCodes> {
    let red_op = match op.reduce_op() {
        Some(r) => Some(builtin_red_op(r).ok_or_else(|| {
            Error::invalid(
                "op",
                format_args!("a built-in operator (premul-sum's value is made on a communicator)"),
            )
        })?),
        None => None,
    };
    Ok(OpCodes {
        dtype: wire(op, features).dtype().map(data_type),
        red_op,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::{RawBuf, RawBufMut, Scalar, Version};

    /// nccl.h's name and value for each type: a match without a wildcard, so a type the core
    /// gains fails to build here until it has its value.
    fn nccl_h_type(d: DataType) -> (&'static str, i32) {
        match d {
            DataType::Int8 => ("ncclInt8", 0),
            DataType::Uint8 => ("ncclUint8", 1),
            DataType::Int32 => ("ncclInt32", 2),
            DataType::Uint32 => ("ncclUint32", 3),
            DataType::Int64 => ("ncclInt64", 4),
            DataType::Uint64 => ("ncclUint64", 5),
            DataType::Float16 => ("ncclFloat16", 6),
            DataType::Float32 => ("ncclFloat32", 7),
            DataType::Float64 => ("ncclFloat64", 8),
            DataType::Bfloat16 => ("ncclBfloat16", 9),
            DataType::Float8E4M3 => ("ncclFloat8e4m3", 10),
            DataType::Float8E5M2 => ("ncclFloat8e5m2", 11),
        }
    }

    /// nccl.h's value for each operator, `None` for premul-sum (made per communicator).
    fn nccl_h_op(o: &ReduceOp) -> Option<i32> {
        match o {
            ReduceOp::Sum => Some(0),
            ReduceOp::Prod => Some(1),
            ReduceOp::Max => Some(2),
            ReduceOp::Min => Some(3),
            ReduceOp::Avg => Some(4),
            ReduceOp::PreMulSum(_) => None,
        }
    }

    #[test]
    fn every_data_type_has_its_nccl_h_value() {
        assert_eq!(DataType::ALL.len(), 12, "a type without a row here");
        let mut seen = std::collections::HashSet::new();
        for d in DataType::ALL {
            let (name, v) = nccl_h_type(d);
            assert_eq!(data_type(d), v, "{d:?} is {name}");
            assert!(seen.insert(v), "{d:?}: value {v} twice");
        }
    }

    #[test]
    fn every_reduce_op_has_its_nccl_h_value() {
        for o in ReduceOp::BUILTIN {
            assert_eq!(builtin_red_op(&o), nccl_h_op(&o), "{o:?}");
            assert!(builtin_red_op(&o).is_some(), "{o:?}");
        }
        let pms = ReduceOp::PreMulSum(Scalar::Device { addr: 0x1000 });
        assert_eq!(builtin_red_op(&pms), None);
    }

    #[test]
    fn op_codes_are_the_wire_type_and_the_operator() {
        let (s, r) = ([0u8; 64], [0u8; 64]);
        let send = RawBuf {
            addr: s.as_ptr() as usize,
            len: 4,
        };
        let recv = RawBufMut {
            addr: r.as_ptr() as usize,
            len: 4,
        };
        let old = FeatureSet::for_version(Version::new(2, 18, 1));
        let new = FeatureSet::for_version(Version::new(2, 28, 9));
        for d in DataType::ALL {
            for o in ReduceOp::BUILTIN {
                let op = CommOp::AllReduce {
                    send,
                    recv,
                    dtype: d,
                    op: o,
                };
                let c = op_codes(&op, &new).unwrap();
                assert_eq!(c.dtype, Some(nccl_h_type(d).1));
                assert_eq!(c.red_op, nccl_h_op(&o));
            }
            // Only moved: fp8 goes as ncclUint8 to a library without fp8.
            let op = CommOp::AllGather {
                send,
                recv,
                dtype: d,
            };
            let want = if d.size() == 1 && d.is_float() {
                1
            } else {
                data_type(d)
            };
            assert_eq!(op_codes(&op, &old).unwrap().dtype, Some(want), "{d:?}");
            assert_eq!(op_codes(&op, &new).unwrap().red_op, None);
        }
        let pms = CommOp::AllReduce {
            send,
            recv,
            dtype: DataType::Float32,
            op: ReduceOp::PreMulSum(Scalar::Device { addr: 0x1000 }),
        };
        assert!(op_codes(&pms, &new).is_err());
    }
}

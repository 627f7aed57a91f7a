//! Feature gates and applicability: element types, reductions, premul-sum factors.

use super::*;

const SCALARS: [HostScalar; 4] = [
    HostScalar::F16(0x3c00),
    HostScalar::Bf16(0x3f80),
    HostScalar::F32(0.5),
    HostScalar::F64(0.5),
];

fn premul(s: HostScalar) -> ReduceOp {
    ReduceOp::PreMulSum(Scalar::Host(s))
}

#[test]
fn dtype_gates() {
    let f = fs_at(2, 9, 6);
    assert_eq!(
        missing(dtype(&ctx(0, 2, &f), DataType::Bfloat16), Feature::Bfloat16),
        too_old((2, 10, 3), (2, 9, 6))
    );
    let f = fs_at(2, 10, 3);
    assert!(dtype(&ctx(0, 2, &f), DataType::Bfloat16).is_ok());
    let f = fs_at(2, 19, 3);
    for dt in [DataType::Float8E4M3, DataType::Float8E5M2] {
        assert_eq!(
            missing(dtype(&ctx(0, 2, &f), dt), Feature::Float8),
            too_old((2, 24, 3), (2, 19, 3))
        );
        assert!(dtype(&ctx(0, 2, &fs_at(2, 24, 3)), dt).is_ok());
    }
    // every other type needs nothing
    let f = fs_at(2, 9, 6);
    for dt in DataType::ALL {
        if dt != DataType::Bfloat16 && !dt.is_fp8() {
            assert!(dtype(&ctx(0, 2, &f), dt).is_ok(), "{dt}");
        }
    }
}

#[test]
fn every_op_applies_the_dtype_gate() {
    let old = fs_at(2, 19, 3);
    let new = fs();
    for o in &every_op(DataType::Float8E5M2, ReduceOp::Sum) {
        if *o == CommOp::Barrier {
            continue;
        }
        assert_eq!(
            missing(op(o, &ctx(0, 2, &old)), Feature::Float8),
            too_old((2, 24, 3), (2, 19, 3)),
            "{o:?}"
        );
        assert!(op(o, &ctx(0, 2, &new)).is_ok(), "{o:?}");
    }
    let f = fs_at(2, 9, 6);
    for o in &every_op(DataType::Bfloat16, ReduceOp::Sum) {
        if *o != CommOp::Barrier {
            missing(op(o, &ctx(0, 2, &f)), Feature::Bfloat16);
        }
    }
}

#[test]
fn builtin_reductions_apply_to_every_type() {
    let f = fs();
    for dt in DataType::ALL {
        for red in ReduceOp::BUILTIN {
            assert!(reduce_op(&ctx(0, 2, &f), dt, &red).is_ok(), "{red} on {dt}");
        }
    }
}

#[test]
fn avg_and_premul_sum_gates() {
    let f = fs_at(2, 9, 6);
    assert_eq!(
        missing(
            reduce_op(&ctx(0, 2, &f), DataType::Float32, &ReduceOp::Avg),
            Feature::Avg
        ),
        too_old((2, 10, 3), (2, 9, 6))
    );
    let f = fs_at(2, 10, 3);
    assert!(reduce_op(&ctx(0, 2, &f), DataType::Int32, &ReduceOp::Avg).is_ok());
    let pm = premul(HostScalar::F32(2.0));
    assert_eq!(
        missing(
            reduce_op(&ctx(0, 2, &f), DataType::Float32, &pm),
            Feature::PreMulSum
        ),
        too_old((2, 11, 4), (2, 10, 3))
    );
    // the gate comes before the type rule
    missing(
        reduce_op(&ctx(0, 2, &f), DataType::Int32, &pm),
        Feature::PreMulSum,
    );
    assert!(reduce_op(&ctx(0, 2, &fs_at(2, 11, 4)), DataType::Float32, &pm).is_ok());
    // a library of the right version without the symbol
    let f = FeatureSet::resolve(Version::new(2, 28, 3), |s| s != "ncclRedOpCreatePreMulSum");
    assert_eq!(
        missing(
            reduce_op(&ctx(0, 2, &f), DataType::Float32, &pm),
            Feature::PreMulSum
        ),
        Missing::SymbolAbsent {
            symbol: "ncclRedOpCreatePreMulSum"
        }
    );
}

#[test]
fn premul_sum_types_and_factors() {
    let f = fs();
    let c = ctx(0, 2, &f);
    for dt in DataType::ALL {
        let takes = matches!(
            dt,
            DataType::Float16 | DataType::Bfloat16 | DataType::Float32 | DataType::Float64
        );
        for sc in SCALARS {
            let res = reduce_op(&c, dt, &premul(sc));
            match (takes, sc.dtype() == dt) {
                (false, _) => refused(res, "op"),
                (true, true) => assert!(res.is_ok(), "{dt}"),
                (true, false) => refused(res, "scalar"),
            }
        }
        let dev = ReduceOp::PreMulSum(Scalar::Device { addr: A });
        let null = ReduceOp::PreMulSum(Scalar::Device { addr: 0 });
        if takes {
            assert!(reduce_op(&c, dt, &dev).is_ok(), "{dt}");
            refused(reduce_op(&c, dt, &null), "scalar");
            // misaligned, or an element running past the end of the address space
            for bad in [A + 1, usize::MAX, usize::MAX & !7] {
                let r = reduce_op(&c, dt, &ReduceOp::PreMulSum(Scalar::Device { addr: bad }));
                if bad % dt.size() != 0 || bad.checked_add(dt.size()).is_none() {
                    refused(r, "scalar");
                } else {
                    assert!(r.is_ok(), "{dt} {bad:#x}");
                }
            }
        } else {
            refused(reduce_op(&c, dt, &dev), "op");
            refused(reduce_op(&c, dt, &null), "op");
        }
    }
}

#[test]
fn every_reduction_applies_the_op_gates() {
    let old = fs_at(2, 9, 6);
    let f = fs();
    let reducing = |o: &CommOp<'_>| o.reduce_op().is_some();
    let ops = every_op(DataType::Float32, ReduceOp::Avg);
    assert_eq!(ops.iter().filter(|o| reducing(o)).count(), 4);
    for o in ops.iter().filter(|o| reducing(o)) {
        missing(op(o, &ctx(0, 2, &old)), Feature::Avg);
        assert!(op(o, &ctx(0, 2, &f)).is_ok(), "{o:?}");
    }
    for o in every_op(DataType::Int32, premul(HostScalar::F32(1.0)))
        .iter()
        .filter(|o| reducing(o))
    {
        refused(op(o, &ctx(0, 2, &f)), "op");
    }
    for o in every_op(DataType::Float16, premul(HostScalar::F32(1.0)))
        .iter()
        .filter(|o| reducing(o))
    {
        refused(op(o, &ctx(0, 2, &f)), "scalar");
    }
    for o in every_op(DataType::Float16, premul(HostScalar::F16(0x3c00)))
        .iter()
        .filter(|o| reducing(o))
    {
        assert!(op(o, &ctx(0, 2, &f)).is_ok(), "{o:?}");
    }
}

#[test]
fn reduce_op_rules() {
    let f = fs();
    let c = ctx(0, 2, &f);
    let pm = ReduceOp::PreMulSum(Scalar::Host(crate::HostScalar::F64(0.5)));
    assert_eq!(arg_of(reduce_op(&c, DataType::Float32, &pm)), "scalar");
    assert!(reduce_op(&c, DataType::Float64, &pm).is_ok());
    assert_eq!(arg_of(reduce_op(&c, DataType::Int32, &pm)), "op");
    let dev = ReduceOp::PreMulSum(Scalar::Device { addr: 0 });
    assert_eq!(arg_of(reduce_op(&c, DataType::Float32, &dev)), "scalar");
    let old = FeatureSet::for_version(Version::new(2, 9, 6));
    let c_old = ctx(0, 2, &old);
    assert!(matches!(
        reduce_op(&c_old, DataType::Float32, &ReduceOp::Avg),
        Err(Error::Unsupported {
            feature: Feature::Avg,
            missing: Missing::TooOld { .. }
        })
    ));
    assert!(matches!(
        dtype(
            &ctx(0, 2, &FeatureSet::for_version(Version::new(2, 19, 3))),
            DataType::Float8E4M3
        ),
        Err(Error::Unsupported {
            feature: Feature::Float8,
            ..
        })
    ));
}

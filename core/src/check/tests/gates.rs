//! Feature gates and applicability: element types, reductions, premul-sum factors.

use super::*;
use crate::OpKind;

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
    for reduces in [true, false] {
        let f = fs_at(2, 9, 6);
        assert_eq!(
            missing(
                dtype(&ctx(0, 2, &f), DataType::Bfloat16, reduces),
                Feature::Bfloat16
            ),
            too_old((2, 10, 3), (2, 9, 6))
        );
        let f = fs_at(2, 10, 3);
        assert!(dtype(&ctx(0, 2, &f), DataType::Bfloat16, reduces).is_ok());
        // every other type but fp8 needs nothing
        let f = fs_at(2, 9, 6);
        for dt in DataType::ALL {
            if dt != DataType::Bfloat16 && !dt.is_fp8() {
                assert!(dtype(&ctx(0, 2, &f), dt, reduces).is_ok(), "{dt}");
            }
        }
    }
    let f = fs_at(2, 19, 3);
    for dt in [DataType::Float8E4M3, DataType::Float8E5M2] {
        // Reducing fp8 needs the library's fp8 (2.24.3); moving it needs nothing.
        assert_eq!(
            missing(dtype(&ctx(0, 2, &f), dt, true), Feature::Float8),
            too_old((2, 24, 3), (2, 19, 3))
        );
        assert!(dtype(&ctx(0, 2, &f), dt, false).is_ok());
        for reduces in [true, false] {
            assert!(dtype(&ctx(0, 2, &fs_at(2, 24, 3)), dt, reduces).is_ok());
        }
        // A release that has it, hiding it, is as one that has not.
        let hidden = fs().without(Feature::Float8);
        missing(dtype(&ctx(0, 2, &hidden), dt, true), Feature::Float8);
        assert!(dtype(&ctx(0, 2, &hidden), dt, false).is_ok());
    }
}

/// Before 2.24.3 fp8 is refused by the four reductions only, naming Float8 and 2.24.3; every
/// operation that moves data accepts it. From 2.24.3 every operation accepts it.
#[test]
fn every_op_applies_the_dtype_gate() {
    let old = fs_at(2, 23, 4);
    let new = fs_at(2, 24, 3);
    for dt in [DataType::Float8E4M3, DataType::Float8E5M2] {
        let ops = every_op(dt, ReduceOp::Sum);
        assert_eq!(ops.iter().filter(|o| o.kind().reduces()).count(), 4);
        for o in &ops {
            if o.kind().reduces() {
                let e = op(o, &ctx(0, 2, &old)).unwrap_err();
                assert_eq!(
                    missing(Err(e.clone()), Feature::Float8),
                    too_old((2, 24, 3), (2, 23, 4)),
                    "{o:?}"
                );
                let text = crate::text!("{e}");
                assert!(text.contains("float8") && text.contains("2.24.3"), "{text}");
            } else {
                assert!(op(o, &ctx(0, 2, &old)).is_ok(), "{o:?}");
            }
            assert!(op(o, &ctx(0, 2, &new)).is_ok(), "{o:?}");
        }
    }
    let f = fs_at(2, 9, 6);
    for o in &every_op(DataType::Bfloat16, ReduceOp::Sum) {
        if *o != CommOp::Barrier {
            missing(op(o, &ctx(0, 2, &f)), Feature::Bfloat16);
        }
    }
}

/// The reducing kinds are exactly those that carry a reduction.
#[test]
fn the_reducing_kinds_are_those_with_an_operator() {
    for o in &every_op(DataType::Float32, ReduceOp::Sum) {
        assert_eq!(o.kind().reduces(), o.reduce_op().is_some(), "{o:?}");
    }
    for kind in OpKind::ALL {
        let reducing = [
            OpKind::AllReduce,
            OpKind::Reduce,
            OpKind::ReduceScatter,
            OpKind::ReduceScatterV,
        ];
        assert_eq!(kind.reduces(), reducing.contains(&kind), "{kind}");
    }
}

/// fp8 travels as uint8 exactly when the library lacks it and the operation moves data; every
/// other type, and fp8 on a library that has it, travels as itself.
#[test]
fn wire_dtype_of_every_type_and_kind() {
    let libs = [
        fs_at(2, 13, 4),
        fs_at(2, 23, 4),
        fs_at(2, 24, 3),
        fs(),
        fs().without(Feature::Float8),
    ];
    for f in &libs {
        let has = f.has(Feature::Float8);
        for kind in OpKind::ALL {
            for dt in DataType::ALL {
                let wire = wire_dtype(dt, kind.reduces(), f);
                let want = if dt.is_fp8() && !has && !kind.reduces() {
                    DataType::Uint8
                } else {
                    dt
                };
                assert_eq!(wire, want, "{kind} {dt} on {:?}", f.version());
                assert_eq!(wire.size(), dt.size());
                // Whatever the check accepts goes to the library as a type it has.
                if dtype(&ctx(0, 2, f), dt, kind.reduces()).is_ok() {
                    assert!(dtype(&ctx(0, 2, f), wire, true).is_ok(), "{kind} {dt}");
                }
            }
        }
    }
}

/// `wire_op` changes the type of the moving operations only, and nothing else of any.
#[test]
fn wire_op_of_every_op() {
    let old = fs_at(2, 23, 4);
    for dt in DataType::ALL {
        for o in &every_op(dt, ReduceOp::Sum) {
            assert_eq!(wire_op(o, &fs()), *o, "{o:?}");
            let w = wire_op(o, &old);
            let reduces = o.kind().reduces();
            let want = o.dtype().map(|d| wire_dtype(d, reduces, &old));
            assert_eq!(w.dtype(), want, "{o:?}");
            assert_eq!(w.with_dtype(dt), *o, "only the type changed: {o:?}");
            assert_eq!(
                (w.kind(), w.numel_in(), w.numel_out(), w.root(), w.peer()),
                (o.kind(), o.numel_in(), o.numel_out(), o.root(), o.peer())
            );
            if dt.is_fp8() && !reduces && *o != CommOp::Barrier {
                assert_eq!(w.dtype(), Some(DataType::Uint8), "{o:?}");
                // The op as issued passes the checks on its own too.
                assert!(op(&w, &ctx(0, 2, &old)).is_ok(), "{w:?}");
            }
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
            DataType::Float8E4M3,
            true
        ),
        Err(Error::Unsupported {
            feature: Feature::Float8,
            ..
        })
    ));
}

//! The collectives on CPU tensors, four ranks as threads on the mock world: exact values for
//! every dtype candle and NCCL share, and the typed error of each bad input.

use candle_core::{DType, Device, Tensor};
use oxccl::launch::{spawn, WithProcessGroup};
use oxccl::pg::{PgBackend, ProcessGroup};
use oxccl_candle::{Error, ReduceOp, TensorGroup};

const N: u32 = 4;

/// Runs case `name` on every rank; each rank's outcome.
fn on_ranks(name: &'static str) -> Vec<oxccl_candle::Result<Vec<f64>>> {
    #[derive(Clone)]
    struct Case(&'static str);
    impl WithProcessGroup for Case {
        type Output = oxccl_candle::Result<Vec<f64>>;
        fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> oxccl::Result<Self::Output> {
            Ok(case(self.0, &TensorGroup::new(pg)))
        }
    }
    std::env::set_var("OXCCL_BACKEND", "mock");
    spawn(N, Case(name)).expect("ranks")
}

/// Every element as f64 (F8E4M3 read as itself: candle 0.11.1's `to_dtype` between F8E4M3 and
/// F64 overflows the stack).
fn values(t: &Tensor) -> oxccl_candle::Result<Vec<f64>> {
    let flat = t.flatten_all()?;
    if t.dtype() == DType::F8E4M3 {
        return Ok(flat
            .to_vec1::<float8::F8E4M3>()?
            .into_iter()
            .map(|v| v.to_f64())
            .collect());
    }
    Ok(flat.to_dtype(DType::F64)?.to_vec1::<f64>()?)
}

/// A `(2, 3)` tensor of `v` in dtype `d`.
fn full(v: f64, d: DType) -> oxccl_candle::Result<Tensor> {
    if d == DType::F8E4M3 {
        let e = float8::F8E4M3::from_f64(v);
        return Ok(Tensor::from_vec(vec![e; 6], (2, 3), &Device::Cpu)?);
    }
    Ok(Tensor::full(v, (2, 3), &Device::Cpu)?.to_dtype(d)?)
}

const DTYPES: [DType; 9] = [
    DType::U8,
    DType::U32,
    DType::I32,
    DType::I64,
    DType::BF16,
    DType::F16,
    DType::F32,
    DType::F64,
    DType::F8E4M3,
];

fn case<B: PgBackend>(name: &str, g: &TensorGroup<B>) -> oxccl_candle::Result<Vec<f64>> {
    let r = g.rank() as f64;
    let cpu = &Device::Cpu;
    let iota = |n: usize, base: f64| -> oxccl_candle::Result<Tensor> {
        Ok(Tensor::arange(0f64, n as f64, cpu)?.affine(1.0, base)?)
    };
    match name {
        "all_reduce_every_dtype" => {
            let mut out = Vec::new();
            for d in DTYPES {
                let x = full(r + 1.0, d)?;
                let y = g.all_reduce(&x, ReduceOp::Sum)?;
                assert_eq!((y.dtype(), y.dims()), (d, &[2usize, 3][..]));
                out.extend(values(&y)?);
            }
            Ok(out)
        }
        "all_reduce_ops" => {
            let x = iota(6, 10.0 * r)?.reshape((2, 3))?;
            let mut out = values(&g.all_reduce(&x, ReduceOp::Sum)?)?;
            out.extend(values(&g.all_reduce(&x, ReduceOp::Max)?)?);
            out.extend(values(&g.all_reduce(&x, ReduceOp::Avg)?)?);
            Ok(out)
        }
        "broadcast" => {
            let x = iota(5, 100.0 * r)?.to_dtype(DType::I64)?;
            values(&g.broadcast(&x, 2)?)
        }
        "all_gather_dim1" => {
            let x = iota(4, 10.0 * r)?.reshape((2, 2))?.to_dtype(DType::BF16)?;
            let y = g.all_gather(&x, 1)?;
            assert_eq!(y.dims(), [2, 8]);
            values(&y)
        }
        "reduce_scatter_dim1" => {
            let x = iota(16, r)?.reshape((2, 8))?.to_dtype(DType::F32)?;
            let y = g.reduce_scatter(&x, 1, ReduceOp::Sum)?;
            assert_eq!(y.dims(), [2, 2]);
            values(&y)
        }
        "all_to_all_dim0" => {
            // Row p of rank r holds 100r + 10p + j.
            let x = (iota(8, 100.0 * r)?.reshape((4, 2))?
                + Tensor::arange(0f64, 4.0, cpu)?
                    .affine(9.0, 0.0)?
                    .reshape((4, 1))?
                    .broadcast_as((4, 2))?)?
            .to_dtype(DType::I32)?;
            values(&g.all_to_all(&x, 0)?)
        }
        "send_recv_pairs" => {
            // Even ranks send to the next, odd ranks answer with a tensor of another shape and dtype.
            let rank = g.rank();
            if rank.is_multiple_of(2) {
                g.send(&iota(3, r)?.to_dtype(DType::F16)?, rank + 1)?;
                let back = g.recv(rank + 1, cpu)?;
                assert_eq!((back.dtype(), back.dims()), (DType::U32, &[2usize, 1][..]));
                values(&back)
            } else {
                let got = g.recv(rank - 1, cpu)?;
                assert_eq!((got.dtype(), got.dims()), (DType::F16, &[3usize][..]));
                g.send(
                    &iota(2, 7.0 * r)?.reshape((2, 1))?.to_dtype(DType::U32)?,
                    rank - 1,
                )?;
                values(&got)
            }
        }
        "i16" => g
            .all_reduce(&Tensor::zeros(2, DType::I16, cpu)?, ReduceOp::Sum)
            .map(|_| vec![]),
        "shapes_disagree" => {
            let n = if g.rank() == 1 { 3 } else { 2 };
            g.all_reduce(&Tensor::zeros(n, DType::F32, cpu)?, ReduceOp::Sum)
                .map(|_| vec![])
        }
        "dtypes_disagree" => {
            let d = if g.rank() == 3 {
                DType::F64
            } else {
                DType::F32
            };
            g.broadcast(&Tensor::zeros(2, d, cpu)?, 0).map(|_| vec![])
        }
        "uneven_split" => g
            .reduce_scatter(&Tensor::zeros((2, 6), DType::F32, cpu)?, 1, ReduceOp::Sum)
            .map(|_| vec![]),
        "dim_out_of_range" => g
            .all_gather(&Tensor::zeros((2, 6), DType::F32, cpu)?, 2)
            .map(|_| vec![]),
        "root_outside" => g
            .broadcast(&Tensor::zeros(2, DType::F32, cpu)?, 7)
            .map(|_| vec![]),
        "send_to_self" => g
            .send(&Tensor::zeros(2, DType::F32, cpu)?, g.rank())
            .map(|_| vec![]),
        other => panic!("no case {other}"),
    }
}

fn ok(out: Vec<oxccl_candle::Result<Vec<f64>>>) -> Vec<Vec<f64>> {
    out.into_iter()
        .enumerate()
        .map(|(r, o)| o.unwrap_or_else(|e| panic!("rank {r}: {e:?}")))
        .collect()
}

#[test]
fn all_reduce_sums_every_shared_dtype() {
    // 1 + 2 + 3 + 4 on every element, for each of the nine dtypes.
    for got in ok(on_ranks("all_reduce_every_dtype")) {
        assert_eq!(got, vec![10.0; 6 * DTYPES.len()]);
    }
}

#[test]
fn all_reduce_sum_max_avg() {
    let i: Vec<f64> = (0..6).map(f64::from).collect();
    let mut want: Vec<f64> = i.iter().map(|i| 4.0 * i + 60.0).collect();
    want.extend(i.iter().map(|i| i + 30.0));
    want.extend(i.iter().map(|i| i + 15.0));
    for got in ok(on_ranks("all_reduce_ops")) {
        assert_eq!(got, want);
    }
}

#[test]
fn broadcast_gives_roots_tensor() {
    for got in ok(on_ranks("broadcast")) {
        assert_eq!(got, vec![200.0, 201.0, 202.0, 203.0, 204.0]);
    }
}

#[test]
fn all_gather_concatenates_along_dim() {
    // Row i of the result: rank 0's row i, rank 1's, ... (rank r's [2, 2] is 10r + iota).
    let want: Vec<f64> = (0..2)
        .flat_map(|i| {
            (0..4).flat_map(move |r| {
                [
                    10.0 * r as f64 + 2.0 * i as f64,
                    10.0 * r as f64 + 2.0 * i as f64 + 1.0,
                ]
            })
        })
        .collect();
    for got in ok(on_ranks("all_gather_dim1")) {
        assert_eq!(got, want);
    }
}

#[test]
fn reduce_scatter_keeps_this_ranks_columns() {
    // Sum over ranks of iota + r is 4·iota + 6; rank r keeps columns 2r and 2r + 1.
    for (r, got) in ok(on_ranks("reduce_scatter_dim1")).into_iter().enumerate() {
        let want: Vec<f64> = (0..2)
            .flat_map(|row| (2 * r..2 * r + 2).map(move |c| 4.0 * (8 * row + c) as f64 + 6.0))
            .collect();
        assert_eq!(got, want, "rank {r}");
    }
}

#[test]
fn all_to_all_exchanges_rows() {
    // Rank r gets row r of every rank q: 100q + 10r + j (the row's base is 9p + 2p = 11p... see case).
    for (r, got) in ok(on_ranks("all_to_all_dim0")).into_iter().enumerate() {
        let want: Vec<f64> = (0..4)
            .flat_map(|q| (0..2).map(move |j| (100 * q + 2 * r + j + 9 * r) as f64))
            .collect();
        assert_eq!(got, want, "rank {r}");
    }
}

#[test]
fn send_recv_carry_dtype_and_shape() {
    for (r, got) in ok(on_ranks("send_recv_pairs")).into_iter().enumerate() {
        let want: Vec<f64> = if r.is_multiple_of(2) {
            // From rank r + 1: 7(r + 1) + iota(2).
            (0..2).map(|j| (7 * (r + 1) + j) as f64).collect()
        } else {
            (0..3).map(|j| (r - 1 + j) as f64).collect()
        };
        assert_eq!(got, want, "rank {r}");
    }
}

fn errs(name: &'static str) -> Vec<Error> {
    on_ranks(name)
        .into_iter()
        .enumerate()
        .map(|(r, o)| match o {
            Ok(v) => panic!("rank {r}: {name} succeeded with {v:?}"),
            Err(e) => e,
        })
        .collect()
}

#[test]
fn a_dtype_nccl_lacks_is_named() {
    for e in errs("i16") {
        assert!(
            matches!(
                e,
                Error::DType {
                    arg: "x",
                    dtype: DType::I16,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

#[test]
fn shapes_that_disagree_name_the_other_rank() {
    for (r, e) in errs("shapes_disagree").into_iter().enumerate() {
        let other = if r == 1 { 0 } else { 1 };
        match e {
            Error::Mismatch {
                arg: "x",
                rank,
                ours,
                theirs,
            } => {
                assert_eq!(rank, other, "rank {r}");
                let (mine, them) = if r == 1 {
                    ("[3]", "[2]")
                } else {
                    ("[2]", "[3]")
                };
                assert_eq!(
                    (ours, theirs),
                    (format!("F32 {mine}"), format!("F32 {them}"))
                );
            }
            e => panic!("rank {r}: {e:?}"),
        }
    }
}

#[test]
fn dtypes_that_disagree_name_the_other_rank() {
    for (r, e) in errs("dtypes_disagree").into_iter().enumerate() {
        let other = if r == 3 { 0 } else { 3 };
        assert!(
            matches!(e, Error::Mismatch { arg: "x", rank, .. } if rank == other),
            "rank {r}: {e:?}"
        );
    }
}

#[test]
fn bad_arguments_are_named() {
    for (case, arg) in [
        ("uneven_split", "x"),
        ("dim_out_of_range", "dim"),
        ("root_outside", "root"),
        ("send_to_self", "dst"),
    ] {
        for e in errs(case) {
            assert!(
                matches!(e, Error::Invalid { arg: a, .. } if a == arg),
                "{case}: {e:?}"
            );
        }
    }
}

#[test]
fn errors_convert_into_candles_and_oxcclss() {
    let e = Error::Shape {
        arg: "weight",
        got: vec![3],
        expected: "[out_features, in_features]".into(),
    };
    let text = e.to_string();
    let c: candle_core::Error = e.into();
    assert!(c.to_string().contains(&text), "{c}");
    let o: oxccl::Error = Error::Invalid {
        arg: "dim",
        why: "dimension 2".into(),
    }
    .into();
    assert!(
        matches!(o, oxccl::Error::InvalidArgument { arg: "dim", .. }),
        "{o:?}"
    );
    // A candle error stays candle's own, not wrapped twice.
    let inner = candle_core::Error::Msg("m".into());
    let back: candle_core::Error = Error::Candle(inner).into();
    assert!(
        matches!(back, candle_core::Error::Msg(ref m) if m == "m"),
        "{back:?}"
    );
}

//! The tensor-parallel layers and the data-parallel step at 1, 2 and 4 ranks (threads on the
//! mock world) against one rank holding everything: the same outputs within float tolerance,
//! and the typed error of each bad input.

use candle_core::{backprop::GradStore, DType, Device, Module, Tensor, Var};
use candle_nn::{Optimizer, SGD};
use oxccl::launch::{spawn, WithProcessGroup};
use oxccl::pg::{PgBackend, ProcessGroup};
use oxccl_candle::tp::{shard, vocab_parallel_lm_head};
use oxccl_candle::{
    ColumnParallelLinear, DataParallel, Error, RowParallelLinear, TensorGroup,
    VocabParallelEmbedding,
};

type Outcome = oxccl_candle::Result<Vec<Vec<f32>>>;

fn on_ranks(n: u32, name: &'static str) -> Vec<Outcome> {
    #[derive(Clone)]
    struct Case(&'static str);
    impl WithProcessGroup for Case {
        type Output = Outcome;
        fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> oxccl::Result<Outcome> {
            Ok(case(self.0, &TensorGroup::new(pg)))
        }
    }
    std::env::set_var("OXCCL_BACKEND", "mock");
    spawn(n, Case(name)).expect("ranks")
}

/// Deterministic values, the same on every rank.
fn det(shape: &[usize], seed: u32) -> candle_core::Result<Tensor> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n as u32)
        .map(|i| (((i * 37 + seed * 101) % 97) as f32 / 48.5) - 1.0)
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu)
}

fn flat(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

fn case<B: PgBackend>(name: &str, g: &TensorGroup<B>) -> Outcome {
    let x = det(&[3, 5, 8], 1)?;
    let w1 = det(&[16, 8], 2)?;
    let b1 = det(&[16], 3)?;
    let w2 = det(&[8, 16], 4)?;
    let b2 = det(&[8], 5)?;
    match name {
        "column_gathered" => {
            let l = ColumnParallelLinear::from_full(&w1, Some(&b1), true, g)?;
            Ok(vec![flat(&l.forward(&x)?)?])
        }
        "row_full_input" => {
            let l = RowParallelLinear::from_full(&w2, Some(&b2), false, g)?;
            Ok(vec![flat(&l.forward(&det(&[3, 5, 16], 6)?)?)?])
        }
        "mlp_column_then_row" => {
            // The Megatron MLP: no communication between the two layers, one all-reduce after.
            let up = ColumnParallelLinear::from_full(&w1, Some(&b1), false, g)?;
            let down = RowParallelLinear::from_full(&w2, Some(&b2), true, g)?;
            Ok(vec![flat(&down.forward(&up.forward(&x)?.relu()?)?)?])
        }
        "embedding_and_head" => {
            let table = det(&[12, 8], 7)?;
            let ids = Tensor::new(&[[0u32, 5, 11, 3], [7, 7, 2, 9]], &Device::Cpu)?;
            let e = VocabParallelEmbedding::from_full(&table, g)?;
            let h = e.forward(&ids)?;
            let head = vocab_parallel_lm_head(&table, g)?;
            Ok(vec![flat(&h)?, flat(&head.forward(&h)?)?])
        }
        "row_grads" => {
            // The all-reduce op's gradient is the incoming gradient: the weight's gradient on
            // each rank is that rank's columns of the full weight's gradient.
            let w = Var::from_tensor(&shard(&w2, 1, g.rank(), g.size())?)?;
            let l = RowParallelLinear::from_shard(w.as_tensor().clone(), None, true, g)?;
            let xin = shard(&det(&[3, 16], 8)?, 1, g.rank(), g.size())?;
            let y = l.forward(&xin)?;
            let grads = y.sqr()?.sum_all()?.backward()?;
            let gw = grads.get(w.as_tensor()).expect("a gradient for w").clone();
            // Gather the column slices back for comparison with one rank.
            Ok(vec![flat(&y)?, flat(&g.all_gather(&gw, 1)?)?])
        }
        "input_grads" => {
            // Column then row, trained: the input's gradient on every rank is the full one
            // (the column layer's input sums its gradient across ranks going back), and each
            // rank's weight gradients are its slices of the full ones.
            let xv = Var::from_tensor(&x)?;
            let up = ColumnParallelLinear::from_full(&w1, Some(&b1), false, g)?;
            let down = RowParallelLinear::from_full(&w2, Some(&b2), true, g)?;
            let y = down.forward(&up.forward(xv.as_tensor())?.tanh()?)?;
            let grads = y.sqr()?.sum_all()?.backward()?;
            let gx = grads.get(xv.as_tensor()).expect("a gradient for x").clone();
            Ok(vec![flat(&y)?, flat(&gx)?])
        }
        "dp_steps" => {
            // A linear model, 3 SGD steps; the global batch of 8 split across ranks.
            let w = Var::from_tensor(&(det(&[1, 8], 9)? + g.rank() as f64)?)?;
            let b = Var::from_tensor(&Tensor::zeros(1, DType::F32, &Device::Cpu)?)?;
            let ddp = DataParallel::new(g, vec![("w".into(), w.clone()), ("b".into(), b.clone())])?
                .with_bucket_bytes(16)?;
            assert_eq!(ddp.buckets(), 2);
            let mut opt = SGD::new(vec![w.clone(), b.clone()], 0.1)?;
            let part = 8 / g.size();
            for step in 0..3 {
                let xs = det(&[8, 8], 10 + step)?.narrow(0, g.rank() * part, part)?;
                let ys = det(&[8, 1], 20 + step)?.narrow(0, g.rank() * part, part)?;
                let pred = xs.broadcast_matmul(&w.t()?)?.broadcast_add(&b)?;
                let loss = (pred - ys)?.sqr()?.mean_all()?;
                let grads: GradStore = ddp.backward(&loss)?;
                opt.step(&grads)?;
            }
            Ok(vec![flat(&w)?, flat(&b)?])
        }
        "bad_weight" => ColumnParallelLinear::from_full(&b1, None, false, g).map(|_| vec![]),
        "uneven_out" => {
            ColumnParallelLinear::from_full(&det(&[6, 8], 1)?, None, false, g).map(|_| vec![])
        }
        "float_ids" => {
            let e = VocabParallelEmbedding::from_full(&det(&[12, 8], 7)?, g)?;
            e.apply(&x).map(|_| vec![])
        }
        "params_disagree" => {
            let n = if g.rank() == 0 { 4 } else { 5 };
            let w = Var::from_tensor(&Tensor::zeros(n, DType::F32, &Device::Cpu)?)?;
            DataParallel::new(g, vec![("w".into(), w)]).map(|_| vec![])
        }
        "integer_params" => {
            let w = Var::from_tensor(&Tensor::zeros(4, DType::I64, &Device::Cpu)?)?;
            DataParallel::new(g, vec![("w".into(), w)]).map(|_| vec![])
        }
        other => panic!("no case {other}"),
    }
}

/// Ranks of `n` agree with one rank within `tol`.
fn agrees(name: &'static str, tol: f32) {
    let one = on_ranks(1, name)
        .remove(0)
        .unwrap_or_else(|e| panic!("{name} on 1 rank: {e:?}"));
    for n in [2, 4] {
        for (r, got) in on_ranks(n, name).into_iter().enumerate() {
            let got = got.unwrap_or_else(|e| panic!("{name}, rank {r} of {n}: {e:?}"));
            assert_eq!(got.len(), one.len());
            for (a, b) in got.iter().zip(&one) {
                assert_eq!(a.len(), b.len(), "{name}");
                let diff = a
                    .iter()
                    .zip(b)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(diff <= tol, "{name}, rank {r} of {n}: off by {diff}");
            }
        }
    }
}

#[test]
fn column_parallel_gathered_is_the_full_linear() {
    agrees("column_gathered", 1e-5);
    // And the one rank is candle's own Linear.
    let x = det(&[3, 5, 8], 1).unwrap();
    let full = candle_nn::Linear::new(det(&[16, 8], 2).unwrap(), Some(det(&[16], 3).unwrap()));
    let want = flat(&full.forward(&x).unwrap()).unwrap();
    let got = on_ranks(1, "column_gathered").remove(0).unwrap();
    assert_eq!(got[0], want);
}

#[test]
fn row_parallel_is_the_full_linear() {
    agrees("row_full_input", 1e-5);
}

#[test]
fn column_then_row_mlp_is_the_full_mlp() {
    agrees("mlp_column_then_row", 1e-5);
}

#[test]
fn vocab_parallel_embedding_and_head_are_the_full_ones() {
    agrees("embedding_and_head", 1e-5);
    // One rank: rows of the table.
    let got = on_ranks(1, "embedding_and_head").remove(0).unwrap();
    let table = det(&[12, 8], 7).unwrap();
    assert_eq!(got[0][8..16], flat(&table.get(5).unwrap()).unwrap()[..]);
}

#[test]
fn row_parallel_gradients_are_the_full_gradients_columns() {
    agrees("row_grads", 1e-5);
}

#[test]
fn column_then_row_input_gradient_is_the_full_one() {
    agrees("input_grads", 1e-5);
}

#[test]
fn data_parallel_steps_match_one_rank_with_the_whole_batch() {
    agrees("dp_steps", 1e-6);
}

fn errs(n: u32, name: &'static str) -> Vec<Error> {
    on_ranks(n, name)
        .into_iter()
        .map(|o| o.err().unwrap_or_else(|| panic!("{name} succeeded")))
        .collect()
}

#[test]
fn bad_layer_inputs_are_named() {
    for e in errs(2, "bad_weight") {
        assert!(matches!(e, Error::Shape { arg: "weight", .. }), "{e:?}");
    }
    // 6 output features do not split across 4 ranks.
    for e in errs(4, "uneven_out") {
        assert!(matches!(e, Error::Invalid { arg: "x", .. }), "{e:?}");
    }
    for e in errs(2, "float_ids") {
        assert!(
            matches!(
                e,
                Error::DType {
                    arg: "ids",
                    dtype: DType::F32,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

#[test]
fn parameters_that_disagree_across_ranks_are_named() {
    for (r, e) in errs(2, "params_disagree").into_iter().enumerate() {
        assert!(
            matches!(e, Error::Mismatch { arg: "params", rank, .. } if rank == 1 - r as u32),
            "rank {r}: {e:?}"
        );
    }
    for e in errs(2, "integer_params") {
        assert!(
            matches!(
                e,
                Error::DType {
                    arg: "params",
                    dtype: DType::I64,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

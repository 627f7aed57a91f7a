//! Data-parallel training of a small MLP on synthetic data, PyTorch DDP's way: rank 0's
//! initial weights broadcast to every rank, each rank a slice of the global batch, the
//! gradients averaged across ranks (buckets, one coalesced batch) before SGD steps. N ranks
//! with batch B/N reach the weights of one rank with batch B, and the loss falls.
//!
//! - Alone: `cargo run -p oxccl-candle --example dp_train -- 4` trains on 4 ranks as threads
//!   (on the mock world without a GPU), then on 1 rank, and checks that they agree.
//! - Under a launcher: `torchrun --nproc-per-node 2 --no-python target/debug/examples/dp_train`;
//!   each rank prints its losses and final weights (`rank R weights [...]`).

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Optimizer, VarBuilder, VarMap, SGD};
use oxccl::launch::{init_process_group, spawn, WithProcessGroup};
use oxccl::pg::{PgBackend, ProcessGroup};
use oxccl_candle::{DataParallel, ReduceOp, TensorGroup};

const IN: usize = 4;
const HIDDEN: usize = 16;
/// The global batch, split evenly across ranks.
const BATCH: usize = 32;
const STEPS: usize = 20;
const LR: f64 = 0.1;

/// Seeded uniform values in [-scale, scale) (splitmix64): the same wherever asked.
fn seeded(seed: u64, shape: &[usize], scale: f64) -> candle_core::Result<Tensor> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed;
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let u = ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64;
            ((2.0 * u - 1.0) * scale) as f32
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu)
}

/// Step `step`'s global batch: inputs, and targets of a fixed nonlinear teacher.
fn batch(step: usize) -> candle_core::Result<(Tensor, Tensor)> {
    let x = seeded(1000 + step as u64, &[BATCH, IN], 1.0)?;
    let w = seeded(7, &[IN, 1], 1.0)?;
    let y = (x.matmul(&w)?.tanh()? + x.sum_keepdim(1)?.affine(0.25, 0.1)?)?;
    Ok((x, y))
}

struct Mlp {
    l1: candle_nn::Linear,
    l2: candle_nn::Linear,
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.l2.forward(&self.l1.forward(x)?.relu()?)
    }
}

/// What a rank ends with: the global loss of each step, and its final weights by name.
#[derive(Debug, Clone)]
struct Outcome {
    losses: Vec<f32>,
    weights: Vec<(String, Vec<f32>)>,
}

fn train<B: PgBackend>(pg: ProcessGroup<B>) -> oxccl_candle::Result<Outcome> {
    let group = TensorGroup::new(pg);
    let (rank, size) = (group.rank(), group.size());
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let model = Mlp {
        l1: candle_nn::linear(IN, HIDDEN, vb.pp("l1"))?,
        l2: candle_nn::linear(HIDDEN, 1, vb.pp("l2"))?,
    };
    // Seeded initial weights, shifted on every rank but 0: the broadcast below must undo it.
    for (name, var) in varmap
        .data()
        .lock()
        .map_err(|_| candle_core::Error::Msg("the varmap's lock is poisoned".into()))?
        .iter()
    {
        let seed = name
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        var.set(&(seeded(seed, var.dims(), 0.5)? + rank as f64)?)?;
    }
    let ddp = DataParallel::from_varmap(&group, &varmap)?;
    let mut opt = SGD::new(varmap.all_vars(), LR)?;
    let part = BATCH / size;
    let mut losses = Vec::new();
    for step in 0..STEPS {
        let (x, y) = batch(step)?;
        let (x, y) = (
            x.narrow(0, rank * part, part)?,
            y.narrow(0, rank * part, part)?,
        );
        let loss = candle_nn::loss::mse(&model.forward(&x)?, &y)?;
        let grads = ddp.backward(&loss)?;
        opt.step(&grads)?;
        // The mean of the ranks' losses is the loss of the global batch.
        let global = group.all_reduce(&loss, ReduceOp::Avg)?;
        losses.push(global.to_scalar::<f32>()?);
    }
    let weights = ddp
        .params()
        .iter()
        .map(|(name, v)| Ok((name.clone(), v.flatten_all()?.to_vec1::<f32>()?)))
        .collect::<candle_core::Result<_>>()?;
    Ok(Outcome { losses, weights })
}

#[derive(Clone)]
struct Train;

impl WithProcessGroup for Train {
    type Output = Outcome;
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> oxccl::Result<Outcome> {
        Ok(train(pg)?)
    }
}

/// One line in one write: the ranks of a launcher share its stdout, and `println!` writes a
/// long line in pieces that another rank's line could land between.
fn line(mut s: String) {
    use std::io::Write;
    s.push('\n');
    let _ = std::io::stdout().lock().write_all(s.as_bytes());
}

fn report(rank: usize, o: &Outcome) {
    line(format!("rank {rank} losses {:?}", o.losses));
    let w: Vec<String> = o
        .weights
        .iter()
        .flat_map(|(_, v)| v.iter().map(|x| format!("{x:.7}")))
        .collect();
    line(format!("rank {rank} weights [{}]", w.join(", ")));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("RANK").is_some() {
        let rank: usize = std::env::var("RANK")?.parse()?;
        let o = init_process_group(Train)?;
        report(rank, &o);
        return Ok(());
    }
    let n: u32 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(4);
    let many = spawn(n, Train)?;
    let one = spawn(1, Train)?.remove(0);
    let mut worst = 0f32;
    for (r, o) in many.iter().enumerate() {
        report(r, o);
        for ((name, a), (_, b)) in o.weights.iter().zip(&one.weights) {
            let diff = a
                .iter()
                .zip(b)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            if diff > 1e-5 {
                return Err(
                    format!("rank {r} of {n}: {name} differs from one rank by {diff}").into(),
                );
            }
            worst = worst.max(diff);
        }
    }
    let (first, last) = (one.losses[0], one.losses[STEPS - 1]);
    if last >= first {
        return Err(format!("the loss did not fall: {first} → {last}").into());
    }
    println!(
        "dp_train: {n} ranks × batch {} match 1 rank × batch {BATCH} after {STEPS} steps (weights within {worst:e}, tolerance 1e-5); loss {first:.4} → {last:.4}",
        BATCH / n as usize
    );
    Ok(())
}

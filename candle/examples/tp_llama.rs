//! Tensor-parallel inference of a small llama-style model (RMSNorm, rotary attention, SwiGLU
//! MLP), seeded random weights, no downloads: every rank holds a slice of every weight, the
//! ranks meet in one all-reduce per attention and per MLP block, and every rank gets the full
//! logits and the same greedy tokens as one rank holding the whole model.
//!
//! - Alone: `cargo run -p oxccl-candle --example tp_llama -- 4` runs 4 ranks as threads (on
//!   the mock world without a GPU), then 1 rank, and checks that they agree.
//! - Under a launcher: `torchrun --nproc-per-node 2 --no-python target/debug/examples/tp_llama`;
//!   each rank prints its logits and tokens (`rank R logits [...]`, `rank R tokens [...]`).

use candle_core::{DType, Device, Module, Tensor, D};
use oxccl::launch::{init_process_group, spawn, WithProcessGroup};
use oxccl::pg::{PgBackend, ProcessGroup};
use oxccl_candle::tp::vocab_parallel_lm_head;
use oxccl_candle::{ColumnParallelLinear, RowParallelLinear, TensorGroup, VocabParallelEmbedding};

const VOCAB: usize = 64;
const HIDDEN: usize = 32;
const HEADS: usize = 4;
const HEAD_DIM: usize = HIDDEN / HEADS;
const FFN: usize = 64;
const LAYERS: usize = 2;
const EPS: f32 = 1e-5;
const PROMPT: [u32; 5] = [1, 17, 42, 5, 9];
const NEW_TOKENS: usize = 8;

/// Seeded normal-ish weights (splitmix64, sum of uniforms): the same on every rank.
fn seeded(seed: u64, shape: &[usize], scale: f64) -> candle_core::Result<Tensor> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xdead_beef;
    let mut next = || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| (((next() + next() + next()) - 1.5) * 2.0 * scale) as f32)
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu)
}

struct Block<B: PgBackend> {
    attn_norm: Tensor,
    q: ColumnParallelLinear<B>,
    k: ColumnParallelLinear<B>,
    v: ColumnParallelLinear<B>,
    o: RowParallelLinear<B>,
    mlp_norm: Tensor,
    gate: ColumnParallelLinear<B>,
    up: ColumnParallelLinear<B>,
    down: RowParallelLinear<B>,
    /// This rank's attention heads.
    heads: usize,
}

struct Llama<B: PgBackend> {
    embed: VocabParallelEmbedding<B>,
    blocks: Vec<Block<B>>,
    norm: Tensor,
    lm_head: ColumnParallelLinear<B>,
}

impl<B: PgBackend> Llama<B> {
    /// The full model's weights, seeded, each rank keeping its slices.
    fn new(group: &TensorGroup<B>) -> oxccl_candle::Result<Self> {
        let w = |seed: u64, out: usize, inp: usize| {
            seeded(seed, &[out, inp], (1.0 / inp as f64).sqrt())
        };
        let col = |seed, out, inp| {
            ColumnParallelLinear::from_full(&w(seed, out, inp)?, None, false, group)
        };
        let row =
            |seed, out, inp| RowParallelLinear::from_full(&w(seed, out, inp)?, None, true, group);
        let blocks = (0..LAYERS as u64)
            .map(|l| {
                let s = 100 * (l + 1);
                Ok(Block {
                    attn_norm: (seeded(s, &[HIDDEN], 0.1)? + 1.0)?,
                    q: col(s + 1, HIDDEN, HIDDEN)?,
                    k: col(s + 2, HIDDEN, HIDDEN)?,
                    v: col(s + 3, HIDDEN, HIDDEN)?,
                    o: row(s + 4, HIDDEN, HIDDEN)?,
                    mlp_norm: (seeded(s + 5, &[HIDDEN], 0.1)? + 1.0)?,
                    gate: col(s + 6, FFN, HIDDEN)?,
                    up: col(s + 7, FFN, HIDDEN)?,
                    down: row(s + 8, HIDDEN, FFN)?,
                    heads: HEADS / group.size(),
                })
            })
            .collect::<oxccl_candle::Result<_>>()?;
        let table = seeded(1, &[VOCAB, HIDDEN], 1.0)?;
        Ok(Llama {
            embed: VocabParallelEmbedding::from_full(&table, group)?,
            blocks,
            norm: (seeded(2, &[HIDDEN], 0.1)? + 1.0)?,
            lm_head: vocab_parallel_lm_head(
                &seeded(3, &[VOCAB, HIDDEN], (1.0 / HIDDEN as f64).sqrt())?,
                group,
            )?,
        })
    }

    /// Logits `[1, t, VOCAB]` of the tokens `ids` (`[1, t]`).
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let t = ids.dim(1)?;
        let (cos, sin) = rope_tables(t)?;
        let mask = causal_mask(t)?;
        let mut x = self.embed.forward(ids)?;
        for b in &self.blocks {
            let h = candle_nn::ops::rms_norm(&x, &b.attn_norm, EPS)?;
            let heads = |p: &ColumnParallelLinear<B>| -> candle_core::Result<Tensor> {
                p.forward(&h)?
                    .reshape((1, t, b.heads, HEAD_DIM))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = candle_nn::rotary_emb::rope(&heads(&b.q)?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&heads(&b.k)?, &cos, &sin)?;
            let v = heads(&b.v)?;
            let att = (q.matmul(&k.t()?)? / (HEAD_DIM as f64).sqrt())?.broadcast_add(&mask)?;
            let att = candle_nn::ops::softmax_last_dim(&att)?.matmul(&v)?;
            let att = att.transpose(1, 2)?.reshape((1, t, b.heads * HEAD_DIM))?;
            x = (x + b.o.forward(&att)?)?;
            let h = candle_nn::ops::rms_norm(&x, &b.mlp_norm, EPS)?;
            let act = (candle_nn::ops::silu(&b.gate.forward(&h)?)? * b.up.forward(&h)?)?;
            x = (x + b.down.forward(&act)?)?;
        }
        self.lm_head
            .forward(&candle_nn::ops::rms_norm(&x, &self.norm, EPS)?)
    }
}

fn rope_tables(t: usize) -> candle_core::Result<(Tensor, Tensor)> {
    let inv: Vec<f32> = (0..HEAD_DIM / 2)
        .map(|i| 1.0 / 10_000f32.powf(2.0 * i as f32 / HEAD_DIM as f32))
        .collect();
    let inv = Tensor::new(inv.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
    let pos = Tensor::arange(0u32, t as u32, &Device::Cpu)?
        .to_dtype(DType::F32)?
        .unsqueeze(1)?;
    let freqs = pos.broadcast_mul(&inv)?;
    Ok((freqs.cos()?, freqs.sin()?))
}

fn causal_mask(t: usize) -> candle_core::Result<Tensor> {
    let m: Vec<f32> = (0..t * t)
        .map(|i| {
            if i % t > i / t {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_vec(m, (t, t), &Device::Cpu)
}

/// What a rank ends with: the last prompt position's logits, and the greedy tokens.
#[derive(Debug, Clone)]
struct Outcome {
    logits: Vec<f32>,
    tokens: Vec<u32>,
}

fn generate<B: PgBackend>(pg: ProcessGroup<B>) -> oxccl_candle::Result<Outcome> {
    let group = TensorGroup::new(pg);
    let model = Llama::new(&group)?;
    let mut ids = PROMPT.to_vec();
    let mut first = None;
    for _ in 0..NEW_TOKENS {
        let input = Tensor::new(ids.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
        let last = model.forward(&input)?.squeeze(0)?.get(ids.len() - 1)?;
        if first.is_none() {
            first = Some(last.to_vec1::<f32>()?);
        }
        ids.push(last.argmax(D::Minus1)?.to_scalar::<u32>()?);
    }
    Ok(Outcome {
        logits: first.unwrap_or_default(),
        tokens: ids[PROMPT.len()..].to_vec(),
    })
}

#[derive(Clone)]
struct Generate;

impl WithProcessGroup for Generate {
    type Output = Outcome;
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> oxccl::Result<Outcome> {
        Ok(generate(pg)?)
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
    let logits: Vec<String> = o.logits.iter().map(|v| format!("{v:.6}")).collect();
    line(format!("rank {rank} logits [{}]", logits.join(", ")));
    line(format!("rank {rank} tokens {:?}", o.tokens));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("RANK").is_some() {
        let rank: usize = std::env::var("RANK")?.parse()?;
        let o = init_process_group(Generate)?;
        report(rank, &o);
        return Ok(());
    }
    let n: u32 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(2);
    let many = spawn(n, Generate)?;
    let one = spawn(1, Generate)?.remove(0);
    let mut worst = 0f32;
    for (r, o) in many.iter().enumerate() {
        report(r, o);
        let diff = o
            .logits
            .iter()
            .zip(&one.logits)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        if diff > 1e-4 || o.tokens != one.tokens {
            return Err(format!(
                "rank {r} of {n} differs from one rank: logits by {diff}, tokens {:?} vs {:?}",
                o.tokens, one.tokens
            )
            .into());
        }
        worst = worst.max(diff);
    }
    println!(
        "tp_llama: {n} ranks match 1 rank (logits within {worst:e}, tolerance 1e-4; tokens {:?})",
        one.tokens
    );
    Ok(())
}

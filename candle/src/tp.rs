//! Tensor-parallel layers (Megatron-LM's split): each rank holds a slice of a weight, and the
//! partial results meet in one collective per layer.
//!
//! The layers implement candle's [`Module`], so a model holds them where it held
//! `candle_nn::Linear` and `candle_nn::Embedding`. Each is made from the full weight
//! ([`ColumnParallelLinear::from_full`], seeded or loaded the same on every rank, each rank
//! keeping its slice) or from this rank's slice alone (`from_shard`).

use crate::error::{Error, Result};
use crate::group::TensorGroup;
use candle_core::{DType, Module, Tensor, D};
use oxccl::pg::PgBackend;

/// Part `rank` of `size` equal parts of `x` along `dim`: what a rank keeps of a full weight.
pub fn shard(x: &Tensor, dim: usize, rank: usize, size: usize) -> Result<Tensor> {
    if size == 0 || rank >= size {
        return Err(Error::invalid(
            "rank",
            format!("rank {rank} of {size} parts"),
        ));
    }
    let len = *x
        .dims()
        .get(dim)
        .ok_or_else(|| Error::invalid("dim", format!("dimension {dim} of shape {:?}", x.dims())))?;
    if !len.is_multiple_of(size) {
        return Err(Error::invalid(
            "x",
            format!(
                "dimension {dim} of {:?} does not split into {size} equal parts",
                x.dims()
            ),
        ));
    }
    let part = len / size;
    Ok(x.narrow(dim, rank * part, part)?.contiguous()?)
}

fn matrix(arg: &'static str, w: &Tensor) -> Result<(usize, usize)> {
    match *w.dims() {
        [out, inp] => Ok((out, inp)),
        _ => Err(Error::Shape {
            arg,
            got: w.dims().to_vec(),
            expected: "[out_features, in_features]".into(),
        }),
    }
}

fn vector(arg: &'static str, b: Option<&Tensor>, len: usize) -> Result<()> {
    match b {
        Some(b) if b.dims() != [len] => Err(Error::Shape {
            arg,
            got: b.dims().to_vec(),
            expected: format!("[{len}]"),
        }),
        _ => Ok(()),
    }
}

/// `x @ wᵀ (+ b)` for inputs of any leading dimensions, as `candle_nn::Linear` computes it.
fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let y = x.broadcast_matmul(&w.t()?)?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// A linear layer split by output features: rank r computes features
/// `[r·out/N, (r+1)·out/N)`. With `gather_output` the ranks' parts are gathered into the full
/// output (the LM head's logits); without, each rank keeps its part for a
/// [`RowParallelLinear`] after it (attention heads, the MLP's up projection), with no
/// communication at all.
///
/// The gather is not an op of candle's graph: with `gather_output` the layer is for inference.
#[derive(Debug, Clone)]
pub struct ColumnParallelLinear<B: PgBackend> {
    weight: Tensor,
    bias: Option<Tensor>,
    gather_output: bool,
    group: TensorGroup<B>,
}

impl<B: PgBackend> ColumnParallelLinear<B> {
    /// This rank's slice of `weight` (`[out, in]`, the same on every rank) and of `bias`
    /// (`[out]`); `out` must split evenly across the group.
    pub fn from_full(
        weight: &Tensor,
        bias: Option<&Tensor>,
        gather_output: bool,
        group: &TensorGroup<B>,
    ) -> Result<Self> {
        let (out, _) = matrix("weight", weight)?;
        vector("bias", bias, out)?;
        let (r, n) = (group.rank(), group.size());
        Ok(ColumnParallelLinear {
            weight: shard(weight, 0, r, n)?,
            bias: bias.map(|b| shard(b, 0, r, n)).transpose()?,
            gather_output,
            group: group.clone(),
        })
    }

    /// From this rank's slices already: `weight` `[out/N, in]`, `bias` `[out/N]`.
    pub fn from_shard(
        weight: Tensor,
        bias: Option<Tensor>,
        gather_output: bool,
        group: &TensorGroup<B>,
    ) -> Result<Self> {
        let (out, _) = matrix("weight", &weight)?;
        vector("bias", bias.as_ref(), out)?;
        Ok(ColumnParallelLinear {
            weight,
            bias,
            gather_output,
            group: group.clone(),
        })
    }

    /// This rank's slice of the weight.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The forward pass with this crate's typed error ([`Module::forward`] is this, its
    /// error as candle's).
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        // Forward unchanged; going back, every rank gets the input's full gradient.
        let x = self.group.parallel_input(x)?;
        let y = linear(&x, &self.weight, self.bias.as_ref())?;
        if self.gather_output && self.group.size() > 1 {
            let last = y.rank() - 1;
            self.group.all_gather(&y.contiguous()?, last)
        } else {
            Ok(y)
        }
    }
}

impl<B: PgBackend> Module for ColumnParallelLinear<B> {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Ok(self.apply(x)?)
    }
}

/// A linear layer split by input features: rank r holds columns `[r·in/N, (r+1)·in/N)` of the
/// weight, multiplies its part of the input, and the partial products are summed across the
/// group ([`TensorGroup::all_reduce_sum`], an op of candle's graph); the bias is added once,
/// after the sum.
///
/// The input is this rank's part (`input_is_parallel`, what a [`ColumnParallelLinear`] without
/// gather hands on) or the full input, of which the layer takes its part.
#[derive(Debug, Clone)]
pub struct RowParallelLinear<B: PgBackend> {
    weight: Tensor,
    bias: Option<Tensor>,
    input_is_parallel: bool,
    group: TensorGroup<B>,
}

impl<B: PgBackend> RowParallelLinear<B> {
    /// This rank's columns of `weight` (`[out, in]`, the same on every rank; `in` must split
    /// evenly across the group); `bias` (`[out]`) is kept whole.
    pub fn from_full(
        weight: &Tensor,
        bias: Option<&Tensor>,
        input_is_parallel: bool,
        group: &TensorGroup<B>,
    ) -> Result<Self> {
        let (out, _) = matrix("weight", weight)?;
        vector("bias", bias, out)?;
        Ok(RowParallelLinear {
            weight: shard(weight, 1, group.rank(), group.size())?,
            bias: bias.cloned(),
            input_is_parallel,
            group: group.clone(),
        })
    }

    /// From this rank's columns already: `weight` `[out, in/N]`, `bias` `[out]` (whole).
    pub fn from_shard(
        weight: Tensor,
        bias: Option<Tensor>,
        input_is_parallel: bool,
        group: &TensorGroup<B>,
    ) -> Result<Self> {
        let (out, _) = matrix("weight", &weight)?;
        vector("bias", bias.as_ref(), out)?;
        Ok(RowParallelLinear {
            weight,
            bias,
            input_is_parallel,
            group: group.clone(),
        })
    }

    /// This rank's columns of the weight.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The forward pass with this crate's typed error ([`Module::forward`] is this, its
    /// error as candle's).
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let (_, part) = matrix("weight", &self.weight)?;
        let x = if self.input_is_parallel {
            x.clone()
        } else {
            let last = x.rank().checked_sub(1).ok_or_else(|| Error::Shape {
                arg: "x",
                got: vec![],
                expected: "at least one dimension".into(),
            })?;
            shard(x, last, self.group.rank(), self.group.size())?
        };
        if x.dim(D::Minus1)? != part {
            return Err(Error::Shape {
                arg: "x",
                got: x.dims().to_vec(),
                expected: format!("last dimension {part} (this rank's part of the input)"),
            });
        }
        let y = self
            .group
            .all_reduce_sum(&linear(&x, &self.weight, None)?)?;
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

impl<B: PgBackend> Module for RowParallelLinear<B> {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Ok(self.apply(x)?)
    }
}

/// An embedding split by vocabulary: rank r holds rows `[r·V/N, (r+1)·V/N)` and looks up the
/// ids in its range, zeros elsewhere; the sum across the group is every id's row.
#[derive(Debug, Clone)]
pub struct VocabParallelEmbedding<B: PgBackend> {
    weight: Tensor,
    start: usize,
    group: TensorGroup<B>,
}

impl<B: PgBackend> VocabParallelEmbedding<B> {
    /// This rank's rows of `weight` (`[vocab, hidden]`, the same on every rank; `vocab` must
    /// split evenly across the group).
    pub fn from_full(weight: &Tensor, group: &TensorGroup<B>) -> Result<Self> {
        let (vocab, _) = matrix("weight", weight)?;
        let (r, n) = (group.rank(), group.size());
        Ok(VocabParallelEmbedding {
            weight: shard(weight, 0, r, n)?,
            start: r * (vocab / n.max(1)),
            group: group.clone(),
        })
    }

    /// This rank's rows of the table.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The forward pass with this crate's typed error ([`Module::forward`] is this, its
    /// error as candle's).
    pub fn apply(&self, ids: &Tensor) -> Result<Tensor> {
        if !ids.dtype().is_int() {
            return Err(Error::DType {
                arg: "ids",
                dtype: ids.dtype(),
                why: "is not an integer type (token ids are U8, U32 or I64)",
            });
        }
        let (rows, hidden) = matrix("weight", &self.weight)?;
        let ids64 = ids.to_dtype(DType::I64)?;
        let local = (ids64.clone() - self.start as f64)?;
        let mine = local.ge(0i64)?.mul(&local.lt(rows as i64)?)?;
        // Ids outside this rank's rows read row 0, then are zeroed: one gather, no branches.
        let at = local.clamp(0i64, rows as i64 - 1)?.to_dtype(DType::U32)?;
        let flat = self.weight.index_select(&at.flatten_all()?, 0)?;
        let mut shape = ids.dims().to_vec();
        shape.push(hidden);
        let rows_here = flat.reshape(shape)?;
        let keep = mine.to_dtype(self.weight.dtype())?.unsqueeze(D::Minus1)?;
        let part = rows_here.broadcast_mul(&keep)?;
        self.group.all_reduce_sum(&part)
    }
}

impl<B: PgBackend> Module for VocabParallelEmbedding<B> {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        Ok(self.apply(ids)?)
    }
}

/// The LM head split by vocabulary (a [`ColumnParallelLinear`] over the vocabulary, without
/// bias, gathering the logits): every rank gets the full `[.., vocab]` logits. Built from the
/// full `[vocab, hidden]` weight (tied to the embedding table or its own).
pub fn vocab_parallel_lm_head<B: PgBackend>(
    weight: &Tensor,
    group: &TensorGroup<B>,
) -> Result<ColumnParallelLinear<B>> {
    ColumnParallelLinear::from_full(weight, None, true, group)
}

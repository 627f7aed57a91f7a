//! Data-parallel training, PyTorch DDP's way: the parameters broadcast from rank 0 when the
//! wrapper is made, every step's gradients averaged across ranks in buckets, each bucket one
//! buffer and all of a step's buckets one coalesced batch.

use crate::error::{Error, Result};
use crate::group::{with_elem, TensorGroup};
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use oxccl::pg::PgBackend;
use oxccl::{Element, ReduceOp};

/// PyTorch DDP's default bucket: 25 MiB.
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// The parameters of a model trained data-parallel, and how their gradients travel.
///
/// ```no_run
/// # use oxccl::pg::PgBackend;
/// # use oxccl_candle::{DataParallel, TensorGroup};
/// # use candle_nn::{Optimizer, VarMap, SGD};
/// # fn step<B: PgBackend>(group: TensorGroup<B>, varmap: &VarMap, loss: candle_core::Tensor) -> oxccl_candle::Result<()> {
/// let ddp = DataParallel::from_varmap(&group, varmap)?; // rank 0's weights everywhere
/// let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
/// let grads = ddp.backward(&loss)?; // averaged across ranks
/// opt.step(&grads)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DataParallel<B: PgBackend> {
    group: TensorGroup<B>,
    /// Sorted by name: every rank buckets them in the same order, whatever its map's order.
    params: Vec<(String, Var)>,
    bucket_bytes: usize,
}

impl<B: PgBackend> DataParallel<B> {
    /// Every variable of `varmap`, broadcast from group rank 0 (see [`DataParallel::new`]).
    pub fn from_varmap(group: &TensorGroup<B>, varmap: &VarMap) -> Result<Self> {
        let params = varmap
            .data()
            .lock()
            .map_err(|_| {
                Error::invalid(
                    "varmap",
                    "its lock is poisoned (a thread panicked holding it)",
                )
            })?
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        DataParallel::new(group, params)
    }

    /// The named parameters `params`; every rank passes the same names, dtypes and shapes
    /// (compared across ranks: [`Error::Mismatch`] otherwise). Their values are set to group
    /// rank 0's, so the ranks start from the same model.
    pub fn new(group: &TensorGroup<B>, mut params: Vec<(String, Var)>) -> Result<Self> {
        params.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, v) in &params {
            if v.dtype() != DType::F32
                && v.dtype() != DType::F64
                && v.dtype() != DType::BF16
                && v.dtype() != DType::F16
            {
                return Err(Error::DType {
                    arg: "params",
                    dtype: v.dtype(),
                    why: "is not a float type (gradients are averaged)",
                });
            }
            crate::group::device_arg("params", v.as_tensor())?;
        }
        let ddp = DataParallel {
            group: group.clone(),
            params,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
        };
        ddp.agree_on_params()?;
        ddp.broadcast_parameters(group.pg().ranks().first().copied().unwrap_or(0) as usize)?;
        Ok(ddp)
    }

    /// Buckets of at most `bytes` (one parameter larger than that has a bucket of its own).
    pub fn with_bucket_bytes(mut self, bytes: usize) -> Result<Self> {
        if bytes == 0 {
            return Err(Error::invalid("bytes", "a bucket of at least one byte"));
        }
        self.bucket_bytes = bytes;
        Ok(self)
    }

    /// The parameters, by name.
    pub fn params(&self) -> &[(String, Var)] {
        &self.params
    }

    /// The number of buckets a step's gradients travel in.
    pub fn buckets(&self) -> usize {
        self.plan().len()
    }

    /// Sets every parameter to global rank `root`'s value.
    pub fn broadcast_parameters(&self, root: usize) -> Result<()> {
        let tensors: Vec<Tensor> = self
            .params
            .iter()
            .map(|(_, v)| v.as_tensor().clone())
            .collect();
        let new = self.bucketed(&tensors, Collective::Broadcast(root as u32))?;
        for ((_, v), t) in self.params.iter().zip(new) {
            v.set(&t)?;
        }
        Ok(())
    }

    /// `loss.backward()`, then the gradients averaged across the group
    /// ([`DataParallel::average_gradients`]).
    pub fn backward(&self, loss: &Tensor) -> Result<GradStore> {
        self.average_gradients(loss.backward()?)
    }

    /// The parameters' gradients of `grads` averaged across the group, in buckets, one
    /// coalesced batch: what every rank's optimizer steps with. A parameter without a gradient
    /// on this rank counts as zeros (every rank must send the same buckets).
    pub fn average_gradients(&self, mut grads: GradStore) -> Result<GradStore> {
        let tensors: Vec<Tensor> = self
            .params
            .iter()
            .map(|(_, v)| match grads.get(v.as_tensor()) {
                Some(g) => Ok(g.clone()),
                None => v.zeros_like(),
            })
            .collect::<candle_core::Result<_>>()?;
        let avg = self.bucketed(&tensors, Collective::Average)?;
        for ((_, v), g) in self.params.iter().zip(avg) {
            grads.insert(v.as_tensor(), g);
        }
        Ok(grads)
    }

    /// Buckets: indices into `params`, one dtype each, at most `bucket_bytes` each.
    fn plan(&self) -> Vec<Vec<usize>> {
        let mut buckets: Vec<(DType, usize, Vec<usize>)> = Vec::new();
        for (i, (_, v)) in self.params.iter().enumerate() {
            let bytes = v.elem_count() * v.dtype().size_in_bytes();
            match buckets.iter_mut().rev().find(|(d, _, _)| *d == v.dtype()) {
                Some((_, used, idx)) if *used + bytes <= self.bucket_bytes => {
                    *used += bytes;
                    idx.push(i);
                }
                _ => buckets.push((v.dtype(), bytes, vec![i])),
            }
        }
        buckets.into_iter().map(|(_, _, idx)| idx).collect()
    }

    fn bucketed(&self, tensors: &[Tensor], c: Collective) -> Result<Vec<Tensor>> {
        let plan = self.plan();
        let dtypes: Vec<DType> = plan.iter().map(|b| self.params[b[0]].1.dtype()).collect();
        let mut out: Vec<Option<Tensor>> = vec![None; tensors.len()];
        // One coalesced batch per dtype (a fused batch carries one element type).
        let mut seen = Vec::new();
        for d in dtypes.iter().copied() {
            if seen.contains(&d) {
                continue;
            }
            seen.push(d);
            let mine: Vec<&Vec<usize>> = plan
                .iter()
                .zip(&dtypes)
                .filter(|(_, bd)| **bd == d)
                .map(|(b, _)| b)
                .collect();
            with_elem!(d, "params", T => self.run::<T>(tensors, &mine, c, &mut out)?);
        }
        out.into_iter()
            .enumerate()
            .map(|(i, t)| {
                t.ok_or_else(|| Error::invalid("params", format!("parameter {i} in no bucket")))
            })
            .collect()
    }

    fn run<T: Element + candle_core::WithDType>(
        &self,
        tensors: &[Tensor],
        buckets: &[&Vec<usize>],
        c: Collective,
        out: &mut [Option<Tensor>],
    ) -> Result<()> {
        let pg = self.group.pg();
        let mut bufs = Vec::with_capacity(buckets.len());
        for b in buckets {
            let mut flat = Vec::new();
            for &i in b.iter() {
                flat.extend(crate::group::host::<T>(&tensors[i], "params")?);
            }
            bufs.push(pg.upload(&flat)?);
        }
        match c {
            Collective::Average => {
                let mut refs: Vec<_> = bufs.iter_mut().collect();
                pg.all_reduce_coalesced(&mut refs, ReduceOp::Avg)?.wait()?;
            }
            Collective::Broadcast(root) => {
                pg.coalesced(|block| {
                    for b in bufs.iter_mut() {
                        block.broadcast(b, root)?;
                    }
                    Ok(())
                })?
                .wait()?;
            }
        }
        for (b, buf) in buckets.iter().zip(&bufs) {
            let flat = pg.download(buf)?;
            let mut at = 0;
            for &i in b.iter() {
                let t = &tensors[i];
                let n = t.elem_count();
                let part = flat.get(at..at + n).ok_or_else(|| {
                    Error::invalid("params", "a bucket came back shorter than it went")
                })?;
                out[i] = Some(Tensor::from_slice(part, t.shape(), t.device())?);
                at += n;
            }
        }
        Ok(())
    }

    /// Names, dtypes and shapes agree across ranks: one all-gather of a digest.
    fn agree_on_params(&self) -> Result<()> {
        if self.group.size() == 1 {
            return Ok(());
        }
        let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                digest ^= u64::from(*b);
                digest = digest.wrapping_mul(0x100_0000_01b3);
            }
        };
        for (name, v) in &self.params {
            eat(name.as_bytes());
            eat(v.dtype().as_str().as_bytes());
            for d in v.dims() {
                eat(&d.to_le_bytes());
            }
        }
        let mine = Tensor::new(&[digest as i64, self.params.len() as i64], &Device::Cpu)?;
        let all = self.group.all_gather(&mine, 0)?.to_vec1::<i64>()?;
        for (r, theirs) in all.chunks(2).enumerate() {
            if theirs != [digest as i64, self.params.len() as i64] {
                return Err(Error::Mismatch {
                    arg: "params",
                    rank: self.group.pg().ranks().get(r).copied().unwrap_or(r as u32),
                    ours: format!("{} parameters (digest {digest:#x})", self.params.len()),
                    theirs: format!("{} parameters (digest {:#x})", theirs[1], theirs[0] as u64),
                });
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Collective {
    Average,
    Broadcast(u32),
}

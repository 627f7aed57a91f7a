//! The all-reduce as a candle op, for model code: `x.apply_op1(group.all_reduce_op())`.

use crate::error::Error;
use crate::group::{with_elem, TensorGroup};
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor, WithDType};
use oxccl::pg::PgBackend;
use oxccl::{Element, ReduceOp};

/// Sum across the group as a candle [`CustomOp1`]: where a layer's partial results meet (the
/// row-parallel linear layer, the vocabulary-parallel embedding). Its gradient is the incoming
/// gradient unchanged (each rank's partial sum contributes to the total with weight one), so a
/// model built on it also trains.
///
/// Every rank must apply it to a tensor of the same dtype and shape, at the same point.
pub struct AllReduce<B: PgBackend> {
    group: TensorGroup<B>,
}

/// Megatron's "copy to the parallel region": the identity going forward, the sum across the
/// group going back. Applied to the input of a [`crate::tp::ColumnParallelLinear`], it gives each
/// rank the full gradient of that input (every rank's slice of the layer contributed to it).
pub struct ParallelInput<B: PgBackend> {
    group: TensorGroup<B>,
}

impl<B: PgBackend> CustomOp1 for ParallelInput<B> {
    fn name(&self) -> &'static str {
        "oxccl-parallel-input"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dtype: DType = storage.dtype();
        let copy = (|| -> crate::error::Result<CpuStorage> {
            with_elem!(dtype, "x", T => {
                let all = T::cpu_storage_as_slice(storage)?;
                let (start, end) = layout.contiguous_offsets().ok_or_else(|| {
                    Error::invalid("x", "a contiguous tensor (call .contiguous() first)")
                })?;
                Ok(T::to_cpu_storage(&all[start..end]))
            })
        })()?;
        Ok((copy, layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let copy = storage.copy_strided_src_to_contiguous(layout)?;
        Ok((copy, layout.shape().clone()))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(self.group.all_reduce_sum(grad_res)?))
    }
}

impl<B: PgBackend> TensorGroup<B> {
    /// `x` unchanged, its gradient summed across the group (see [`ParallelInput`]).
    pub fn parallel_input(&self, x: &Tensor) -> crate::error::Result<Tensor> {
        if self.size() == 1 {
            return Ok(x.clone());
        }
        crate::group::device_arg("x", x)?;
        Ok(x.contiguous()?.apply_op1(ParallelInput {
            group: self.clone(),
        })?)
    }

    /// The all-reduce (sum) as a candle op: `x.apply_op1(group.all_reduce_op())`.
    pub fn all_reduce_op(&self) -> AllReduce<B> {
        AllReduce {
            group: self.clone(),
        }
    }

    /// `x` summed across the group, as an op of candle's graph (see [`AllReduce`]).
    pub fn all_reduce_sum(&self, x: &Tensor) -> crate::error::Result<Tensor> {
        if self.size() == 1 {
            return Ok(x.clone());
        }
        crate::group::device_arg("x", x)?;
        Ok(x.contiguous()?.apply_op1(self.all_reduce_op())?)
    }
}

impl<B: PgBackend> AllReduce<B> {
    fn reduce<T: Element + WithDType>(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> crate::error::Result<CpuStorage> {
        let all = T::cpu_storage_as_slice(storage)?;
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| Error::invalid("x", "a contiguous tensor (call .contiguous() first)"))?;
        let pg = self.group.pg();
        let mut buf = pg.upload(&all[start..end])?;
        pg.all_reduce(&mut buf, ReduceOp::Sum)?.wait()?;
        Ok(T::to_cpu_storage_owned(pg.download(&buf)?))
    }

    fn cpu(&self, storage: &CpuStorage, layout: &Layout) -> crate::error::Result<CpuStorage> {
        let dtype: DType = storage.dtype();
        with_elem!(dtype, "x", T => self.reduce::<T>(storage, layout))
    }
}

impl<B: PgBackend> CustomOp1 for AllReduce<B> {
    fn name(&self) -> &'static str {
        "oxccl-all-reduce"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((self.cpu(storage, layout)?, layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((
            crate::cuda::all_reduce_sum(self.group.pg(), storage, layout)?,
            layout.shape().clone(),
        ))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad_res.clone()))
    }
}

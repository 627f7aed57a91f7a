//! CUDA tensors through NCCL, without a copy to the host: candle's CUDA storage is a cudarc
//! `CudaSlice<T>` on its device's stream, which oxccl's NCCL backend takes as it is
//! (`Operand<Nccl>`), ordering its stream after the slice's last use by cudarc's events.
//!
//! NOT YET BUILT: candle's `cuda` feature compiles its kernels with nvcc, which the CI machine
//! lacks. This module is written against candle-core 0.11.1 and oxccl's `Nccl` backend, and is
//! compiled first on a GPU machine (`cargo build -p oxccl-candle --features cuda`).

use crate::error::{Error, Result};
use crate::group::with_elem;
use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::cuda_backend::CudaStorage;
use candle_core::{DType, DeviceLocation, Layout};
use oxccl::pg::{PgBackend, ProcessGroup};
use oxccl::{Nccl, ReduceOp};
use std::any::Any;

/// The group as an NCCL group on `storage`'s GPU, or the typed error naming `arg`: a CUDA
/// tensor needs the NCCL backend (a mock group takes CPU tensors only) on the group's device.
pub(crate) fn nccl_group<'a, B: PgBackend>(
    arg: &'static str,
    pg: &'a ProcessGroup<B>,
    storage: &CudaStorage,
) -> Result<&'a ProcessGroup<Nccl>> {
    let got = storage.device().location();
    let nccl = (pg as &dyn Any)
        .downcast_ref::<ProcessGroup<Nccl>>()
        .ok_or_else(|| Error::Device {
            arg,
            got: got.clone(),
            expected: "a CPU tensor: this group runs on the mock backend".into(),
        })?;
    let want = nccl.options().device.0 as usize;
    match got {
        DeviceLocation::Cuda { gpu_id } if gpu_id == want => Ok(nccl),
        other => Err(Error::Device {
            arg,
            got: other,
            expected: format!("a tensor on the group's GPU, cuda:{want}"),
        }),
    }
}

/// `storage` (contiguous, per `layout`) summed across the group into new storage on the same
/// device: the CUDA side of the `AllReduce` op.
pub(crate) fn all_reduce_sum<B: PgBackend>(
    pg: &ProcessGroup<B>,
    storage: &CudaStorage,
    layout: &Layout,
) -> Result<CudaStorage> {
    let nccl = nccl_group("x", pg, storage)?;
    let (start, end) = layout
        .contiguous_offsets()
        .ok_or_else(|| Error::invalid("x", "a contiguous tensor (call .contiguous() first)"))?;
    let dtype: DType = storage.dtype();
    with_elem!(dtype, "x", T => {
        let src = storage.as_cuda_slice::<T>()?;
        // CustomOp1 returns new storage: copy the input on candle's stream, reduce the copy in
        // place on the group's stream (the slice's events order the two).
        let stream = storage.device().cuda_stream();
        let mut out = stream
            .clone_dtod(&src.slice(start..end))
            .map_err(|e| Error::Candle(candle_core::Error::wrap(e)))?;
        nccl.all_reduce(&mut out, ReduceOp::Sum)?;
        Ok(CudaStorage::wrap_cuda_slice(out, storage.device().clone()))
    })
}

//! The NaN check on device memory: a small kernel shipped as PTX text (comm/kernels/nan.ptx),
//! loaded through the CUDA driver once per device (no NVRTC, no toolkit at run time), that
//! sets a flag when an element is a NaN. The flag is read back, so the check synchronizes its
//! stream: it is opt-in (`OXCCL_NAN_CHECK`).

use crate::element::{Element, FloatFormat};
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use oxccl_core::Result;
use oxccl_nccl::{cuda_error, NcclStream};

const PTX: &str = include_str!("../../kernels/nan.ptx");

/// Threads per block and the most blocks one check launches (a grid-stride loop covers the
/// rest): enough to saturate memory bandwidth on any current GPU.
const THREADS: u32 = 256;
const MAX_BLOCKS: u64 = 4096;

fn function(stream: &NcclStream, name: &str) -> Result<CudaFunction> {
    oxccl_nccl::ptx_module(stream.cuda().context(), PTX, "the NaN-check kernels")?
        .load_function(name)
        .map_err(|e| cuda_error("finding a NaN-check kernel", e))
}

/// Whether `buf` holds a NaN, by the kernel for its float format.
pub(super) fn has_nan<T: Element>(stream: &NcclStream, buf: &CudaSlice<T>) -> Result<bool> {
    let Some(format) = T::FLOAT else {
        return Ok(false);
    };
    let n = buf.len() as u64;
    if n == 0 {
        return Ok(false);
    }
    let st = stream.cuda();
    let mut flag = st
        .alloc_zeros::<u32>(1)
        .map_err(|e| cuda_error("allocating the NaN flag", e))?;
    let blocks = n.div_ceil(u64::from(THREADS)).min(MAX_BLOCKS) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let (name, inf) = match format {
        FloatFormat::F16 => ("nan16", Some(0x7c00u32)),
        FloatFormat::Bf16 => ("nan16", Some(0x7f80u32)),
        FloatFormat::F32 => ("nan32", None),
        FloatFormat::F64 => ("nan64", None),
    };
    let f = function(stream, name)?;
    let mut launch = st.launch_builder(&f);
    launch.arg(buf).arg(&n).arg(&mut flag);
    if let Some(inf) = &inf {
        launch.arg(inf);
    }
    // SAFETY: the kernels take (const element*, u64 count, u32* flag[, u32 pattern]), which is
    // what is pushed: `buf` holds `n` elements of the width the kernel reads, the flag is one
    // u32 on the same stream, and cudarc orders both after their earlier writers.
    unsafe { launch.launch(cfg) }.map_err(|e| cuda_error("launching the NaN check", e))?;
    let found = st
        .clone_dtoh(&flag)
        .map_err(|e| cuda_error("reading the NaN flag", e))?;
    Ok(found.first().is_some_and(|&v| v != 0))
}

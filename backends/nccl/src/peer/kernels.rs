//! The kernels: PTX text (peer_reduce.ptx, made from backends/nccl/kernels/
//! peer_reduce.cu by kernels/gen_ptx.py) loaded through the driver once per device, and their
//! launch.

use crate::cuda::cuda_error;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule};
use oxccl_core::peer_kernels::{geometry, KernelAlgo, KernelCall, KernelType, MAX_RANKS};
use oxccl_core::Result;
use std::sync::Arc;

const PTX: &str = include_str!("peer_reduce.ptx");

/// The kernels' last argument, laid out as peer_reduce.cu's `PeerArgs`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerArgs {
    /// Each rank's peer memory as mapped in this process (own included).
    pub(crate) peers: [u64; MAX_RANKS as usize],
    pub(crate) lines_per_slot: u64,
    pub(crate) timeout_ns: u64,
    /// Device address of the abort flag (host memory).
    pub(crate) abort_flag: u64,
    /// Device address of the status block (host memory).
    pub(crate) status: u64,
    pub(crate) scale: f64,
    pub(crate) rank: u32,
    pub(crate) nranks: u32,
    pub(crate) op: u32,
    pub(crate) pad: u32,
}

/// The loaded kernels of one device: a function per kernel and type.
#[derive(Debug)]
pub(crate) struct Kernels {
    _module: Arc<CudaModule>,
    /// By [`KernelAlgo::index`], then by [`KernelType::index`].
    functions: Vec<Vec<CudaFunction>>,
}

impl Kernels {
    /// The kernels of `ctx`'s device (loaded once per device).
    pub(crate) fn of(ctx: &Arc<CudaContext>) -> Result<Kernels> {
        let module = crate::ptx::ptx_module(ctx, PTX, "the all-reduce kernels")?;
        let load = |algo: KernelAlgo| -> Result<Vec<CudaFunction>> {
            KernelType::ALL
                .iter()
                .map(|t| {
                    module
                        .load_function(&format!("{}{}", algo.entry(), t.suffix()))
                        .map_err(|e| cuda_error("finding a peer kernel", e))
                })
                .collect()
        };
        Ok(Kernels {
            functions: KernelAlgo::EVERY
                .into_iter()
                .map(load)
                .collect::<Result<_>>()?,
            _module: module,
        })
    }

    /// Launches `algo` for `call` on `stream`.
    ///
    /// # Safety
    ///
    /// `call.send` and `call.recv` hold `call.count` elements of its type on this device and
    /// stay valid until the kernel ends; `args` names live peer memory of a group whose every
    /// rank launches the same call; `stream` is a live stream of this device.
    pub(crate) unsafe fn launch(
        &self,
        algo: KernelAlgo,
        call: &KernelCall,
        args: &PeerArgs,
        stream: sys::CUstream,
    ) -> Result<()> {
        let Some(f) = self
            .functions
            .get(algo.index())
            .and_then(|f| f.get(call.ty.index()))
        else {
            return Err(oxccl_core::Error::invalid(
                "dtype",
                format_args!("a type the peer kernels were loaded for"),
            ));
        };
        let lines = algo.lines_per_rank(call.lines(), args.nranks);
        let (blocks, threads) = geometry(lines);
        let (mut send, mut recv, mut count, mut a) =
            (call.send as u64, call.recv as u64, call.count, *args);
        let mut params: [*mut std::ffi::c_void; 4] = [
            (&mut send as *mut u64).cast(),
            (&mut recv as *mut u64).cast(),
            (&mut count as *mut u64).cast(),
            (&mut a as *mut PeerArgs).cast(),
        ];
        // SAFETY: the kernel takes (const T*, T*, u64, PeerArgs) and `params` points at exactly
        // those, alive for the call (the driver copies them at launch); the caller vouches
        // for the buffers, the peer memory and the stream.
        unsafe {
            sys::cuLaunchKernel(
                f.cu_function(),
                blocks,
                1,
                1,
                threads,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(|e| cuda_error("launching a peer kernel", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel the loader asks for is in the shipped PTX, taking what `launch` passes:
    /// two pointers, the count and the arguments as laid out here (checked without a GPU).
    #[test]
    fn the_ptx_has_every_kernel_with_the_launch_parameters() {
        let args = std::mem::size_of::<PeerArgs>();
        for algo in KernelAlgo::EVERY {
            for ty in KernelType::ALL {
                let name = format!("{}{}", algo.entry(), ty.suffix());
                let head = format!(".visible .entry {name}(");
                let at = PTX
                    .find(&head)
                    .unwrap_or_else(|| panic!("{name} not in the PTX"));
                let params = &PTX[at..][..PTX[at..].find(')').expect("parameter list")];
                for p in 0..3 {
                    assert!(
                        params.contains(&format!(".param .u64 {name}_param_{p},")),
                        "{name}: parameter {p}"
                    );
                }
                assert!(
                    params.contains(&format!(".b8 {name}_param_3[{args}]")),
                    "{name}: PeerArgs of {args} bytes\n{params}"
                );
            }
        }
    }
}

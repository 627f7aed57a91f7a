//! The kernels: PTX text (kernels/peer_reduce.ptx, and kernels/peer_reduce_sm90.ptx for
//! compute capability 9.0 and up, made from kernels/peer_reduce.cu by kernels/gen_ptx.py)
//! loaded through the driver once per device, and their launch.

use crate::cuda::cuda_error;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule};
use oxccl_core::peer_kernels::{KernelAlgo, KernelCall, KernelType, MAX_RANKS};
use oxccl_core::Result;
use std::sync::Arc;

/// The kernels for compute capability 8.0 and up, launched one after another.
const PTX: &str = include_str!("../../kernels/peer_reduce.ptx");
/// The same kernels for compute capability 9.0 and up, each of which first waits for the kernel
/// ahead of it on the stream (`griddepcontrol`), so it may be launched before that one ends.
const PTX_SM90: &str = include_str!("../../kernels/peer_reduce_sm90.ptx");

/// The first driver (12.3) whose graphs keep a launch's programmatic dependency.
const EARLY_LAUNCH_DRIVER: i32 = 12030;

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
    /// Device address of the stream's end-mark slot (see `end_mark`), with a mark.
    pub(crate) mark_word: u64,
    /// This call's end mark, or 0 for none.
    pub(crate) mark: u64,
    pub(crate) scale: f64,
    pub(crate) rank: u32,
    pub(crate) nranks: u32,
    pub(crate) op: u32,
    /// This launch's number among the group's (nonzero; see `peer_reduce.cu`'s "one call
    /// after another").
    pub(crate) seq: u32,
    /// The number of the group's launch this one may follow block by block, or 0.
    pub(crate) follow: u32,
    pub(crate) pad: u32,
}

/// The loaded kernels of one device: a function per kernel and type.
#[derive(Debug)]
pub(crate) struct Kernels {
    _module: Arc<CudaModule>,
    /// By [`KernelAlgo::index`], then by [`KernelType::index`].
    functions: Vec<Vec<CudaFunction>>,
    /// Launched as programmatic dependents of the kernel ahead (the sm_90 kernels, which
    /// wait for it first, on a driver that keeps the dependency in graphs too).
    early: bool,
}

impl Kernels {
    /// The kernels of `ctx`'s device (loaded once per device).
    pub(crate) fn of(ctx: &Arc<CudaContext>) -> Result<Kernels> {
        let major = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(|e| cuda_error("reading the device's compute capability", e))?;
        let mut driver = 0;
        // SAFETY: writes the driver's version into a local.
        let known = unsafe { sys::cuDriverGetVersion(&mut driver) }
            .result()
            .is_ok();
        let early = major >= 9 && known && driver >= EARLY_LAUNCH_DRIVER;
        let ptx = if early { PTX_SM90 } else { PTX };
        let module = crate::ptx::ptx_module(ctx, ptx, "the all-reduce kernels")?;
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
            early,
        })
    }

    /// Whether the kernels are launched early (programmatic dependents of the kernel ahead),
    /// which lets a call follow the one before block by block.
    pub(crate) fn early(&self) -> bool {
        self.early
    }

    /// Launches `algo` for `call` on `stream` in `shape` (blocks, threads per block: `geometry`
    /// of the lines each rank handles).
    ///
    /// # Safety
    ///
    /// `call.send` and `call.recv` hold `call.count` elements of its type on this device and
    /// stay valid until the kernel ends; `args` names live peer memory of a group whose every
    /// rank launches the same call in the same `shape` (the kernels' chunks and blocks must
    /// agree across ranks), and with a mark, a slot of this device that outlives the kernel;
    /// `stream` is a live stream of this device.
    pub(crate) unsafe fn launch(
        &self,
        algo: KernelAlgo,
        call: &KernelCall,
        args: &PeerArgs,
        (blocks, threads): (u32, u32),
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
        debug_assert!(
            args.mark == 0 || (self.early && args.seq == 0),
            "only an early, unnumbered call marks its end"
        );
        let (mut send, mut recv, mut count, mut a) =
            (call.send as u64, call.recv as u64, call.count, *args);
        let mut params: [*mut std::ffi::c_void; 4] = [
            (&mut send as *mut u64).cast(),
            (&mut recv as *mut u64).cast(),
            (&mut count as *mut u64).cast(),
            (&mut a as *mut PeerArgs).cast(),
        ];
        // SAFETY: an all-zero attribute is a valid value of this plain C struct (id 0, zeroed
        // union); the one passed gets its id and value next.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: blocks,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: threads,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: stream,
            attrs: &mut attr,
            // Early, the kernel is a programmatic dependent of the one ahead of it on the
            // stream: it may start before that one ends (the sm_90 kernels wait for it first,
            // then let the next one launch). Otherwise no attribute: a plain launch (the call
            // is CUDA 12.0's; a driver that loads the PTX, ISA 8.1, is 12.1 or newer).
            numAttrs: u32::from(self.early),
        };
        // SAFETY: the kernel takes (const T*, T*, u64, PeerArgs) and `params` points at exactly
        // those, alive for the call (the driver copies them at launch); `cfg` and `attr` are
        // alive for the call; an early launch goes only to the sm_90 kernels, which wait for
        // the kernel ahead before they touch memory; the caller vouches for the buffers, the
        // peer memory, the mark's slot and the stream.
        unsafe {
            sys::cuLaunchKernelEx(
                &cfg,
                f.cu_function(),
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

    /// Every kernel the loader asks for is in both shipped PTX texts, taking what `launch`
    /// passes: two pointers, the count and the arguments as laid out here; the sm_90 kernels
    /// decide whether to follow the call before (a call to the one function that does) and
    /// wait before they touch any other memory, the others never wait (checked without a
    /// GPU).
    #[test]
    fn the_ptx_has_every_kernel_with_the_launch_parameters() {
        let args = std::mem::size_of::<PeerArgs>();
        for (ptx, early) in [(PTX, false), (PTX_SM90, true)] {
            for algo in KernelAlgo::EVERY {
                for ty in KernelType::ALL {
                    let name = format!("{}{}", algo.entry(), ty.suffix());
                    let head = format!(".visible .entry {name}(");
                    let at = ptx
                        .find(&head)
                        .unwrap_or_else(|| panic!("{name} not in the PTX"));
                    let params = &ptx[at..][..ptx[at..].find(')').expect("parameter list")];
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
                    // The body, up to the next entry: on sm_90 the wait comes before its
                    // first access to memory (parameters and shared memory aside) and after
                    // the call that decides whether the block follows, the body's only call.
                    let body = &ptx[at..];
                    let end = body[head.len()..]
                        .find(".entry")
                        .map_or(body.len(), |e| e + head.len());
                    let body = &body[..end];
                    let memory = body
                        .lines()
                        .scan(0, |at, l| {
                            let here = *at;
                            *at += l.len() + 1;
                            Some((here, l.trim()))
                        })
                        .find(|(_, l)| {
                            ["ld.", "st.", "atom.", "red."]
                                .iter()
                                .any(|p| l.starts_with(p))
                                && !l.starts_with("ld.param")
                                && !l.starts_with("st.param")
                                && !l.contains(".shared")
                        })
                        .map(|(at, _)| at)
                        .expect("a memory access");
                    if early {
                        let wait = body.find("griddepcontrol.wait").expect("the wait");
                        assert!(wait < memory, "{name}: memory touched before the wait");
                        let call = body.find("call.uni").expect("the call that decides");
                        assert!(call < wait, "{name}: the decision comes after the wait");
                        // The callee is the call's first operand after the return value,
                        // whatever the compiler's spacing or name mangling.
                        let callee = body[call..]
                            .split(';')
                            .next()
                            .and_then(|c| c.split(',').nth(1))
                            .map(str::trim)
                            .unwrap_or("");
                        assert!(
                            callee.contains("follow_block"),
                            "{name}: a call to another function: {callee}"
                        );
                        assert_eq!(body.matches("call.uni").count(), 1, "{name}: calls");
                    }
                    assert_eq!(body.contains("griddepcontrol"), early, "{name}");
                    assert_eq!(body.contains("call.uni"), early, "{name}");
                }
            }
        }
    }
}

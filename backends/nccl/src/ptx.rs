//! oxccl's own device code: PTX text loaded through the driver once per device and program
//! (no NVRTC and no toolkit at run time; the driver compiles it for the GPU at hand).

use crate::cuda::cuda_error;
use cudarc::driver::{CudaContext, CudaModule};
use oxccl_core::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Loaded modules by (device ordinal, address of their PTX text).
type Loaded = Mutex<HashMap<(usize, usize), Arc<CudaModule>>>;

/// The module of `ptx` on `ctx`'s device, loaded on first use and kept for the process
/// (`what` names the program in errors).
pub fn ptx_module(
    ctx: &Arc<CudaContext>,
    ptx: &'static str,
    what: &str,
) -> Result<Arc<CudaModule>> {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    let key = (ctx.ordinal(), ptx.as_ptr() as usize);
    let mut map = LOADED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(m) = map.get(&key) {
        return Ok(m.clone());
    }
    let m = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
        .map_err(|e| cuda_error(&format!("loading {what}"), e))?;
    map.insert(key, m.clone());
    Ok(m)
}

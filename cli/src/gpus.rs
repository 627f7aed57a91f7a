//! The GPUs of this machine and the links between each pair, through the CUDA driver
//! (cudarc's `driver::sys`) and NVML. Every driver call is behind `require_driver`, so a
//! machine without a GPU gets "no GPU" instead of a panic. The link kind comes from the
//! driver's P2P attributes (NVLink is inferred from native atomics over P2P, which PCIe peer
//! access does not offer); the NVLink count from NVML ([`crate::nvml`]), where it is.

use cudarc::driver::sys;
use serde_json::{json, Value};

/// One GPU.
pub struct Gpu {
    /// Ordinal.
    pub index: i32,
    /// The driver's name for it.
    pub name: String,
    /// Total memory in bytes.
    pub memory: usize,
}

/// How two GPUs reach each other.
pub struct GpuLink {
    /// From this ordinal.
    pub a: i32,
    /// To this ordinal.
    pub b: i32,
    /// "NVLink", "PCIe P2P" or "host (no P2P)".
    pub kind: &'static str,
    /// The driver's relative performance rank of the P2P link (lower is faster).
    pub perf_rank: i32,
    /// NVLinks between the two (NVML), and whether through NVSwitches.
    pub nvlinks: Option<(u32, bool)>,
}

/// The GPUs, their links, and why NVML could not count NVLinks (if it could not).
pub type Probe = (Vec<Gpu>, Vec<GpuLink>, Option<String>);

/// The GPUs and their links, or why there are none to report.
pub fn probe() -> Result<Probe, String> {
    oxccl::nccl::require_driver().map_err(|_| {
        "no GPU: the CUDA driver (libcuda.so) is not installed here; perf and check run on the mock world"
            .to_owned()
    })?;
    // SAFETY: the driver library is present (checked above); every out-pointer is a live local,
    // the name buffer's length is passed with it, and ordinals come from cuDeviceGetCount.
    unsafe {
        let ok = |r: sys::CUresult, what: &str| {
            if r == sys::CUresult::CUDA_SUCCESS {
                Ok(())
            } else {
                Err(format!("no GPU: {what} failed ({r:?})"))
            }
        };
        ok(sys::cuInit(0), "cuInit")?;
        let mut n = 0;
        ok(sys::cuDeviceGetCount(&mut n), "cuDeviceGetCount")?;
        let mut gpus = Vec::new();
        let (mut bus_ids, mut addrs) = (Vec::new(), Vec::new());
        for i in 0..n {
            let mut dev = 0;
            ok(sys::cuDeviceGet(&mut dev, i), "cuDeviceGet")?;
            let mut bus = [0 as std::ffi::c_char; 32];
            ok(
                sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, dev),
                "cuDeviceGetPCIBusId",
            )?;
            bus_ids.push(driver_text(std::ffi::CStr::from_ptr(bus.as_ptr())));
            let pci = |at: sys::CUdevice_attribute| {
                let mut v = 0;
                let r = sys::cuDeviceGetAttribute(&mut v, at, dev);
                if r == sys::CUresult::CUDA_SUCCESS {
                    v as u32
                } else {
                    u32::MAX
                }
            };
            use sys::CUdevice_attribute as D;
            addrs.push(crate::nvml::PciAddr {
                domain: pci(D::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
                bus: pci(D::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
                device: pci(D::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
            });
            let mut name = [0 as std::ffi::c_char; 256];
            ok(
                sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev),
                "cuDeviceGetName",
            )?;
            let name = driver_text(std::ffi::CStr::from_ptr(name.as_ptr()));
            let mut mem = 0usize;
            ok(sys::cuDeviceTotalMem_v2(&mut mem, dev), "cuDeviceTotalMem")?;
            gpus.push(Gpu {
                index: i,
                name,
                memory: mem,
            });
        }
        let reach = crate::nvml::probe(&bus_ids, &addrs);
        let mut links = Vec::new();
        for a in 0..n {
            for b in (a + 1)..n {
                let (mut da, mut db) = (0, 0);
                ok(sys::cuDeviceGet(&mut da, a), "cuDeviceGet")?;
                ok(sys::cuDeviceGet(&mut db, b), "cuDeviceGet")?;
                let attr = |at: sys::CUdevice_P2PAttribute| {
                    let mut v = 0;
                    let r = sys::cuDeviceGetP2PAttribute(&mut v, at, da, db);
                    if r == sys::CUresult::CUDA_SUCCESS {
                        v
                    } else {
                        0
                    }
                };
                use sys::CUdevice_P2PAttribute as A;
                let access = attr(A::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED);
                let atomics = attr(A::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED);
                let perf_rank = attr(A::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK);
                let nvlinks = reach
                    .as_ref()
                    .ok()
                    .and_then(|r| crate::nvml::between(&r[a as usize], &r[b as usize], b as usize));
                links.push(GpuLink {
                    a,
                    b,
                    kind: link_kind(access != 0, atomics != 0),
                    perf_rank,
                    nvlinks,
                });
            }
        }
        Ok((gpus, links, reach.err()))
    }
}

/// The link kind the driver's P2P attributes imply.
pub fn link_kind(access: bool, native_atomics: bool) -> &'static str {
    match (access, native_atomics) {
        (true, true) => "NVLink",
        (true, false) => "PCIe P2P",
        _ => "host (no P2P)",
    }
}

/// The report as JSON.
pub fn to_json(r: &Result<Probe, String>) -> Value {
    match r {
        Ok((gpus, links, nvml)) => json!({
            "gpus": gpus.iter().map(|g| json!({"index": g.index, "name": g.name, "memory_bytes": g.memory})).collect::<Vec<_>>(),
            "links": links.iter().map(|l| json!({
                "a": l.a, "b": l.b, "kind": l.kind, "perf_rank": l.perf_rank,
                "nvlinks": l.nvlinks.map(|(n, _)| n),
                "through_nvswitch": l.nvlinks.map(|(_, s)| s),
            })).collect::<Vec<_>>(),
            "nvml": match nvml { None => json!("ok"), Some(e) => json!(e) },
        }),
        Err(e) => json!({"gpus": [], "links": [], "error": e}),
    }
}

/// A string the driver wrote, as `oxccl info` shows every such text: bytes that are not UTF-8
/// as `\xNN` (the loader's one rendering), never replaced.
fn driver_text(s: &std::ffi::CStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    oxccl::loader::text::os_text(std::ffi::OsStr::from_bytes(s.to_bytes())).into_owned()
}

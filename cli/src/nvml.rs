//! NVLink counts between this machine's GPUs, through NVML (`libnvidia-ml.so.1`, opened when
//! `oxccl info` runs; a machine without NVIDIA's driver gets the reason instead). Each GPU's
//! active links are followed to what they reach: another GPU (found by its PCI address), an
//! NVSwitch, or something else. Two GPUs count their direct links, or, with none, the links
//! both have into the switches (as `nvidia-smi topo -m` reports NV18 on an HGX board).

use libloading::{Library, Symbol};
use std::ffi::{c_char, c_int, c_uint, c_void, CString};

/// A GPU's PCI address, as the CUDA driver gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciAddr {
    /// PCI domain.
    pub domain: u32,
    /// PCI bus.
    pub bus: u32,
    /// Device on the bus.
    pub device: u32,
}

/// What one GPU's active NVLinks reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// Active links.
    pub active: u32,
    /// Links to each GPU of this machine, by CUDA ordinal.
    pub to_gpu: Vec<u32>,
    /// Links to NVSwitches.
    pub to_switch: u32,
    /// Links to anything else (a GPU not visible here, a bridge).
    pub other: u32,
}

/// NVLinks between GPU `a` (its `ra`) and GPU `b` (its `rb`): the direct ones, else those
/// both have into switches (the fewer of the two); `true` when through switches; `None`
/// when they share no NVLink.
pub fn between(ra: &Reach, rb: &Reach, b: usize) -> Option<(u32, bool)> {
    match ra.to_gpu.get(b).copied().unwrap_or(0) {
        0 if ra.to_switch > 0 && rb.to_switch > 0 => Some((ra.to_switch.min(rb.to_switch), true)),
        0 => None,
        n => Some((n, false)),
    }
}

/// What a link's far end is, by NVML's device type (2: switch, 0: GPU) or, without it, by
/// whether its address is one of ours.
fn classify(reach: &mut Reach, remote_type: Option<c_int>, remote: PciAddr, gpus: &[PciAddr]) {
    let gpu = gpus.iter().position(|g| *g == remote);
    match (remote_type, gpu) {
        (Some(2), _) => reach.to_switch += 1,
        (Some(0) | None, Some(i)) => reach.to_gpu[i] += 1,
        _ => reach.other += 1,
    }
}

/// NVML's highest link count (18 on Hopper); links past a GPU's own count answer with an
/// error, which reads as inactive.
const MAX_LINKS: c_uint = 18;

type Device = *mut c_void;

/// Each GPU's [`Reach`], by CUDA ordinal; `bus_ids` are the driver's "0000:18:00.0" strings,
/// `addrs` the same GPUs' addresses. Err: why NVML could not say.
pub fn probe(bus_ids: &[String], addrs: &[PciAddr]) -> Result<Vec<Reach>, String> {
    // SAFETY: loading NVML runs its initializers, which only register the library; every
    // symbol below is declared with the signature nvml.h gives it.
    let lib = unsafe { Library::new("libnvidia-ml.so.1") }
        .map_err(|e| format!("NVML not found (libnvidia-ml.so.1: {e})"))?;
    let names: Vec<CString> = bus_ids
        .iter()
        .map(|b| CString::new(b.as_str()).map_err(|_| format!("a bus id with a NUL: {b:?}")))
        .collect::<Result<_, _>>()?;
    // SAFETY: the symbols are used while `lib` lives, each with nvml.h's signature; every
    // out-pointer is a live local, and the PCI-info buffer (256 bytes) is larger than any
    // NVML's `nvmlPciInfo_t`; handles come from NVML between its init and shutdown.
    unsafe {
        let init: Symbol<'_, unsafe extern "C" fn() -> c_int> = lib
            .get(b"nvmlInit_v2\0")
            .map_err(|_| "NVML has no nvmlInit_v2".to_owned())?;
        let shutdown: Symbol<'_, unsafe extern "C" fn() -> c_int> = lib
            .get(b"nvmlShutdown\0")
            .map_err(|_| "NVML has no nvmlShutdown".to_owned())?;
        let by_bus: Symbol<'_, unsafe extern "C" fn(*const c_char, *mut Device) -> c_int> = lib
            .get(b"nvmlDeviceGetHandleByPciBusId_v2\0")
            .map_err(|_| "NVML has no nvmlDeviceGetHandleByPciBusId_v2".to_owned())?;
        let state: Symbol<'_, unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> c_int> = lib
            .get(b"nvmlDeviceGetNvLinkState\0")
            .map_err(|_| "NVML has no nvmlDeviceGetNvLinkState".to_owned())?;
        let remote_pci: Symbol<'_, unsafe extern "C" fn(Device, c_uint, *mut c_void) -> c_int> =
            match lib.get(b"nvmlDeviceGetNvLinkRemotePciInfo_v2\0") {
                Ok(f) => f,
                Err(_) => lib
                    .get(b"nvmlDeviceGetNvLinkRemotePciInfo\0")
                    .map_err(|_| "NVML has no nvmlDeviceGetNvLinkRemotePciInfo".to_owned())?,
            };
        let remote_type: Option<
            Symbol<'_, unsafe extern "C" fn(Device, c_uint, *mut c_int) -> c_int>,
        > = lib.get(b"nvmlDeviceGetNvLinkRemoteDeviceType\0").ok();
        let rc = init();
        if rc != 0 {
            return Err(format!("nvmlInit_v2 failed ({rc})"));
        }
        let mut out = Vec::new();
        for (bus_id, c) in bus_ids.iter().zip(&names) {
            let mut reach = Reach {
                to_gpu: vec![0; addrs.len()],
                ..Reach::default()
            };
            let mut dev: Device = std::ptr::null_mut();
            let rc = by_bus(c.as_ptr(), &mut dev);
            if rc != 0 {
                shutdown();
                return Err(format!("NVML does not know the GPU at {bus_id} ({rc})"));
            }
            for link in 0..MAX_LINKS {
                let mut active: c_uint = 0;
                if state(dev, link, &mut active) != 0 || active != 1 {
                    continue;
                }
                reach.active += 1;
                // Every NVML's nvmlPciInfo_t starts with a 16-byte bus-id string, then domain,
                // bus and device as 32-bit integers (words 4, 5, 6); NVML writes into a zeroed
                // buffer larger than the struct.
                let mut pci = [0u32; 64];
                if remote_pci(dev, link, pci.as_mut_ptr().cast()) != 0 {
                    reach.other += 1;
                    continue;
                }
                let remote = PciAddr {
                    domain: pci[4],
                    bus: pci[5],
                    device: pci[6],
                };
                let kind = remote_type.as_ref().and_then(|f| {
                    let mut t: c_int = -1;
                    (f(dev, link, &mut t) == 0).then_some(t)
                });
                classify(&mut reach, kind, remote, addrs);
            }
            out.push(reach);
        }
        shutdown();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(bus: u32) -> PciAddr {
        PciAddr {
            domain: 0,
            bus,
            device: 0,
        }
    }

    #[test]
    fn links_are_classified_by_type_then_by_address() {
        let gpus = [addr(0x18), addr(0x2a)];
        let mut r = Reach {
            to_gpu: vec![0; 2],
            ..Reach::default()
        };
        classify(&mut r, Some(0), addr(0x2a), &gpus);
        classify(&mut r, None, addr(0x2a), &gpus);
        classify(&mut r, Some(2), addr(0x99), &gpus);
        classify(&mut r, None, addr(0x99), &gpus);
        classify(&mut r, Some(0), addr(0x77), &gpus);
        assert_eq!(r.to_gpu, vec![0, 2]);
        assert_eq!((r.to_switch, r.other), (1, 2));
    }

    #[test]
    fn pairs_count_direct_links_else_shared_switch_links() {
        let direct = Reach {
            active: 4,
            to_gpu: vec![0, 4],
            ..Reach::default()
        };
        assert_eq!(between(&direct, &Reach::default(), 1), Some((4, false)));
        let a = Reach {
            active: 18,
            to_gpu: vec![0, 0],
            to_switch: 18,
            other: 0,
        };
        let b = Reach {
            to_switch: 12,
            ..a.clone()
        };
        assert_eq!(between(&a, &b, 1), Some((12, true)));
        assert_eq!(between(&a, &Reach::default(), 1), None);
        assert_eq!(between(&Reach::default(), &a, 1), None);
    }
}

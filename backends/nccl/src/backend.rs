//! The loaded NCCL library as an oxccl backend: unique ids and communicators.

use crate::comm::NcclComm;
use crate::comm_inner::{Raw, Settings};
use crate::create::{config, create, discard, OutHandle};
use oxccl_core::{
    Backend, CommConfig, Device, Error, Feature, FeatureSet, Progress, Result, ResultCode,
    UniqueId, Version,
};
use oxccl_loader::{Library, LoadError, RawComm, RawConfig};
use std::sync::Arc;
use std::time::Duration;

/// How long nonblocking init, split and finalize may stay in progress by default (PyTorch's
/// default for its nonblocking timeout is 30 minutes; a communicator can be given its own).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// NCCL as loaded: makes unique ids and communicators, and opens and closes the groups of the
/// calling thread on this library (a cheap clone: an `Arc` of the library and the settings).
#[derive(Clone)]
pub struct NcclBackend {
    lib: Arc<Library>,
    settings: Settings,
}

impl std::fmt::Debug for NcclBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclBackend")
            .field("path", &self.lib.path())
            .field("version", &self.lib.version())
            .finish()
    }
}

impl NcclBackend {
    /// Finds and loads NCCL the usual way (explicit path aside: `OXCCL_NCCL_LIBRARY`, the
    /// system search, Python environments).
    pub fn load() -> std::result::Result<NcclBackend, LoadError> {
        Library::load().map(|l| NcclBackend::new(Arc::new(l)))
    }

    /// Loads NCCL from `path`.
    pub fn open(path: impl AsRef<std::path::Path>) -> std::result::Result<NcclBackend, LoadError> {
        Library::open(path.as_ref()).map(|l| NcclBackend::new(Arc::new(l)))
    }

    /// A backend over an already loaded library.
    pub fn new(lib: Arc<Library>) -> NcclBackend {
        NcclBackend {
            settings: Settings {
                timeout: DEFAULT_TIMEOUT,
                features: *lib.features(),
            },
            lib,
        }
    }

    /// A backend over `lib` with the settings of an existing communicator.
    pub(crate) fn from_parts(lib: Arc<Library>, settings: Settings) -> NcclBackend {
        NcclBackend { lib, settings }
    }

    /// The same backend whose communicators give up on nonblocking calls after `timeout`
    /// (a nonblocking init or split past it is reported as [`Error::Timeout`] at once and
    /// aborted in the background: `Aborting` until NCCL's abort returns, then `Aborted`; see
    /// [`oxccl_core::CommAbort::abort_in_background`]).
    pub fn with_timeout(mut self, timeout: Duration) -> NcclBackend {
        self.settings.timeout = timeout;
        self
    }

    /// The same backend with `feature` hidden from its communicators, as if the library lacked
    /// it: all-to-all, gather and scatter then use grouped send/recv, and gated calls are refused
    /// with [`Error::Unsupported`]. For testing the paths older releases take on a newer one.
    pub fn without(mut self, feature: Feature) -> NcclBackend {
        self.settings.features = self.settings.features.without(feature);
        self
    }

    /// The loaded library.
    pub fn library(&self) -> &Arc<Library> {
        &self.lib
    }

    fn rank_size(rank: u32, size: u32) -> Result<(i32, i32)> {
        let n = i32::try_from(size)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| Error::invalid("size", format_args!("1..={}, got {size}", i32::MAX)))?;
        if rank >= size {
            return Err(Error::invalid(
                "rank",
                format_args!("a rank below {size}, got {rank}"),
            ));
        }
        Ok((rank as i32, n))
    }

    /// What this backend hands its communicators.
    pub(crate) fn settings(&self) -> Settings {
        self.settings
    }

    /// One communicator per device, all in this process (`ncclCommInitAll`): rank i on
    /// `devices[i]`. Operations on them must then be issued inside one group from one thread,
    /// or from one thread per communicator.
    pub fn init_all(&self, devices: &[u32]) -> Result<Vec<NcclComm>> {
        let n = i32::try_from(devices.len())
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| Error::invalid("devices", format_args!("at least one device")))?;
        let mut seen = Vec::with_capacity(devices.len());
        for &d in devices {
            if seen.contains(&d) {
                return Err(Error::invalid(
                    "devices",
                    format_args!(
                        "distinct devices, {d} appears twice (NCCL refuses two ranks on one GPU)"
                    ),
                ));
            }
            seen.push(d);
        }
        let ctxs = devices
            .iter()
            .map(|&d| crate::cuda::context(Device(d)))
            .collect::<Result<Vec<_>>>()?;
        let list: Vec<i32> = devices.iter().map(|&d| d as i32).collect();
        let raws = crate::ffi::comm_init_all(&self.lib, &list)?;
        Ok(raws
            .into_iter()
            .zip(ctxs)
            .enumerate()
            .map(|(i, (raw, ctx))| {
                NcclComm::wrap(
                    self.lib.clone(),
                    ctx,
                    Raw {
                        raw,
                        rank: i as u32,
                        size: n as u32,
                        device: Device(devices[i]),
                        nonblocking: false,
                        initializing: false,
                        signals: env_signal_limits(),
                    },
                    self.settings,
                )
            })
            .collect())
    }

    /// Init from several unique ids (`ncclCommInitRankScalable`, 2.23+), which spreads the
    /// bootstrap of very large jobs over several roots.
    pub fn init_rank_scalable(
        &self,
        ids: &[UniqueId],
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
    ) -> Result<NcclComm> {
        crate::absent::gated(
            &self.settings.features,
            Feature::ScalableInit,
            self.lib.api().comm_init_rank_scalable,
            "ncclCommInitRankScalable",
        )?;
        let (r, n) = Self::rank_size(rank, size)?;
        let n_ids = i32::try_from(ids.len())
            .ok()
            .filter(|k| *k >= 1 && *k <= n)
            .ok_or_else(|| {
                Error::invalid(
                    "ids",
                    format_args!("1..={size} unique ids, got {}", ids.len()),
                )
            })?;
        let mut ids_copy = ids[..n_ids as usize].to_vec();
        let api = self.lib.api();
        self.init_with(rank, size, device, cfg, |raw, cfg_ptr| {
            // SAFETY: `init_with` hands a valid out-pointer and a config null or built for the
            // loaded version, alive for the call.
            unsafe { crate::ffi::comm_init_rank_scalable(api, raw, n, r, &mut ids_copy, cfg_ptr) }
        })
    }
}

impl Backend for NcclBackend {
    type Comm = NcclComm;

    fn version(&self) -> Version {
        self.lib.version()
    }

    fn features(&self) -> &FeatureSet {
        &self.settings.features
    }

    fn unique_id(&self) -> Result<UniqueId> {
        crate::ffi::get_unique_id(&self.lib)
    }

    fn device_count(&self) -> Result<u32> {
        crate::cuda::device_count()
    }

    fn init_rank(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
    ) -> Result<NcclComm> {
        let (r, n) = Self::rank_size(rank, size)?;
        let api = self.lib.api();
        self.init_with(rank, size, device, cfg, |raw, cfg_ptr| {
            if cfg_ptr.is_null() {
                // SAFETY: `init_with` hands a valid out-pointer.
                return unsafe { crate::ffi::comm_init_rank(api, raw, n, id, r) };
            }
            // SAFETY: `init_with` hands a valid out-pointer and a config built for the loaded
            // version, alive for the call.
            unsafe { crate::ffi::comm_init_rank_config(api, raw, n, id, r, cfg_ptr) }
        })
    }

    /// Bounded by `limit` on every release; past it the error is [`Error::Timeout`] ("NCCL's
    /// init of rank {rank} of {size} still in progress (ranks missing?)"). NCCL cannot say which
    /// ranks are missing (the process group names them from the store).
    ///
    /// A blocking config stays blocking: its init runs on a thread of its own
    /// (`oxccl-init-r<rank>`, the device bound there as on the caller's) and the caller waits
    /// for it at most `limit`. A blocking NCCL call cannot be interrupted: past the limit the
    /// init is abandoned, still running on its thread (and still waiting for its peers); if it
    /// ever returns, that thread aborts the communicator it made (an error it returns is only
    /// logged). The caller's thread has the device bound, as after an init on it.
    ///
    /// Not a nonblocking init polled to the limit, although that could abort the init itself:
    /// NCCL fixes the mode at init, and a nonblocking communicator launches every grouped
    /// operation from a thread it starts for it (`ncclGroupEnd` answers `InProgress`), which
    /// makes every eager operation many times slower than on a blocking communicator.
    ///
    /// A nonblocking config returns at once, `Initializing`, as [`Backend::init_rank`] does
    /// (the caller's wait bounds it).
    fn init_rank_within(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
        limit: Duration,
    ) -> Result<NcclComm> {
        if cfg.is_nonblocking() {
            return self.init_rank(id, rank, size, device, cfg);
        }
        Self::rank_size(rank, size)?;
        let began = std::time::Instant::now();
        // On the caller's thread too: the device is checked before a thread is started, and
        // the caller has it bound afterwards as after an init on its own thread. The init's
        // thread binds it again for itself (`init_with`). Making the device's context can take
        // a good part of a second: it counts against the limit.
        crate::cuda::context(device)?;
        let limit = limit.saturating_sub(began.elapsed());
        log::debug!(
            "oxccl: NCCL {}: rank {rank}'s blocking init runs on its own thread, waited for {} ms \
             at most",
            self.lib.version(),
            limit.as_millis()
        );
        let (backend, cfg, id) = (self.clone(), cfg.clone(), *id);
        let what = format!("NCCL's init of rank {rank} of {size}");
        crate::bounded::within(
            limit,
            format!("oxccl-init-r{rank}"),
            &what,
            move || backend.init_rank(&id, rank, size, device, &cfg),
            move |comm: NcclComm| {
                log::debug!(
                    "oxccl: NCCL's init of rank {rank} of {size} completed after its caller \
                     stopped waiting ({} ms): aborting the communicator",
                    limit.as_millis()
                );
                // Nobody else holds it: abort releases it once, and the drop then finds it
                // released.
                comm.abort(&format!(
                    "init of rank {rank} of {size} completed past its limit of {} ms",
                    limit.as_millis()
                ));
                drop(comm);
                log::debug!("oxccl: the late communicator of rank {rank} of {size} is aborted");
            },
        )
        .map_err(|e| match e {
            // The bound's own words name only the call: say what a stalled init usually means.
            Error::Timeout { after_ms, .. } => Error::Timeout {
                what: oxccl_core::text!(
                    "NCCL's init of rank {rank} of {size} still in progress (ranks missing?)"
                ),
                after_ms,
            },
            other => other,
        })
    }

    fn group_start(&self) -> Result<()> {
        crate::group_call::start(&self.lib)
    }

    fn group_end(&self) -> Result<Progress> {
        crate::group_call::end(&self.lib)
    }
}

impl oxccl_core::ReshapeBackend for NcclBackend {
    /// `ncclCommGrow` with no parent: this process's new rank of a running communicator.
    fn join_grown(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
    ) -> Result<NcclComm> {
        crate::absent::gated(
            &self.settings.features,
            Feature::Grow,
            self.lib.api().comm_grow,
            "ncclCommGrow",
        )?;
        oxccl_core::check::join_grown(id, rank, size)?;
        let (r, n) = Self::rank_size(rank, size)?;
        let api = self.lib.api();
        self.init_with(rank, size, device, cfg, |raw, cfg_ptr| {
            // SAFETY: no parent (a new rank); `init_with` hands a valid out-pointer and a
            // config null or built for the loaded version, alive for the call.
            unsafe { crate::ffi::comm_grow(api, RawComm::NULL, n, Some(id), r, raw, cfg_ptr) }
        })
    }
}

impl NcclBackend {
    /// What every init path shares once its arguments are checked: the config (refused before
    /// any CUDA call), the device's context, the creating `call` (given the out-handle and the
    /// config pointer), and the new communicator: `Initializing` when a nonblocking init is in
    /// progress, `Ready` on success; on failure the handle (if any) is discarded.
    pub(crate) fn init_with(
        &self,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
        call: impl FnOnce(*mut RawComm, *mut RawConfig) -> Result<i32>,
    ) -> Result<NcclComm> {
        let lib = self.library();
        let mut buf = config(lib, cfg)?;
        let ctx = crate::cuda::context(device)?;
        let out = OutHandle::new();
        let code = create(&mut buf, &out, call)?;
        let raw = out.read();
        let nonblocking = cfg.is_nonblocking();
        let initializing = code == ResultCode::IN_PROGRESS.0 && nonblocking;
        if !initializing {
            if let Err(e) = lib.check(code, raw) {
                discard(lib, raw);
                return Err(e);
            }
        }
        if raw.is_null() {
            return Err(crate::absent::base_symbol(
                "communicator handle (init returned none)",
            ));
        }
        let r = Raw {
            raw,
            rank,
            size,
            device,
            nonblocking,
            initializing,
            signals: oxccl_core::one_sided::SignalLimits::from_config(cfg, env_signal_limits()),
        };
        Ok(NcclComm::wrap(lib.clone(), ctx, r, self.settings()))
    }
}

impl NcclComm {
    /// A backend for this communicator's library with its settings (timeout, hidden
    /// features): for the groups of the thread ([`oxccl_core::Backend::group_start`]).
    pub fn backend(&self) -> NcclBackend {
        NcclBackend::from_parts(self.inner.lib.clone(), self.inner.settings)
    }
}

/// The signal limits of a communicator made without `numRmaSig` / `numRmaCtx`: NCCL's
/// defaults, its contexts from `NCCL_NUM_RMA_CTX` when set.
fn env_signal_limits() -> oxccl_core::one_sided::SignalLimits {
    let v = std::env::var("NCCL_NUM_RMA_CTX").ok();
    oxccl_core::one_sided::SignalLimits::with_env(v.as_deref())
}

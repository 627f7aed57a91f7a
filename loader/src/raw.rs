//! The C types of `nccl.h` that the function table needs, besides `ncclConfig_t` (see
//! [`crate::config`]). Enums travel as `c_int` and handles as `*mut c_void`, because NCCL adds
//! enum values and the handles are opaque; the communicator and stream handles, which every
//! collective takes side by side, are `#[repr(transparent)]` newtypes of it so they cannot be
//! swapped.

use core::ffi::{c_char, c_int, c_uint, c_void};

/// `ncclComm_t`: an opaque communicator handle. A `#[repr(transparent)]` pointer (the same ABI
/// as `ncclComm_t`), a distinct type so that a stream cannot be passed where a communicator is
/// expected, or the other way round:
/// ```compile_fail
/// let stream = oxccl_loader::RawStream::NULL;
/// let comm: oxccl_loader::RawComm = stream;
/// ```
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawComm(pub *mut c_void);

/// `cudaStream_t`: an opaque CUDA stream handle (null is the legacy default stream). A
/// `#[repr(transparent)]` pointer, distinct from [`RawComm`].
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawStream(pub *mut c_void);

impl RawComm {
    /// No communicator: what an out-parameter starts as, and what calls without one pass.
    pub const NULL: RawComm = RawComm(core::ptr::null_mut());

    /// Whether this is [`RawComm::NULL`].
    pub fn is_null(self) -> bool {
        self.0.is_null()
    }
}

impl Default for RawComm {
    fn default() -> RawComm {
        RawComm::NULL
    }
}

impl RawStream {
    /// The legacy default stream.
    pub const NULL: RawStream = RawStream(core::ptr::null_mut());

    /// Whether this is the legacy default stream.
    pub fn is_null(self) -> bool {
        self.0.is_null()
    }
}

impl Default for RawStream {
    fn default() -> RawStream {
        RawStream::NULL
    }
}
/// `cudaEvent_t`: an opaque CUDA event handle.
pub type RawEvent = *mut c_void;
/// `ncclWindow_t`: an opaque registered-window handle (2.27+).
pub type RawWindow = *mut c_void;
/// `ncclParamHandle_t`: an opaque handle on one NCCL parameter (2.31+).
pub type RawParamHandle = *mut c_void;
/// `ncclResult_t`, read through [`oxccl_core::ResultCode`].
pub type RawResult = c_int;
/// `ncclDataType_t`.
pub type RawDataType = c_int;
/// `ncclRedOp_t` (values from 5 up are premul-sum ops made per communicator).
pub type RawRedOp = c_int;
/// `ncclScalarResidence_t`: 0 device memory, 1 host, read at once.
pub type RawScalarResidence = c_int;
/// `ncclCommMemStat_t` (2.29.7+).
pub type RawMemStat = c_int;

/// `NCCL_API_MAGIC`, the `magic` of every versioned NCCL struct but `ncclSimInfo_t`.
pub const API_MAGIC: c_uint = 0xcafe_beef;
/// The `magic` of `ncclSimInfo_t`.
pub const SIM_INFO_MAGIC: c_uint = 0x7468_5283;
/// `NCCL_CONFIG_UNDEF_INT`: an unset integer field.
pub const CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// `NCCL_SPLIT_NOCOLOR`: the color of a rank that joins no child communicator.
pub const SPLIT_NOCOLOR: c_int = -1;

/// `ncclSimInfo_t` (2.22+), filled by `ncclGroupSimulateEnd`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct RawSimInfo {
    /// `sizeof(ncclSimInfo_t)`.
    pub size: usize,
    /// [`SIM_INFO_MAGIC`].
    pub magic: c_uint,
    /// The version code of the caller's header.
    pub version: c_uint,
    /// The estimated time of the group, in microseconds; -1 when unknown.
    pub estimated_time: f32,
}

/// `ncclWaitSignalDesc_t` (2.29+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct RawWaitSignalDesc {
    /// Number of signal operations to wait for.
    pub op_cnt: c_int,
    /// The peer the signals come from.
    pub peer: c_int,
    /// The signal index.
    pub sig_idx: c_int,
    /// The context.
    pub ctx: c_int,
}

/// The value of a [`RawConfigExt`]: `union { int i; const char* s; void* raw; }`.
#[derive(Clone, Copy)]
#[repr(C)]
pub union RawConfigExtValue {
    /// An integer value.
    pub i: c_int,
    /// A C string value.
    pub s: *const c_char,
    /// An opaque pointer-sized value.
    pub raw: *mut c_void,
}

/// `ncclConfigExt_t` (2.31+): one vendor option in a list hung on a [`RawCollConfig`].
#[derive(Clone, Copy)]
#[repr(C)]
pub struct RawConfigExt {
    /// The next option, or null.
    pub next: *mut RawConfigExt,
    /// The vendor's id.
    pub vendor_id: c_int,
    /// The option's id within the vendor.
    pub option_id: c_int,
    /// The value.
    pub val: RawConfigExtValue,
}

/// `ncclCollConfig_t` (2.31+, this is the 2.32 layout; 2.31 ends before
/// `launch_completion_event`, which `size` tells the library).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct RawCollConfig {
    /// Bytes of the struct the caller fills.
    pub size: usize,
    /// [`API_MAGIC`].
    pub magic: c_uint,
    /// The version code the caller describes.
    pub version: c_uint,
    /// Vendor extensions, or null.
    pub ext: *mut RawConfigExt,
    /// Lower bound on CTAs.
    pub min_ctas: c_int,
    /// Upper bound on CTAs.
    pub max_ctas: c_int,
    /// NVLS CTA cap.
    pub nvls_ctas: c_int,
    /// CUDA cluster size.
    pub cga_cluster_size: c_int,
    /// Algorithm selection string, or null.
    pub alg_selection: *const c_char,
    /// Whether an unsatisfiable selection is an error (default 1).
    pub force_alg_selection: c_int,
    /// `NCCL_CTA_POLICY_*` bits.
    pub cta_policy: c_int,
    /// Opaque tag for profiler plugins.
    pub user_profiler_tag: u64,
    /// An event recorded at kernel launch completion (2.32), or null.
    pub launch_completion_event: RawEvent,
}

/// `ncclEncryptionConfig_t` (2.32+).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct RawEncryptionConfig {
    /// Bytes of the struct.
    pub size: usize,
    /// [`API_MAGIC`].
    pub magic: c_uint,
    /// The version code the caller describes.
    pub version: c_uint,
    /// `ncclEncryptionMode_t`: 0 none, 1 pre-shared key.
    pub mode: c_int,
    /// The pre-shared key, or null.
    pub psk: *const c_char,
}

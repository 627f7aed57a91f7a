//! The function table: one field per function of `nccl.h` (2.3.5 … 2.32.3), each resolved once
//! when the library is opened. A symbol the library does not export is `None`, never a panic:
//! the loaded library is the truth, whatever its version says.

use crate::config::RawConfig;
use crate::raw::*;
use core::ffi::{c_char, c_int, c_uint, c_void};
use oxccl_core::UniqueId;

/// Declares [`Api`] from one line per C function, so the field, the symbol name, the version
/// that brought it and the exact C signature sit together and cannot drift apart.
macro_rules! api_table {
    (@ret) => { None };
    (@ret $ret:ty) => { Some(RustType::of::<$ret>(stringify!($ret))) };
    ($( $field:ident = $sym:literal, $since:literal: fn($($arg:ty),*) $(-> $ret:ty)?; )*) => {
        /// NCCL's C API as loaded: each field is the function of that name (snake case, without
        /// the `nccl` prefix), or `None` when the library does not export it.
        ///
        /// The pointers are only valid while the [`crate::Library`] they came from is alive:
        /// hold an `Arc<Library>` for as long as you may call them.
        #[derive(Clone, Copy, Default)]
        pub struct Api {
            $(
                #[doc = concat!("`", $sym, "` (declared since NCCL ", $since, ").")]
                pub $field: Option<unsafe extern "C" fn($($arg),*) $(-> $ret)?>,
            )*
        }

        impl Api {
            /// Every symbol of the table, in header order.
            pub const SYMBOLS: &'static [&'static str] = &[$($sym),*];

            /// Every function of the table as its field is typed, in header order: generated
            /// from the same lines as the fields, so the ABI test (`tests/api_abi.rs`) checks
            /// the very types the calls go through against each release's `nccl.h`.
            pub const SIGNATURES: &'static [Signature] = &[$(
                Signature {
                    symbol: $sym,
                    since: $since,
                    args: &[$(RustType::of::<$arg>(stringify!($arg))),*],
                    ret: api_table!(@ret $($ret)?),
                },
            )*];

            /// Resolves every symbol through `lib`, once.
            pub(crate) fn resolve(lib: &libloading::Library) -> Api {
                Api {
                    $(
                        // SAFETY: the type is the exact C signature of the symbol in nccl.h
                        // (`tests/api_abi.rs` compiles it, through `SIGNATURES`, against the
                        // headers of 2.13.4 … 2.32.3, which never changed one); the function
                        // pointer is copied out of the `Symbol`, and the `Library` that owns
                        // `lib` keeps the code mapped as long as the table.
                        $field: unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(
                                concat!($sym, "\0").as_bytes(),
                            )
                        }
                        .ok()
                        .map(|s| *s),
                    )*
                }
            }

            /// Whether the library exports `symbol` (an NCCL C name such as `"ncclCommSplit"`);
            /// false for names outside the table.
            pub fn has(&self, symbol: &str) -> bool {
                match symbol {
                    $($sym => self.$field.is_some(),)*
                    _ => false,
                }
            }

            /// The first release whose header declares `symbol`, as text; `None` for names
            /// outside the table.
            pub fn declared_since(symbol: &str) -> Option<&'static str> {
                match symbol {
                    $($sym => Some($since),)*
                    _ => None,
                }
            }
        }
    };
}

api_table! {
    get_version = "ncclGetVersion", "2.3.5": fn(*mut c_int) -> RawResult;
    get_unique_id = "ncclGetUniqueId", "2.3.5": fn(*mut UniqueId) -> RawResult;
    comm_init_rank = "ncclCommInitRank", "2.3.5": fn(*mut RawComm, c_int, UniqueId, c_int) -> RawResult;
    comm_init_all = "ncclCommInitAll", "2.3.5": fn(*mut RawComm, c_int, *const c_int) -> RawResult;
    comm_init_rank_config = "ncclCommInitRankConfig", "2.14.3":
        fn(*mut RawComm, c_int, UniqueId, c_int, *mut RawConfig) -> RawResult;
    comm_init_rank_scalable = "ncclCommInitRankScalable", "2.23.4":
        fn(*mut RawComm, c_int, c_int, c_int, *mut UniqueId, *mut RawConfig) -> RawResult;
    comm_split = "ncclCommSplit", "2.18.1":
        fn(RawComm, c_int, c_int, *mut RawComm, *mut RawConfig) -> RawResult;
    comm_shrink = "ncclCommShrink", "2.27.3":
        fn(RawComm, *mut c_int, c_int, *mut RawComm, *mut RawConfig, c_int) -> RawResult;
    comm_get_unique_id = "ncclCommGetUniqueId", "2.29.2": fn(RawComm, *mut UniqueId) -> RawResult;
    comm_grow = "ncclCommGrow", "2.29.2":
        fn(RawComm, c_int, *const UniqueId, c_int, *mut RawComm, *mut RawConfig) -> RawResult;
    comm_finalize = "ncclCommFinalize", "2.14.3": fn(RawComm) -> RawResult;
    comm_destroy = "ncclCommDestroy", "2.3.5": fn(RawComm) -> RawResult;
    comm_abort = "ncclCommAbort", "2.4.2": fn(RawComm) -> RawResult;
    comm_revoke = "ncclCommRevoke", "2.28.7": fn(RawComm, c_int) -> RawResult;
    get_error_string = "ncclGetErrorString", "2.3.5": fn(RawResult) -> *const c_char;
    get_last_error = "ncclGetLastError", "2.13.4": fn(RawComm) -> *const c_char;
    reset_debug_init = "ncclResetDebugInit", "2.24.3": fn();
    comm_get_async_error = "ncclCommGetAsyncError", "2.4.2": fn(RawComm, *mut RawResult) -> RawResult;
    comm_count = "ncclCommCount", "2.3.5": fn(RawComm, *mut c_int) -> RawResult;
    comm_cu_device = "ncclCommCuDevice", "2.3.5": fn(RawComm, *mut c_int) -> RawResult;
    comm_user_rank = "ncclCommUserRank", "2.3.5": fn(RawComm, *mut c_int) -> RawResult;
    comm_register = "ncclCommRegister", "2.19.1":
        fn(RawComm, *mut c_void, usize, *mut *mut c_void) -> RawResult;
    comm_deregister = "ncclCommDeregister", "2.19.1": fn(RawComm, *mut c_void) -> RawResult;
    comm_suspend = "ncclCommSuspend", "2.29.7": fn(RawComm, c_int) -> RawResult;
    comm_resume = "ncclCommResume", "2.29.7": fn(RawComm) -> RawResult;
    comm_mem_stats = "ncclCommMemStats", "2.29.7": fn(RawComm, RawMemStat, *mut u64) -> RawResult;
    comm_window_register = "ncclCommWindowRegister", "2.27.3":
        fn(RawComm, *mut c_void, usize, *mut RawWindow, c_int) -> RawResult;
    comm_window_deregister = "ncclCommWindowDeregister", "2.27.3": fn(RawComm, RawWindow) -> RawResult;
    win_get_user_ptr = "ncclWinGetUserPtr", "2.29.2":
        fn(RawComm, RawWindow, *mut *mut c_void) -> RawResult;
    mem_alloc = "ncclMemAlloc", "2.19.1": fn(*mut *mut c_void, usize) -> RawResult;
    mem_free = "ncclMemFree", "2.19.1": fn(*mut c_void) -> RawResult;
    red_op_create_pre_mul_sum = "ncclRedOpCreatePreMulSum", "2.11.4":
        fn(*mut RawRedOp, *mut c_void, RawDataType, RawScalarResidence, RawComm) -> RawResult;
    red_op_destroy = "ncclRedOpDestroy", "2.11.4": fn(RawRedOp, RawComm) -> RawResult;
    reduce = "ncclReduce", "2.3.5": fn(
        *const c_void, *mut c_void, usize, RawDataType, RawRedOp, c_int, RawComm, RawStream
    ) -> RawResult;
    bcast = "ncclBcast", "2.3.5":
        fn(*mut c_void, usize, RawDataType, c_int, RawComm, RawStream) -> RawResult;
    broadcast = "ncclBroadcast", "2.3.5": fn(
        *const c_void, *mut c_void, usize, RawDataType, c_int, RawComm, RawStream
    ) -> RawResult;
    all_reduce = "ncclAllReduce", "2.3.5": fn(
        *const c_void, *mut c_void, usize, RawDataType, RawRedOp, RawComm, RawStream
    ) -> RawResult;
    reduce_scatter = "ncclReduceScatter", "2.3.5": fn(
        *const c_void, *mut c_void, usize, RawDataType, RawRedOp, RawComm, RawStream
    ) -> RawResult;
    all_gather = "ncclAllGather", "2.3.5":
        fn(*const c_void, *mut c_void, usize, RawDataType, RawComm, RawStream) -> RawResult;
    alltoall = "ncclAlltoAll", "2.28.3":
        fn(*const c_void, *mut c_void, usize, RawDataType, RawComm, RawStream) -> RawResult;
    gather = "ncclGather", "2.28.3": fn(
        *const c_void, *mut c_void, usize, RawDataType, c_int, RawComm, RawStream
    ) -> RawResult;
    scatter = "ncclScatter", "2.28.3": fn(
        *const c_void, *mut c_void, usize, RawDataType, c_int, RawComm, RawStream
    ) -> RawResult;
    all_reduce_config = "ncclAllReduceConfig", "2.31.2": fn(
        *const c_void, *mut c_void, usize, RawDataType, RawRedOp, RawComm, RawStream,
        *const RawCollConfig
    ) -> RawResult;
    broadcast_config = "ncclBroadcastConfig", "2.31.2": fn(
        *const c_void, *mut c_void, usize, RawDataType, c_int, RawComm, RawStream,
        *const RawCollConfig
    ) -> RawResult;
    reduce_config = "ncclReduceConfig", "2.31.2": fn(
        *const c_void, *mut c_void, usize, RawDataType, RawRedOp, c_int, RawComm, RawStream,
        *const RawCollConfig
    ) -> RawResult;
    all_gather_config = "ncclAllGatherConfig", "2.31.2": fn(
        *const c_void, *mut c_void, usize, RawDataType, RawComm, RawStream, *const RawCollConfig
    ) -> RawResult;
    reduce_scatter_config = "ncclReduceScatterConfig", "2.31.2": fn(
        *const c_void, *mut c_void, usize, RawDataType, RawRedOp, RawComm, RawStream,
        *const RawCollConfig
    ) -> RawResult;
    alltoall_config = "ncclAlltoAllConfig", "2.31.2": fn(
        *const c_void, *mut c_void, usize, RawDataType, RawComm, RawStream, *const RawCollConfig
    ) -> RawResult;
    gather_config = "ncclGatherConfig", "2.31.2": fn(
        *const c_void, *mut c_void, usize, RawDataType, c_int, RawComm, RawStream,
        *const RawCollConfig
    ) -> RawResult;
    scatter_config = "ncclScatterConfig", "2.31.2": fn(
        *const c_void, *mut c_void, usize, RawDataType, c_int, RawComm, RawStream,
        *const RawCollConfig
    ) -> RawResult;
    send = "ncclSend", "2.7.3":
        fn(*const c_void, usize, RawDataType, c_int, RawComm, RawStream) -> RawResult;
    recv = "ncclRecv", "2.7.3":
        fn(*mut c_void, usize, RawDataType, c_int, RawComm, RawStream) -> RawResult;
    put_signal = "ncclPutSignal", "2.29.2": fn(
        *const c_void, usize, RawDataType, c_int, RawWindow, usize, c_int, c_int, c_uint,
        RawComm, RawStream
    ) -> RawResult;
    signal = "ncclSignal", "2.29.2":
        fn(c_int, c_int, c_int, c_uint, RawComm, RawStream) -> RawResult;
    wait_signal = "ncclWaitSignal", "2.29.2":
        fn(c_int, *mut RawWaitSignalDesc, RawComm, RawStream) -> RawResult;
    group_start = "ncclGroupStart", "2.3.5": fn() -> RawResult;
    group_end = "ncclGroupEnd", "2.3.5": fn() -> RawResult;
    group_simulate_end = "ncclGroupSimulateEnd", "2.22.3": fn(*mut RawSimInfo) -> RawResult;
    set_encryption = "ncclSetEncryption", "2.32.3": fn(*const RawEncryptionConfig) -> RawResult;
    param_bind = "ncclParamBind", "2.31.2": fn(*mut RawParamHandle, *const c_char) -> RawResult;
    param_get_i8 = "ncclParamGetI8", "2.31.2": fn(RawParamHandle, *mut i8) -> RawResult;
    param_get_i16 = "ncclParamGetI16", "2.31.2": fn(RawParamHandle, *mut i16) -> RawResult;
    param_get_i32 = "ncclParamGetI32", "2.31.2": fn(RawParamHandle, *mut i32) -> RawResult;
    param_get_i64 = "ncclParamGetI64", "2.31.2": fn(RawParamHandle, *mut i64) -> RawResult;
    param_get_u8 = "ncclParamGetU8", "2.31.2": fn(RawParamHandle, *mut u8) -> RawResult;
    param_get_u16 = "ncclParamGetU16", "2.31.2": fn(RawParamHandle, *mut u16) -> RawResult;
    param_get_u32 = "ncclParamGetU32", "2.31.2": fn(RawParamHandle, *mut u32) -> RawResult;
    param_get_u64 = "ncclParamGetU64", "2.31.2": fn(RawParamHandle, *mut u64) -> RawResult;
    param_get_str = "ncclParamGetStr", "2.31.2": fn(RawParamHandle, *mut *const c_char) -> RawResult;
    param_get = "ncclParamGet", "2.31.2":
        fn(RawParamHandle, *mut c_void, c_int, *mut c_int) -> RawResult;
    param_get_parameter = "ncclParamGetParameter", "2.31.2":
        fn(*const c_char, *mut *const c_char, *mut c_int) -> RawResult;
    param_get_all_parameter_keys = "ncclParamGetAllParameterKeys", "2.31.2":
        fn(*mut *mut *const c_char, *mut c_int) -> RawResult;
    param_dump_all = "ncclParamDumpAll", "2.31.2": fn();
}

/// One function of [`Api`] as its field is typed: what a C prototype must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// The C symbol, such as `"ncclCommSplit"`.
    pub symbol: &'static str,
    /// The first release whose header declares it, as text.
    pub since: &'static str,
    /// The argument types, in order.
    pub args: &'static [RustType],
    /// The return type; `None` for C's `void`.
    pub ret: Option<RustType>,
}

/// One Rust type of a [`Signature`]: its name as written in the table, and its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RustType {
    /// The type as written in the table (`"*mut RawComm"`, `"usize"`), a path of aliases from
    /// [`crate::raw`], [`crate::config`], `oxccl_core` and `core::ffi`.
    pub name: &'static str,
    /// `size_of` the type.
    pub size: usize,
    /// `align_of` the type.
    pub align: usize,
}

impl RustType {
    /// `T`, written as `name`.
    pub const fn of<T>(name: &'static str) -> RustType {
        RustType {
            name,
            size: core::mem::size_of::<T>(),
            align: core::mem::align_of::<T>(),
        }
    }
}

impl Api {
    /// How many of the table's functions the library exports.
    pub fn present_count(&self) -> usize {
        Self::SYMBOLS.iter().filter(|s| self.has(s)).count()
    }
}

impl core::fmt::Debug for Api {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The pointers say nothing useful; which symbols resolved does.
        let mut l = f.debug_list();
        for s in Self::SYMBOLS.iter().filter(|s| self.has(s)) {
            l.entry(s);
        }
        l.finish()
    }
}

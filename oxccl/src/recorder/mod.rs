//! The flight recorder: the ring every process group fills (the rules'
//! [`FlightRecorder`](oxccl_rules::recorder::FlightRecorder), shared as a [`Recorder`]), each
//! work's entry on its way into it (`slot`), and its dumps.
//!
//! - [`write_dump`]: one rank's ring as PyTorch's dump format, JSON (`rank_<r>.json`) and
//!   pickled (`trace_<r>`, for PyTorch's `torchfrtrace`), into [`dump_dir_from_env`]
//!   (`OXCCL_TRACE_DIR`) or any directory; both forms are built as one [`DumpValue`].
//! - [`DumpNote`]: what a rank knew of the other ranks' dumps when it wrote its own.
//! - [`DumpTrigger`]: the on-request trigger (a `dump_request` file in the dump directory),
//!   polled by the recorder's owner.
//!
//! - [`reader`] (feature `trace-reader`): reads dumps back and diagnoses a hang from them, as
//!   `oxccl trace` prints it.

mod dump;
mod json;
mod note;
pub mod pickle;
#[cfg(feature = "trace-reader")]
pub mod reader;
mod shared;
pub(crate) mod slot;
pub(crate) mod target;
mod trigger;
mod value;

pub use dump::{
    dump_dir_from_env, dump_json, json_file_name, pickle_file_name, torch_dtype_name, write_dump,
    DumpFiles, DumpMeta, DUMP_FORMAT_VERSION, PICKLE_PREFIX, TRACE_DIR_VAR,
};
pub use json::to_json;
pub use note::{
    rank_ranges, wait_end_from_word, wait_end_word, DumpCause, DumpNote, DumpWait, NOTE_KEY,
};
pub use shared::{clock_zero, now_ns, ns_since, Recorder, DEFAULT_CAPACITY};
pub use trigger::{DumpTrigger, DUMP_REQUEST_FILE};
pub use value::DumpValue;

//! Flight-recorder dumps and their diagnosis.
//!
//! - [`write_dump`]: one rank's ring (the core's [`FlightRecorder`](oxccl_core::trace::FlightRecorder))
//!   as PyTorch's dump format, JSON (`rank_<r>.json`) and pickled (`trace_<r>`, for PyTorch's
//!   `torchfrtrace`), into [`dump_dir_from_env`] (`OXCCL_TRACE_DIR`) or any directory.
//! - [`DumpTrigger`]: the on-request trigger (a `dump_request` file in the dump directory),
//!   polled by the recorder's owner.
//! - [`read_dump_dir`], [`analyze`], [`render_text`], [`report_json`]: what `oxccl trace DIR`
//!   does: which ranks stopped where, what the others did, mismatches, missing dumps, culprits.

mod analyze;
mod dump;
mod note;
mod parse;
pub mod pickle;
mod report;
mod trigger;

pub use analyze::{
    analyze, Analysis, Culprit, GroupReport, Mismatch, MismatchKind, MissingDump, MissingWhy, OpAt,
    RankStatus, Reason,
};
pub use dump::{
    dump_dir_from_env, json_file_name, pickle_file_name, torch_dtype_name, write_dump, DumpFiles,
    DumpMeta, DUMP_FORMAT_VERSION, PICKLE_PREFIX, TRACE_DIR_VAR,
};
pub use note::{DumpCause, DumpNote, DumpWait, NOTE_KEY};
pub use parse::{parse_dump, read_dump_dir, DirDumps, DumpEntry, DumpPg, ParseError, RankDump};
pub use report::{rank_ranges, render_text, to_json as report_json};
pub use trigger::{DumpTrigger, DUMP_REQUEST_FILE};

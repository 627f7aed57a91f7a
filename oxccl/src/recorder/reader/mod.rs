//! Reading flight-recorder dumps back (the writer's [`write_dump`](super::write_dump) JSON
//! form, and PyTorch's `dump_json` field for field) and diagnosing a hang from them: read
//! every rank's JSON dump in a directory ([`read_dump_dir`]) or one dump's text
//! ([`parse_dump`]), find which ranks stopped where, what the others did, mismatches, missing
//! dumps and culprits ([`analyze`]), and say so in words ([`render_text`]) or as JSON
//! ([`report_json`]). `oxccl trace DIR` prints this.
//!
//! Pure over the dumps' text and the recorder's own vocabulary (the note's words, rank
//! ranges): nothing here reaches the process group or the watchdog.

mod analyze;
mod note;
mod parse;
mod report;

pub use analyze::{
    analyze, Analysis, Culprit, GroupReport, Mismatch, MismatchKind, MissingDump, MissingWhy, OpAt,
    RankStatus, Reason,
};
pub use note::parse_note;
pub use parse::{
    parse_dump, read_dump_dir, DirDumps, DumpEntry, DumpPg, ParseError, RankDump, MAX_DUMP_BYTES,
};
pub use report::{render_text, to_json as report_json};

//! What `oxccl trace DIR` does with the flight-recorder dumps the library writes: reads every
//! rank's JSON dump back ([`read_dump_dir`]), finds which ranks stopped where, what the others
//! did, mismatches, missing dumps and culprits ([`analyze`]), and says so in words
//! ([`render_text`]) or as JSON ([`report_json`]).
//!
//! Self-contained over the `oxccl` library and `serde_json`, so the library's own tests that
//! read dumps back can take it in by path.

pub mod analyze;
pub mod note;
pub mod parse;
pub mod report;

pub use analyze::analyze;
pub use parse::read_dump_dir;
pub use report::{render_text, to_json as report_json};

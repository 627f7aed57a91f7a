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
//! - `reader` (feature `trace-reader`): reads dumps back and diagnoses a hang from them, as
//!   `oxccl trace` prints it.
//!
//! A process group dumps by itself (on a timeout with `OXCCL_DUMP_ON_TIMEOUT=1`, or when a
//! `dump_request` file appears in `OXCCL_TRACE_DIR`); a program can also write a group's ring
//! whenever it likes, as here, and read it back:
//!
//! ```
//! use oxccl::launch::{spawn, WithProcessGroup};
//! use oxccl::pg::{PgBackend, ProcessGroup};
//! use oxccl::recorder::{write_dump, DumpMeta};
//! use oxccl::ReduceOp;
//!
//! #[derive(Clone)]
//! struct StepThenDump(std::path::PathBuf);
//!
//! impl WithProcessGroup for StepThenDump {
//!     type Output = ();
//!     fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> oxccl::Result<()> {
//!         let mut x = pg.upload(&[1.0f32; 8])?;
//!         pg.all_reduce(&mut x, ReduceOp::Sum)?.wait()?;
//!         // An operation's entry reaches the ring on the watchdog's next pass (off the hot
//!         // path), which the group's own dumps wait for; a program's dump waits here.
//!         let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
//!         while pg.recorder().lock().len() == 0 && std::time::Instant::now() < deadline {
//!             std::thread::sleep(std::time::Duration::from_millis(5));
//!         }
//!         let meta = DumpMeta::new(pg.global_rank(), pg.size());
//!         write_dump(&self.0, &meta, &pg.recorder().lock(), false)
//!             .map_err(|e| oxccl::Error::invalid("dir", format_args!("a writable folder: {e}")))?;
//!         Ok(())
//!     }
//! }
//!
//! fn main() -> oxccl::Result<()> {
//!     # std::env::set_var("OXCCL_BACKEND", "mock");
//!     let dir = std::env::temp_dir().join(format!("oxccl-doc-dumps-{}", std::process::id()));
//!     spawn(2, StepThenDump(dir.clone()))?;
//!     // Each rank wrote rank_<r>.json (and trace_<r> for PyTorch's torchfrtrace).
//!     let dump = std::fs::read_to_string(dir.join("rank_1.json")).unwrap();
//!     assert!(dump.contains("nccl:all_reduce"), "{dump}");
//!     # #[cfg(feature = "trace-reader")]
//!     # {
//!     let read = oxccl::recorder::reader::parse_dump(&dump, None).unwrap();
//!     assert_eq!(read.rank, 1);
//!     assert!(read.entries.iter().any(|e| e.profiling_name == "nccl:all_reduce"));
//!     # }
//!     std::fs::remove_dir_all(&dir).ok();
//!     Ok(())
//! }
//! ```

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

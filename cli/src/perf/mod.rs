//! The measuring commands. `oxccl perf`: nccl-tests' sweep through oxccl's layers, side by
//! side in one run: `raw` (NCCL's function pointer), `comm` (`Comm::issue`) and `pg`
//! (`ProcessGroup`); without a GPU or NCCL it runs the `pg` layer on the mock world and says
//! so in its first line. `oxccl tune`: the buffer-mode table for `OXCCL_TUNE_FILE`. `oxccl
//! ping-pong`: one-sided latency between two ranks. They share the options of a sweep, the
//! choice of backend and the worlds of ranks.

pub(crate) mod args;
pub mod backend;
mod command;
mod direct;
mod drive;
pub mod layer;
pub mod mock_world;
pub(crate) mod modes;
pub mod nccl;
pub(crate) mod plan;
pub(crate) mod rank;
mod rank_layers;
mod raw_call;
pub mod report;
mod stop;
mod svg;
pub(crate) mod world;

pub use args::PerfArgs;
pub use command::run;

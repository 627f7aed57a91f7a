//! `oxccl perf`: nccl-tests' sweep through oxccl's layers, side by side in one run: `raw`
//! (NCCL's function pointer), `comm` (`Comm::issue`) and `pg` (`ProcessGroup`). Without a GPU
//! or NCCL it runs the `pg` layer on the mock world and says so in its first line.

mod args;
pub mod backend;
mod command;
mod direct;
mod drive;
pub mod layer;
mod mock;
pub mod mock_world;
mod modes;
pub mod nccl;
mod outcome;
mod ping_pong;
mod processes;
mod raw_call;
mod report;
mod stop;
mod svg;
mod tune;
mod tune_kernels;

pub use args::PerfArgs;
pub use command::run;

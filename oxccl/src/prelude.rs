//! The traits whose methods a program calls, for one glob import: `use oxccl::prelude::*;`
//! (the safe layer's, and [`PgBackend`] for code generic over a process group's backend).

pub use crate::pg::PgBackend;
pub use oxccl_comm::prelude::*;

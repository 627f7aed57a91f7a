//! Argument checks, one pure function per operation. Every invalid call is refused here with an
//! [`Error::InvalidArgument`] naming the argument (or [`Error::Unsupported`] naming the feature),
//! before any library call.

mod buffers;
mod check_ctx;
mod collectives;
mod configured;
mod dispatch;
mod element;
mod grow;
mod one_sided;
mod p2p;
mod parts;
mod reduce_op;
mod shrink;
pub mod windows;

#[cfg(doc)]
use crate::error::Error;

pub use buffers::{buffer, buffer_mut, exact_len, parts_sum};
pub use check_ctx::{rank_arg, CheckCtx};
pub use collectives::{
    all_gather, all_reduce, all_to_all, all_to_all_v, broadcast, reduce, reduce_scatter,
};
pub use configured::configured;
pub use dispatch::op;
pub use element::{dtype, wire_dtype, wire_op};
pub use grow::{grow, join_grown};
pub use one_sided::{put as put_signal, put_windows, signal, wait as wait_signal};
pub use p2p::{recv, send};
pub use parts::{all_gather_v, gather, reduce_scatter_v, scatter};
pub use reduce_op::reduce_op;
pub use shrink::shrink;

#[cfg(test)]
mod tests;

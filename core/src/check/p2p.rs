//! The checks of send and recv.

use super::buffers::{buffer, buffer_mut};
use super::check_ctx::{rank_arg, CheckCtx};
use super::element::{dtype, MOVED};
use crate::buf::{RawBuf, RawBufMut};
use crate::dtype::DataType;
use crate::error::Result;

/// send: a peer of the communicator (itself allowed inside a group), a valid buffer.
pub fn send(ctx: &CheckCtx<'_>, buf: RawBuf, dt: DataType, peer: u32) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    rank_arg(ctx, "peer", peer)?;
    buffer("buf", buf, dt)
}

/// recv: a peer of the communicator, a valid buffer.
pub fn recv(ctx: &CheckCtx<'_>, buf: RawBufMut, dt: DataType, peer: u32) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    rank_arg(ctx, "peer", peer)?;
    buffer_mut("buf", buf, dt)
}

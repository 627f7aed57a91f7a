//! The window rule: an operation's buffers are all in symmetric windows or none are.
//!
//! NCCL 2.28 gives wrong results or hangs when one buffer of an all-to-all is in a window
//! and the other is not (docs/BENCHMARKS.md#buffer-modes-and-the-tune-table).
//! The rule is applied to every collective, as the process group applies it, so code that
//! passes it on one collective passes on all. Only the buffers the library reads or writes
//! on this rank count: a broadcast's input off the root, say, is never touched.

use crate::error::{Error, Result};
use crate::op::{CommOp, OpKind};

/// A buffer of an operation on this rank: its argument name, address and bytes.
pub type Used = (&'static str, usize, usize);

/// The buffers `op` uses on `rank` (at most two; empty buffers left out).
pub fn used(op: &CommOp<'_>, rank: u32) -> [Option<Used>; 2] {
    let [send, recv] = op.byte_spans();
    // A rooted operation's input (broadcast, scatter) or output (reduce, gather) is touched
    // on its root only.
    let (send_here, recv_here) = match (op.kind(), op.root()) {
        (OpKind::Broadcast | OpKind::Scatter, Some(root)) => (root == rank, true),
        (OpKind::Reduce | OpKind::Gather, Some(root)) => (true, root == rank),
        _ => (true, true),
    };
    let buf = |arg, here: bool, (addr, bytes): (usize, usize)| {
        (here && bytes > 0).then_some((arg, addr, bytes))
    };
    let send_arg = if matches!(op.kind(), OpKind::Send) {
        "buf"
    } else {
        "send"
    };
    let recv_arg = if matches!(op.kind(), OpKind::Recv) {
        "buf"
    } else {
        "recv"
    };
    [
        buf(send_arg, send_here, send),
        buf(recv_arg, recv_here, recv),
    ]
}

/// `Ok` when the buffers `op` uses on `rank` are all inside windows or none is, by
/// `in_window(addr, bytes)`; else an [`Error::InvalidArgument`] naming the buffer that is not
/// in a window while the other is.
pub fn one_kind(
    op: &CommOp<'_>,
    rank: u32,
    in_window: impl Fn(usize, usize) -> bool,
) -> Result<()> {
    let bufs = used(op, rank);
    let mut kinds = bufs
        .iter()
        .flatten()
        .map(|&(arg, addr, bytes)| (arg, in_window(addr, bytes)));
    let (Some(a), Some(b)) = (kinds.next(), kinds.next()) else {
        return Ok(());
    };
    if a.1 == b.1 {
        return Ok(());
    }
    let (plain, windowed) = if a.1 { (b.0, a.0) } else { (a.0, b.0) };
    Err(Error::invalid(
        plain,
        format_args!(
            "memory in a symmetric window as {windowed} is (NCCL 2.28's {} goes wrong on a \
             window beside plain memory), got plain memory",
            op.kind().name()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::{RawBuf, RawBufMut};
    use crate::dtype::DataType;
    use crate::reduce::ReduceOp;

    const WIN: (usize, usize) = (0x1000, 0x1000);

    fn in_win(addr: usize, bytes: usize) -> bool {
        addr >= WIN.0 && addr + bytes <= WIN.0 + WIN.1
    }

    fn a2a(send: usize, recv: usize) -> CommOp<'static> {
        CommOp::AllToAll {
            send: RawBuf::new(send, 16),
            recv: RawBufMut::new(recv, 16),
            dtype: DataType::Float32,
        }
    }

    fn arg_of(r: Result<()>) -> Option<&'static str> {
        match r {
            Err(Error::InvalidArgument { arg, .. }) => Some(arg),
            _ => None,
        }
    }

    #[test]
    fn all_in_or_all_out_pass() {
        assert!(one_kind(&a2a(0x1000, 0x1400), 0, in_win).is_ok());
        assert!(one_kind(&a2a(0x9000, 0xa000), 0, in_win).is_ok());
    }

    #[test]
    fn the_plain_one_is_named() {
        assert_eq!(
            arg_of(one_kind(&a2a(0x1000, 0x9000), 0, in_win)),
            Some("recv")
        );
        assert_eq!(
            arg_of(one_kind(&a2a(0x9000, 0x1000), 0, in_win)),
            Some("send")
        );
        // Reaching past the window's end is not inside it.
        assert_eq!(
            arg_of(one_kind(&a2a(0x1000, 0x1fe0), 0, in_win)),
            Some("recv")
        );
    }

    #[test]
    fn buffers_a_rank_does_not_touch_do_not_count() {
        let bcast = |root| CommOp::Broadcast {
            send: RawBuf::new(0x9000, 16),
            recv: RawBufMut::new(0x1000, 16),
            dtype: DataType::Float32,
            root,
        };
        assert!(one_kind(&bcast(1), 0, in_win).is_ok());
        assert_eq!(arg_of(one_kind(&bcast(0), 0, in_win)), Some("send"));
        let reduce = |root| CommOp::Reduce {
            send: RawBuf::new(0x1000, 16),
            recv: RawBufMut::new(0x9000, 16),
            dtype: DataType::Float32,
            op: ReduceOp::Sum,
            root,
        };
        assert!(one_kind(&reduce(1), 0, in_win).is_ok());
        assert_eq!(arg_of(one_kind(&reduce(0), 0, in_win)), Some("recv"));
        // Empty buffers are no buffers.
        let empty = CommOp::AllGather {
            send: RawBuf::new(0x1000, 4),
            recv: RawBufMut::EMPTY,
            dtype: DataType::Float32,
        };
        assert!(one_kind(&empty, 0, in_win).is_ok());
    }
}

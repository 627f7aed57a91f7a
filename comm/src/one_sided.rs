//! One-sided operations of a [`Comm`] (NCCL 2.29.2+): symmetric windows over [`NcclBuf`]s, a
//! put into a peer's window that raises a signal there, a signal alone, and a wait for
//! signals that orders the window's later local uses after the data the puts brought.
//!
//! A window is kept by the communicator, not by the buffer: [`Comm::register_window`] keeps
//! the allocation alive until [`Comm::deregister_window`] or the communicator's end, so a
//! peer's put never lands in memory this process freed or gave to another buffer, even when
//! the program drops its [`NcclBuf`] first. A put reads its source like any operation (its
//! memory is not reused before the put ran); a wait takes its window buffer as written, so a
//! copy or an operation on it afterwards sees the peers' data.

use crate::buffer::{NcclBuf, Operand};
use crate::comm::Comm;
use crate::element::Element;
use crate::window_table::WindowTable;
use oxccl_core::one_sided::{PutSignal, SignalFrom, SignalWait};
use oxccl_core::{CaptureError, Error, RegHandle, Result};
use oxccl_core::{OneSided, Windows};

/// The window `buf` is in, or the error naming `arg`.
fn window_of<T: Element>(
    table: &WindowTable,
    arg: &'static str,
    buf: &NcclBuf<T>,
) -> Result<RegHandle> {
    table.handle_of(&buf.mem()).ok_or_else(|| {
        Error::invalid(
            arg,
            format_args!("an NcclBuf this communicator put in a window (Comm::register_window)"),
        )
    })
}

impl Comm {
    /// Refuses a one-sided call inside a graph capture (`what` names it).
    fn refuse_captured(&self, what: &str) -> Result<()> {
        if self.cap().on.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(CaptureError::Unsupported.error(format_args!(
                "{what} is not captured into a Comm graph; issue it outside the capture"
            )));
        }
        Ok(())
    }

    /// Puts `buf` in a symmetric window of this communicator (NCCL 2.27+), so peers can put
    /// into it ([`Comm::put_signal`]) and it can be a put's source. Collective: every rank
    /// registers a buffer of the same length at the same point among its collectives. The
    /// communicator keeps the allocation alive until [`Comm::deregister_window`] or its end.
    /// A buffer already in a window of this communicator is refused (`buf`).
    pub fn register_window<T: Element>(&mut self, buf: &NcclBuf<T>) -> Result<()> {
        self.refuse_captured("registering a window")?;
        let mem = buf.mem();
        if self.windows.handle_of(&mem).is_some() {
            return Err(Error::invalid(
                "buf",
                format_args!("a buffer not yet in a window of this communicator"),
            ));
        }
        // Refuses memory of another device before NCCL; the access only orders the stream
        // after the buffer's last use.
        drop(Operand::read(
            buf,
            "buf",
            self.device(),
            self.nccl_stream(),
        )?);
        let handle = self.backend().register_window(mem.addr, mem.bytes)?;
        self.windows.add(handle, mem);
        Ok(())
    }

    /// Takes `buf` out of its window (collective, like the registration), once the work
    /// issued on the communicator's stream has run (this rank's puts from it and waits on it).
    pub fn deregister_window<T: Element>(&mut self, buf: &NcclBuf<T>) -> Result<()> {
        self.refuse_captured("releasing a window")?;
        let handle = window_of(&self.windows, "buf", buf)?;
        oxccl_core::Stream::synchronize(self.nccl_stream())?;
        self.backend().deregister_window(handle)?;
        self.windows.remove(handle);
        Ok(())
    }

    /// Writes `src` into rank `peer`'s buffer of the window `window` (this rank's buffer of
    /// it) from element `offset`, then raises `signal` there: one-sided, the peer takes no
    /// part until it waits for the signal ([`Comm::wait_signal`]). `src` is in a window of
    /// this communicator too (NCCL reads a put's data through one). Refused before NCCL:
    /// `src` or `window` in no window of this communicator, a put past the window's end
    /// (`offset`), a peer outside the communicator, a library without signals.
    pub fn put_signal<T: Element>(
        &mut self,
        src: &NcclBuf<T>,
        peer: u32,
        window: &NcclBuf<T>,
        offset: usize,
        signal: u32,
    ) -> Result<()> {
        self.refuse_captured("a put")?;
        self.refuse_in_group()?;
        let win = window_of(&self.windows, "window", window)?;
        window_of(&self.windows, "src", src)?;
        let (send, _g) = Operand::read(src, "src", self.device(), self.nccl_stream())?;
        let put = PutSignal {
            send,
            dtype: T::DTYPE,
            peer,
            window: win,
            offset: offset.saturating_mul(std::mem::size_of::<T>()),
            signal,
            ctx: 0,
        };
        // SAFETY: `send` is `src`'s NCCL memory on this device (checked by `read`), of its
        // length; its access, dropped after the call, records the use on the stream, so the
        // memory is neither written by a later use nor freed before the put ran.
        unsafe { self.backend().put_signal(&put, self.nccl_stream()) }
    }

    /// Raises `signal` on rank `peer`, without data.
    pub fn signal(&mut self, peer: u32, signal: u32) -> Result<()> {
        self.refuse_captured("a signal")?;
        self.refuse_in_group()?;
        self.backend().signal(peer, signal, 0, self.nccl_stream())
    }

    /// Holds the stream until every signal of `from` came (each consumed), and takes
    /// `window`, the window buffer the signals' puts wrote, as written by this wait: what
    /// reads it next on any stream sees their data.
    pub fn wait_signal<T: Element>(
        &mut self,
        from: &[SignalFrom],
        window: &mut NcclBuf<T>,
    ) -> Result<()> {
        self.refuse_captured("a wait for signals")?;
        self.refuse_in_group()?;
        window_of(&self.windows, "window", window)?;
        let waits: Vec<SignalWait> = from.iter().map(|f| f.wait_on(f.peer)).collect();
        let (_, _g) = Operand::write(window, "window", self.device(), self.nccl_stream())?;
        self.backend().wait_signal(&waits, self.nccl_stream())
    }
}

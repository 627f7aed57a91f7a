//! The two OS pieces of the process transport: a framed Unix stream socket that can carry a
//! file descriptor with a frame (SCM_RIGHTS), and a shared-memory segment (a memfd mapped
//! shared), which has no name, so it cannot outlive the processes that map it.

use super::wire::{Msg, MAX_FRAME};
use oxccl_core::{text, Error, Result};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

fn os_err(what: &str) -> Error {
    Error::Remote {
        detail: text!("{what}: {}", std::io::Error::last_os_error()),
    }
}

/// A shared mapping of a memfd (the rank's process creates it; the host maps the same fd).
pub(crate) struct Segment {
    pub fd: OwnedFd,
    ptr: *mut u8,
    pub len: usize,
}

// SAFETY: the mapping is plain shared memory; who writes which bytes when is ordered by the
// batch protocol (the rank writes before sending a batch and reads after its Done; the host
// touches it only between the two).
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    /// A new segment of `len` bytes (> 0).
    pub(crate) fn create(len: usize) -> Result<Segment> {
        // SAFETY: a NUL-terminated name; flags are valid.
        let fd = unsafe { libc::memfd_create(c"oxccl-mock".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(os_err("memfd_create"));
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = libc::off_t::try_from(len).map_err(|_| {
            Error::invalid(
                "len",
                format_args!("a segment size that fits off_t, got {len}"),
            )
        })?;
        // SAFETY: a valid fd and size.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(os_err("ftruncate of the shared segment"));
        }
        Segment::map(fd, len)
    }

    /// Maps `fd` (a segment of `len` bytes made by the peer).
    pub(crate) fn map(fd: OwnedFd, len: usize) -> Result<Segment> {
        // SAFETY: maps `len` bytes of a file we hold; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os_err("mmap of the shared segment"));
        }
        Ok(Segment {
            fd,
            ptr: ptr.cast(),
            len,
        })
    }

    /// The address of byte 0.
    pub(crate) fn base(&self) -> usize {
        self.ptr as usize
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; nobody holds a pointer into it any more
        // (the segment is dropped only when no batch uses it).
        unsafe { libc::munmap(self.ptr.cast(), self.len.max(1)) };
    }
}

/// The sending half: whole frames, each written under a lock (threads share it).
pub(crate) struct Tx {
    sock: std::sync::Mutex<UnixStream>,
}

impl Tx {
    pub(crate) fn new(sock: UnixStream) -> Tx {
        Tx {
            sock: std::sync::Mutex::new(sock),
        }
    }

    /// Sends `msg`, with `fd` attached to its first byte. A peer that is gone is an error.
    pub(crate) fn send(&self, msg: &Msg, fd: Option<RawFd>) -> Result<()> {
        self.send_flags(msg, fd, 0)
    }

    /// Sends `msg` only if the socket takes it at once (a notice sent from `Drop` or abort,
    /// which must never wait for a peer that stopped reading); dropped otherwise. Only used
    /// when the rank is leaving, so a frame cut short by a full socket costs nothing more (the
    /// host reads a malformed frame or the end, and marks the rank dead either way).
    pub(crate) fn send_now(&self, msg: &Msg) {
        let _ = self.send_flags(msg, None, libc::MSG_DONTWAIT);
    }

    fn send_flags(&self, msg: &Msg, fd: Option<RawFd>, flags: libc::c_int) -> Result<()> {
        let frame = msg.encode();
        let sock = crate::sync::lock(&self.sock);
        let mut off = 0;
        let mut fd = fd;
        while off < frame.len() {
            let rest = &frame[off..];
            let mut iov = libc::iovec {
                iov_base: rest.as_ptr() as *mut _,
                iov_len: rest.len(),
            };
            let mut cbuf = [0u64; 8];
            // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the call.
            let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
            hdr.msg_iov = &mut iov;
            hdr.msg_iovlen = 1;
            if let Some(f) = fd {
                // SAFETY: CMSG_SPACE is a pure size computation.
                let space =
                    unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
                hdr.msg_control = cbuf.as_mut_ptr().cast();
                hdr.msg_controllen = space as _;
                // SAFETY: the control buffer (64 bytes, aligned) holds one cmsg with one fd.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(&hdr);
                    (*c).cmsg_level = libc::SOL_SOCKET;
                    (*c).cmsg_type = libc::SCM_RIGHTS;
                    (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), f);
                }
            }
            // SAFETY: `hdr` describes valid buffers; MSG_NOSIGNAL: a closed peer is an
            // error, never SIGPIPE.
            let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL | flags) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(os_err("the peer process closed its connection"));
            }
            fd = None;
            off += n as usize;
        }
        Ok(())
    }

    /// Shuts the socket down both ways (the reader on each side sees the end).
    pub(crate) fn shutdown(&self) {
        let _ = crate::sync::lock(&self.sock).shutdown(std::net::Shutdown::Both);
    }
}

/// The receiving half: frames and the descriptors that came with them, in order.
pub(crate) struct Rx {
    sock: UnixStream,
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

impl Rx {
    pub(crate) fn new(sock: UnixStream) -> Rx {
        Rx {
            sock,
            buf: Vec::new(),
            fds: VecDeque::new(),
        }
    }

    /// The next message; `Ok(None)` when the peer closed the connection (or died).
    pub(crate) fn recv(&mut self) -> Result<Option<Msg>> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
                    as usize;
                if len > MAX_FRAME {
                    return Err(Error::Remote {
                        detail: text!("frame of {len} bytes from the peer process"),
                    });
                }
                if self.buf.len() >= 4 + len {
                    let m = Msg::decode(&self.buf[4..4 + len]);
                    self.buf.drain(..4 + len);
                    return m.map(Some);
                }
            }
            let mut chunk = [0u8; 16384];
            let mut iov = libc::iovec {
                iov_base: chunk.as_mut_ptr().cast(),
                iov_len: chunk.len(),
            };
            let mut cbuf = [0u64; 16];
            // SAFETY: a zeroed msghdr is valid; the buffers outlive the call.
            let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
            hdr.msg_iov = &mut iov;
            hdr.msg_iovlen = 1;
            hdr.msg_control = cbuf.as_mut_ptr().cast();
            hdr.msg_controllen = std::mem::size_of_val(&cbuf) as _;
            // SAFETY: as above; MSG_CMSG_CLOEXEC keeps received fds out of children.
            let n =
                unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut hdr, libc::MSG_CMSG_CLOEXEC) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // ECONNRESET and friends: the peer is gone.
                return Ok(None);
            }
            // SAFETY: walks the control messages the kernel wrote into `cbuf`.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&hdr);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                        let data = libc::CMSG_DATA(c).cast::<RawFd>();
                        let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                        for i in 0..bytes / std::mem::size_of::<RawFd>() {
                            let fd = std::ptr::read_unaligned(data.add(i));
                            // SAFETY: the kernel installed this descriptor for us.
                            self.fds.push_back(OwnedFd::from_raw_fd(fd));
                        }
                    }
                    c = libc::CMSG_NXTHDR(&hdr, c);
                }
            }
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n as usize]);
        }
    }

    /// Blocks reads without limit from now on (the handshake had one).
    pub(crate) fn clear_timeout(&self) {
        let _ = self.sock.set_read_timeout(None);
    }

    /// The oldest descriptor received and not yet taken.
    pub(crate) fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fds.pop_front()
    }
}

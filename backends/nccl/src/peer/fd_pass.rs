//! Handing a peer-memory descriptor to the ranks of the group that run in other processes: a
//! Unix socket in the abstract namespace (no file to clean up), the descriptor passed as
//! `SCM_RIGHTS`. A connection is served only to a process of the same user whose pid is one
//! the group announced, so no other process on the host can take the memory.

use oxccl_core::{text, Error, Result, ResultCode};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

fn os_error(what: &str) -> Error {
    Error::Backend {
        code: ResultCode::SYSTEM_ERROR,
        text: text!("system error while {what}"),
        last: text!("{}", std::io::Error::last_os_error()),
    }
}

/// The abstract socket address of rank `rank` of the group that `pid` and `token` name.
fn address(pid: u32, token: u64, rank: u32) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data; all zero is valid.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let name = format!("oxccl-peer-{pid}-{token:016x}-{rank}");
    // sun_path[0] stays 0: the abstract namespace.
    for (dst, b) in a.sun_path[1..].iter_mut().zip(name.bytes()) {
        *dst = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    (a, len as libc::socklen_t)
}

fn socket() -> Result<OwnedFd> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(os_error("opening a socket for peer memory"));
    }
    // SAFETY: a new descriptor this process owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits until `fd` is readable, up to `deadline`; false when the time ran out.
fn readable(fd: RawFd, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, 1000) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n > 0 {
            return true;
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// A listening socket that gives one descriptor to the group's other processes.
pub(crate) struct FdServer {
    sock: OwnedFd,
}

impl FdServer {
    /// Listens at the address of (`pid`, `token`, `rank`).
    pub(crate) fn bind(pid: u32, token: u64, rank: u32) -> Result<FdServer> {
        let sock = socket()?;
        let (a, len) = address(pid, token, rank);
        // SAFETY: `a` is a valid abstract address of `len` bytes.
        let r = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                (&a as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if r != 0 {
            return Err(os_error("binding the peer-memory socket"));
        }
        // SAFETY: a bound socket.
        if unsafe { libc::listen(sock.as_raw_fd(), 64) } != 0 {
            return Err(os_error("listening on the peer-memory socket"));
        }
        Ok(FdServer { sock })
    }

    /// Sends `fd` to each of `pids` (a pid listed twice is served twice: a process with two
    /// ranks; connections from any other process are closed unserved), until all were served
    /// or `deadline`; returns how many were served.
    pub(crate) fn serve(&self, fd: RawFd, pids: &[u32], deadline: Instant) -> usize {
        let mut served = Vec::with_capacity(pids.len());
        // SAFETY: plain getter.
        let uid = unsafe { libc::getuid() };
        while served.len() < pids.len() && readable(self.sock.as_raw_fd(), deadline) {
            // SAFETY: accepting on a listening socket; the result is checked.
            let c = unsafe {
                libc::accept4(
                    self.sock.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if c < 0 {
                continue;
            }
            // SAFETY: a new descriptor this process owns.
            let conn = unsafe { OwnedFd::from_raw_fd(c) };
            let Some(cred) = peer_cred(conn.as_raw_fd()) else {
                continue;
            };
            let pid = cred.pid as u32;
            // A process may hold several ranks of the group (a thread each): it connects once
            // per rank, so a pid is served as often as it is listed, no more.
            let owed = pids.iter().filter(|&&p| p == pid).count();
            let had = served.iter().filter(|&&p| p == pid).count();
            if cred.uid != uid || had >= owed {
                log::warn!("peer-memory socket: refused a connection from pid {pid}");
                continue;
            }
            if send_fd(conn.as_raw_fd(), fd) {
                served.push(pid);
            }
        }
        served.len()
    }
}

fn peer_cred(fd: RawFd) -> Option<libc::ucred> {
    // SAFETY: ucred is plain data.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the out-pointers are locals of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cred)
}

/// A one-byte message with room for one descriptor: the buffers its header points into.
#[repr(C)]
struct Message {
    byte: [u8; 1],
    iov: libc::iovec,
    ctrl: ControlBuf,
}

/// Room for one descriptor's control message, aligned for its header.
#[repr(C)]
union ControlBuf {
    buf: [u8; 64],
    _align: libc::cmsghdr,
}

impl Message {
    fn new() -> Box<Message> {
        let mut m = Box::new(Message {
            byte: [1],
            iov: libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 1,
            },
            ctrl: ControlBuf { buf: [0; 64] },
        });
        m.iov.iov_base = m.byte.as_mut_ptr().cast();
        m
    }

    /// A header over this message's buffers with `ctrl_len` control bytes (boxed, so the
    /// pointers stay valid while the header is used).
    fn header(&mut self, ctrl_len: usize) -> libc::msghdr {
        // SAFETY: msghdr is plain data (integers and pointers): all zero is valid.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = &mut self.iov;
        h.msg_iovlen = 1;
        // SAFETY: taking the address of the union's byte view writes nothing.
        h.msg_control = unsafe { self.ctrl.buf.as_mut_ptr() }.cast();
        h.msg_controllen = ctrl_len as _;
        h
    }
}

fn send_fd(conn: RawFd, fd: RawFd) -> bool {
    let mut m = Message::new();
    // SAFETY: CMSG_SPACE and CMSG_LEN are arithmetic.
    let (space, len) = unsafe { (libc::CMSG_SPACE(4), libc::CMSG_LEN(4)) };
    let h = m.header(space as usize);
    // SAFETY: the header points into `m`, alive for the call; its control buffer has room for
    // one descriptor (CMSG_SPACE(4) <= 64), so the first header and its data are inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&h);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = len as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        libc::sendmsg(conn, &h, libc::MSG_NOSIGNAL) == 1
    }
}

/// Receives the descriptor that rank `rank` of (`pid`, `token`) serves, retrying the
/// connection until `deadline` (the peer may not be listening yet).
pub(crate) fn receive(pid: u32, token: u64, rank: u32, deadline: Instant) -> Result<OwnedFd> {
    let (a, len) = address(pid, token, rank);
    let sock = loop {
        let s = socket()?;
        // SAFETY: `a` is a valid abstract address of `len` bytes.
        let r =
            unsafe { libc::connect(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) };
        if r == 0 {
            break s;
        }
        if Instant::now() >= deadline {
            return Err(os_error("connecting to a peer's memory socket"));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    if !readable(sock.as_raw_fd(), deadline) {
        return Err(Error::Timeout {
            what: text!("rank {rank}'s peer-memory descriptor"),
            after_ms: 0,
        });
    }
    let mut m = Message::new();
    let mut h = m.header(std::mem::size_of::<ControlBuf>());
    // SAFETY: the header points into `m`, alive for the call; the kernel writes at most
    // `msg_controllen` control bytes, and a descriptor it hands over is owned by this process
    // from then on.
    unsafe {
        let n = libc::recvmsg(sock.as_raw_fd(), &mut h, libc::MSG_CMSG_CLOEXEC);
        let c = libc::CMSG_FIRSTHDR(&h);
        if n != 1 || c.is_null() || (*c).cmsg_type != libc::SCM_RIGHTS {
            return Err(os_error("receiving a peer's memory descriptor"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn pipe() -> (std::fs::File, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both are new descriptors this process owns.
        unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        }
    }

    #[test]
    fn a_descriptor_goes_to_a_listed_process_and_refers_to_the_same_file() {
        let (mut rd, wr) = pipe();
        let me = std::process::id();
        let token = 0x5eed_0000 + u64::from(me);
        let server = FdServer::bind(me, token, 3).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = std::thread::scope(|s| {
            let served = s.spawn(|| server.serve(wr.as_raw_fd(), &[me], deadline));
            let got = receive(me, token, 3, deadline).unwrap();
            assert_eq!(served.join().unwrap(), 1);
            got
        });
        assert_ne!(got.as_raw_fd(), wr.as_raw_fd(), "a new descriptor");
        let mut through = std::fs::File::from(got);
        through.write_all(b"peer").unwrap();
        drop((through, wr));
        let mut text = String::new();
        rd.read_to_string(&mut text).unwrap();
        assert_eq!(text, "peer");
    }

    #[test]
    fn a_process_the_group_did_not_announce_gets_nothing() {
        let (_rd, wr) = pipe();
        let me = std::process::id();
        let token = 0x5eed_1000 + u64::from(me);
        let server = FdServer::bind(me, token, 0).unwrap();
        let deadline = Instant::now() + Duration::from_millis(600);
        std::thread::scope(|s| {
            // Only pid 1 may take it: this process's connection is closed unserved.
            let served = s.spawn(|| server.serve(wr.as_raw_fd(), &[1], deadline));
            assert!(receive(me, token, 0, deadline).is_err());
            assert_eq!(served.join().unwrap(), 0);
        });
    }

    #[test]
    fn a_process_with_two_ranks_is_served_twice_and_no_more() {
        let (_rd, wr) = pipe();
        let me = std::process::id();
        let token = 0x5eed_2000 + u64::from(me);
        let server = FdServer::bind(me, token, 1).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        std::thread::scope(|s| {
            let served = s.spawn(|| server.serve(wr.as_raw_fd(), &[me, me], deadline));
            assert!(receive(me, token, 1, deadline).is_ok());
            assert!(receive(me, token, 1, deadline).is_ok());
            assert_eq!(served.join().unwrap(), 2);
        });
        // Served in full, the server answers no one: a third rank of this pid waits in vain.
        let late = std::thread::scope(|s| {
            let served = s.spawn(|| server.serve(wr.as_raw_fd(), &[], Instant::now()));
            let got = receive(me, token, 1, Instant::now() + Duration::from_millis(300));
            assert_eq!(served.join().unwrap(), 0);
            got
        });
        assert!(late.is_err());
    }

    #[test]
    fn nobody_listening_is_an_error_by_the_deadline() {
        let t0 = Instant::now();
        let e = receive(
            std::process::id(),
            0xdead,
            9,
            t0 + Duration::from_millis(50),
        );
        assert!(e.is_err());
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}

//! The host side: the listener rank processes connect to, and a proxy per connected rank that
//! joins the real communicator for it and runs its batches on shared memory.

use super::split_match::serve_split;
use crate::binding::Binding;
use crate::job::Job;
use crate::lobby::{Joiner, Lobby};
use crate::shared::CommShared;
use crate::stream::MockStream;
use crate::sync::lock;
use crate::transport::chan::{Rx, Segment, Tx};
use crate::transport::proc_id::{random_token, ProcId};
use crate::transport::wire::{Msg, WireJob};
use oxccl_core::text::text_str;
use oxccl_core::{text, Error, Result, UniqueId};
use std::collections::HashMap;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Ids this process hosts, by token, with the lobby whose rendezvous they join.
fn hosts() -> &'static Mutex<HashMap<[u8; 16], Arc<Lobby>>> {
    static H: OnceLock<Mutex<HashMap<[u8; 16], Arc<Lobby>>>> = OnceLock::new();
    H.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The lobby hosting `id` in this process, if this process made it.
pub(crate) fn local_host(id: &ProcId) -> Option<Arc<Lobby>> {
    if id.pid != std::process::id() {
        return None;
    }
    lock(hosts()).get(&id.token).cloned()
}

/// A new process-spanning id hosted by `lobby`: binds its listener and starts accepting.
pub(crate) fn start(lobby: &Arc<Lobby>, limit: Duration) -> Result<UniqueId> {
    let pid = ProcId {
        pid: std::process::id(),
        token: random_token(),
    };
    let mut hosts = lock(hosts());
    start_locked(&mut hosts, lobby, pid, limit)?;
    Ok(pid.to_id())
}

/// The lobby hosting `id` (a split child's, made by this process) here: the one already
/// started for it by another rank of this process, else `make()`, started now. Every member of
/// the child in this process gets the same rendezvous.
pub(crate) fn host_child(
    id: &ProcId,
    limit: Duration,
    make: impl FnOnce() -> Arc<Lobby>,
) -> Result<Arc<Lobby>> {
    let mut hosts = lock(hosts());
    if let Some(b) = hosts.get(&id.token) {
        return Ok(b.clone());
    }
    let b = make();
    start_locked(&mut hosts, &b, *id, limit)?;
    Ok(b)
}

/// Binds the listener of `pid`, registers `lobby` as its host and starts accepting.
fn start_locked(
    hosts: &mut HashMap<[u8; 16], Arc<Lobby>>,
    lobby: &Arc<Lobby>,
    pid: ProcId,
    limit: Duration,
) -> Result<()> {
    let name = pid.socket_name();
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| Error::Remote {
        detail: text!("abstract socket name {name}: {e}"),
    })?;
    let listener = UnixListener::bind_addr(&addr).map_err(|e| Error::Remote {
        detail: text!("binding the mock host's socket {name}: {e}"),
    })?;
    listener.set_nonblocking(true).map_err(|e| Error::Remote {
        detail: text!("mock host socket: {e}"),
    })?;
    hosts.insert(pid.token, lobby.clone());
    let b = lobby.clone();
    let spawned = std::thread::Builder::new()
        .name("oxccl-mock-host".into())
        .spawn(move || accept_loop(b, pid, listener, limit));
    if let Err(e) = spawned {
        hosts.remove(&pid.token);
        return Err(Error::Remote {
            detail: text!("starting the mock host thread: {e}"),
        });
    }
    Ok(())
}

/// Accepts until the rendezvous ended (every rank joined, or every waiter gave up) or the
/// init time limit passed, then closes the listener, which removes its name.
fn accept_loop(lobby: Arc<Lobby>, pid: ProcId, listener: UnixListener, limit: Duration) {
    let id = pid.to_id();
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((sock, _)) => {
                let b = lobby.clone();
                let spawned = std::thread::Builder::new()
                    .name("oxccl-mock-proxy".into())
                    .spawn(move || serve(b, pid, sock));
                // Without a thread the rank's connect times out and it is told so.
                drop(spawned);
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // A failed accept (the rank gave up meanwhile) leaves nothing to do.
            Err(_) => {}
        }
        if lobby.take_ended(&id) || start.elapsed() >= limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    lock(hosts()).remove(&pid.token);
}

/// One connected rank: join for it, then run its batches until it leaves.
fn serve(lobby: Arc<Lobby>, pid: ProcId, sock: UnixStream) {
    let limit = lobby.init_limit();
    let _ = sock.set_nonblocking(false);
    let _ = sock.set_read_timeout(Some(
        limit
            .min(Duration::from_secs(86_400))
            .max(Duration::from_millis(1)),
    ));
    let Ok(w) = sock.try_clone() else { return };
    let tx = Arc::new(Tx::new(w));
    let mut rx = Rx::new(sock);
    let Ok(Some(Msg::Hello {
        token,
        rank,
        size,
        pid: from,
        limit_ms,
    })) = rx.recv()
    else {
        return;
    };
    if token != pid.token {
        let e = Error::invalid(
            "id",
            format_args!("the token of this mock communicator's id"),
        );
        let _ = tx.send(&Msg::Welcome(Err(e)), None);
        return;
    }
    // The rank's own limit: its timeout error, naming the missing ranks, comes from here.
    let limit = Duration::from_millis(limit_ms);
    let real = match lobby.join(
        &pid.to_id(),
        rank,
        size,
        Joiner::elsewhere(Some(from)),
        limit,
    ) {
        Ok(c) => c,
        Err(e) => {
            let _ = tx.send(&Msg::Welcome(Err(e)), None);
            return;
        }
    };
    let seat = Seat(Binding::bound(real.clone(), rank));
    let pids = lock(&real.pids).clone();
    if tx.send(&Msg::Welcome(Ok(pids)), None).is_err() {
        real.mark_dead(rank, text!("closed its connection before init completed"));
        seat.0.abort("the rank's process left during init");
        return;
    }
    rx.clear_timeout();
    let mut proxy = Proxy {
        real,
        rank,
        tx,
        segs: HashMap::new(),
        streams: HashMap::new(),
    };
    let why = loop {
        match rx.recv() {
            Ok(Some(Msg::Batch {
                id,
                stream,
                seg,
                seg_len,
                jobs,
            })) => {
                if let Err(e) = proxy.batch(&mut rx, id, stream, seg, seg_len, jobs) {
                    let _ = proxy.tx.send(&Msg::Done { id, result: Err(e) }, None);
                }
            }
            Ok(Some(Msg::Dead { why })) => {
                proxy.real.mark_dead(rank, text_str(&why));
                seat.0.abort(&why);
            }
            Ok(Some(Msg::Forget { seg })) => {
                proxy.segs.remove(&seg);
            }
            Ok(Some(Msg::Split { seq, color, key })) => {
                serve_split(&proxy.real, rank, seq, color, key, &proxy.tx);
            }
            Ok(Some(Msg::OneSided { id, call })) => {
                super::one_sided::serve(&proxy.real, rank, id, call, &proxy.tx);
            }
            Ok(Some(_)) => {}
            Ok(None) => break String::from("process exited (its connection closed)"),
            Err(e) => break format!("process sent a malformed message ({e})"),
        }
    };
    // Marked first so peers read this text rather than the abort's.
    proxy.real.mark_dead(rank, text_str(&why));
    seat.0.abort(&why);
    drop(proxy);
}

/// The proxied rank's place in the real communicator, held as its own communicator would be:
/// aborted when its process dies, and left on drop as a dropped communicator leaves.
struct Seat(Binding);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// What a proxy holds for its rank.
struct Proxy {
    real: Arc<CommShared>,
    rank: u32,
    tx: Arc<Tx>,
    segs: HashMap<u64, Arc<Segment>>,
    /// A host stream per stream of the rank's process, so each keeps its order.
    streams: HashMap<u64, MockStream>,
}

impl Proxy {
    fn batch(
        &mut self,
        rx: &mut Rx,
        id: u64,
        stream: u64,
        seg: u64,
        seg_len: u64,
        jobs: Vec<WireJob>,
    ) -> Result<()> {
        if let std::collections::hash_map::Entry::Vacant(v) = self.segs.entry(seg) {
            let fd = rx.take_fd().ok_or_else(|| Error::Remote {
                detail: text!("segment {seg} arrived without its descriptor"),
            })?;
            let len = usize::try_from(seg_len)
                .map_err(|_| Error::invalid("seg_len", format_args!("a size, got {seg_len}")))?;
            v.insert(Arc::new(Segment::map(fd, len)?));
        }
        let s = self.segs.get(&seg).cloned().ok_or_else(|| Error::Remote {
            detail: text!("segment {seg} unknown"),
        })?;
        let jobs = jobs
            .into_iter()
            .map(|j| self.job(&s, j))
            .collect::<Result<Vec<Job>>>()?;
        if let std::collections::hash_map::Entry::Vacant(v) = self.streams.entry(stream) {
            v.insert(MockStream::new()?);
        }
        let st = self.streams.get(&stream).ok_or_else(|| Error::Remote {
            detail: text!("no host stream"),
        })?;
        crate::exec::submit(st.shared(), jobs)?;
        let (tx, real, rank) = (self.tx.clone(), self.real.clone(), self.rank);
        st.host_fn(move || {
            // The segment stays mapped until the batch ran.
            let _keep = s;
            let result = if real.alive(rank) {
                Ok(())
            } else {
                Err(real.own_error(rank))
            };
            let _ = tx.send(&Msg::Done { id, result }, None);
        })
    }

    /// The job with its offsets turned into addresses in `s`, each span checked to lie inside.
    fn job(&self, s: &Segment, j: WireJob) -> Result<Job> {
        let mut d = j.desc;
        let es = d.elem();
        let at = |off: usize, bytes: usize, what: &'static str| -> Result<usize> {
            match off.checked_add(bytes) {
                Some(end) if end <= s.len => Ok(s.base() + off),
                _ => Err(Error::invalid(
                    what,
                    format_args!(
                        "a span inside the {}-byte segment, got {bytes} bytes at {off}",
                        s.len
                    ),
                )),
            }
        };
        if d.send.len > 0 {
            d.send.addr = at(d.send.addr, d.send.len.saturating_mul(es), "send")?;
        }
        if d.recv.len > 0 {
            d.recv.addr = at(d.recv.addr, d.recv.len.saturating_mul(es), "recv")?;
        }
        if let Some(oxccl_core::ReduceOp::PreMulSum(oxccl_core::Scalar::Device { addr })) = d.op {
            d.op = Some(oxccl_core::ReduceOp::PreMulSum(
                oxccl_core::Scalar::Device {
                    addr: at(addr, es, "factor")?,
                },
            ));
        }
        Ok(Job {
            comm: self.real.clone(),
            rank: self.rank,
            desc: d,
            seq: j.seq,
            index: j.index,
            fault: j.fault,
        })
    }
}

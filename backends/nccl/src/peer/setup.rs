//! Making a group's peer memory: a collective every rank of the communicator runs together.
//!
//! 1. Each rank makes its memory, exports it as a descriptor, loads the kernels and listens
//!    for the peers that run in other processes; whatever fails only makes it ineligible.
//! 2. The ranks gather one record each (an NCCL all-gather on the communicator) and decide
//!    alike from them (`record::refusal`): every rank eligible, one host, one policy and table.
//! 3. Each rank imports and maps every peer's memory: from the descriptor itself for a peer in
//!    its own process, over the peer's socket otherwise, while serving its own.
//! 4. The ranks gather their verdicts: the kernels run only if every rank mapped every peer.
//!
//! Every rank takes part in both gathers whatever happened to it, so a failure on one rank
//! never leaves the others waiting: the group then uses NCCL alone.

use super::fd_pass::{self, FdServer};
use super::host_flags::HostFlags;
use super::kernels::{Kernels, PeerArgs};
use super::memory::{Mapped, PeerMemory};
use super::vmm::{self, Mapping, Physical};
use cudarc::driver::{CudaContext, CudaStream};
use oxccl_core::peer_kernels::record::{
    all_mapped, policy_code, refusal, verdict, PeerRecord, RECORD_BYTES,
};
use oxccl_core::peer_kernels::{peer_bytes, PeerPolicy, PeerTable, LINES_PER_SLOT, MAX_RANKS};
use oxccl_core::Result;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The rank that sets up: its device and place in the group.
pub(crate) struct Member<'a> {
    pub(crate) ctx: &'a Arc<CudaContext>,
    pub(crate) rank: u32,
    pub(crate) size: u32,
}

/// Gathers equal-length bytes from every rank of the group, in rank order (the
/// communicator's all-gather, waited for).
pub(crate) type Gather<'a> = dyn FnMut(&[u8]) -> Result<Vec<u8>> + 'a;

/// What one rank made before the first gather.
struct Local {
    kernels: Kernels,
    phys: Physical,
    mapping: Mapping,
    fd: OwnedFd,
    flags: HostFlags,
    server: FdServer,
    socket: u64,
}

/// A random number (for tokens that name sockets and processes).
fn random() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        v = t ^ (u64::from(std::process::id()) << 32);
    }
    v
}

/// This process's token (see `PeerRecord::process`).
fn process_token() -> u64 {
    static TOKEN: OnceLock<u64> = OnceLock::new();
    *TOKEN.get_or_init(random)
}

/// This host, as ranks compare it: `OXCCL_PEER_HOST` when set (ranks that must not share
/// memory, or tests standing for separate hosts), else the host name and boot id (alike for
/// every container of one machine that shares its host name).
fn host_id() -> u64 {
    let text = match std::env::var(PEER_HOST) {
        Ok(v) => v.into_bytes(),
        Err(_) => {
            let mut name = [0u8; 256];
            // SAFETY: gethostname writes at most `name.len()` bytes.
            unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
            let mut t: Vec<u8> = name.iter().copied().take_while(|&b| b != 0).collect();
            t.extend(std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default());
            t
        }
    };
    oxccl_core::fnv::fnv1a(&text)
}

/// The variable that names this rank's host for the set-up (see `host_id`).
pub(crate) const PEER_HOST: &str = "OXCCL_PEER_HOST";

fn make_local(comm: &Member<'_>, stream: &Arc<CudaStream>) -> Result<Local> {
    let ordinal = comm.ctx.ordinal() as i32;
    if !vmm::supported(comm.ctx.cu_device()) {
        return Err(oxccl_core::Error::invalid(
            "device",
            format_args!("a device whose memory other processes can import by descriptor"),
        ));
    }
    let kernels = Kernels::of(comm.ctx)?;
    let bytes = vmm::rounded(ordinal, peer_bytes(comm.size))?;
    let phys = Physical::create(ordinal, bytes)?;
    let mapping = Mapping::new(&phys, ordinal)?;
    mapping.zero(stream.cu_stream())?;
    let fd = phys.export()?;
    let flags = HostFlags::new()?;
    let socket = random();
    let server = FdServer::bind(std::process::id(), socket, comm.rank)?;
    Ok(Local {
        kernels,
        phys,
        mapping,
        fd,
        flags,
        server,
        socket,
    })
}

/// Imports and maps every rank's memory (own included: its existing mapping is reused by the
/// caller, so here only peers), in rank order.
fn map_peers(
    comm: &Member<'_>,
    records: &[PeerRecord],
    deadline: Instant,
) -> Result<Vec<Option<Mapped>>> {
    let ordinal = comm.ctx.ordinal() as i32;
    let me = process_token();
    let mut out = Vec::with_capacity(records.len());
    for (p, r) in records.iter().enumerate() {
        if p == comm.rank as usize {
            out.push(None);
            continue;
        }
        let phys = if r.process == me {
            // The peer's descriptor is open in this process until the verdicts are in.
            Physical::import(r.fd, r.bytes as usize)?
        } else {
            let fd = fd_pass::receive(r.pid, r.socket, p as u32, deadline)?;
            Physical::import(fd.as_raw_fd(), r.bytes as usize)?
        };
        let mapping = Mapping::new(&phys, ordinal)?;
        out.push(Some(Mapped {
            mapping,
            _phys: phys,
        }));
    }
    Ok(out)
}

/// Runs the set-up on every rank of `comm` (see the module); `Ok(None)` when the group uses
/// NCCL alone (why is logged). Errors are the communicator's own (a failed gather).
pub(crate) fn setup(
    comm: &Member<'_>,
    stream: &Arc<CudaStream>,
    gather: &mut Gather<'_>,
    policy: PeerPolicy,
    table: PeerTable,
    timeout: Duration,
) -> Result<Option<PeerMemory>> {
    comm.ctx
        .bind_to_thread()
        .map_err(|e| crate::cuda::cuda_error("binding the device for peer memory", e))?;
    let wanted = policy != PeerPolicy::Nccl && (2..=MAX_RANKS).contains(&comm.size);
    let local = if wanted {
        make_local(comm, stream).map_err(|e| {
            log::info!("rank {}: no peer memory: {e}", comm.rank);
        })
    } else {
        Err(())
    };
    let mine = match &local {
        Ok(l) => PeerRecord {
            eligible: true,
            pid: std::process::id(),
            process: process_token(),
            host: host_id(),
            table: table.fingerprint(),
            policy: policy_code(policy),
            fd: l.fd.as_raw_fd(),
            bytes: l.phys.bytes() as u64,
            socket: l.socket,
        },
        Err(()) => PeerRecord::ineligible(&table, policy),
    };
    let all = gather(&mine.encode())?;
    let records: Vec<Option<PeerRecord>> =
        all.chunks(RECORD_BYTES).map(PeerRecord::decode).collect();
    if let Some(why) = refusal(&records) {
        if wanted {
            log::info!(
                "rank {}: all-reduce kernels off for this group: {why}",
                comm.rank
            );
        }
        return Ok(None);
    }
    let (Ok(local), records) = (local, records.into_iter().flatten().collect::<Vec<_>>()) else {
        // `refusal` saw this rank eligible, so it made its memory.
        return Ok(None);
    };
    let deadline = Instant::now() + timeout.min(Duration::from_secs(30));
    let others: Vec<u32> = records
        .iter()
        .filter(|r| r.process != process_token())
        .map(|r| r.pid)
        .collect();
    let (mapped, served) = std::thread::scope(|s| {
        let server = s.spawn(|| local.server.serve(local.fd.as_raw_fd(), &others, deadline));
        let mapped = map_peers(comm, &records, deadline);
        (mapped, server.join().unwrap_or(0))
    });
    let ok = mapped.is_ok() && served == others.len();
    if let Err(e) = &mapped {
        log::info!("rank {}: mapping peer memory failed: {e}", comm.rank);
    }
    let verdicts = gather(&verdict(ok).to_le_bytes())?;
    let verdicts: Vec<u64> = verdicts
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    // The descriptor was needed only until every rank imported it.
    drop(local.fd);
    if !all_mapped(&verdicts) {
        log::info!(
            "rank {}: all-reduce kernels off: a rank could not map its peers",
            comm.rank
        );
        return Ok(None);
    }
    let mut own = Some(Mapped {
        mapping: local.mapping,
        _phys: local.phys,
    });
    let mut bases = [0u64; MAX_RANKS as usize];
    let mut mapped_all = Vec::with_capacity(records.len());
    for (p, m) in mapped?.into_iter().enumerate() {
        // The own slot is the only empty one.
        let Some(m) = m.or_else(|| own.take()) else {
            return Ok(None);
        };
        bases[p] = m.mapping.addr();
        mapped_all.push(m);
    }
    let args = PeerArgs {
        peers: bases,
        lines_per_slot: LINES_PER_SLOT,
        timeout_ns: timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
        abort_flag: local.flags.abort_addr(),
        status: local.flags.status_addr(),
        mark_word: 0,
        mark: 0,
        scale: 1.0,
        rank: comm.rank,
        nranks: comm.size,
        op: 0,
        seq: 0,
        follow: 0,
        pad: 0,
    };
    log::debug!(
        "rank {}: all-reduce kernels on ({})",
        comm.rank,
        policy.name()
    );
    Ok(Some(PeerMemory {
        ctx: comm.ctx.clone(),
        policy,
        table,
        kernels: local.kernels,
        args,
        timeout,
        _mapped: mapped_all,
        flags: local.flags,
        streams: spin::Mutex::new(Vec::new()),
        calls: Default::default(),
        order: Default::default(),
    }))
}

//! What each rank tells the group when it sets up peer memory (one fixed-size record each,
//! gathered by the library), and the decisions every rank draws from the gathered records.
//! Pure: every rank reads the same records, so every rank decides alike.

use super::{PeerPolicy, PeerTable};

/// Bytes of one encoded record.
pub const RECORD_BYTES: usize = 64;

const MAGIC: u32 = 0x4b50_584f; // "OXPK"
const VERSION: u32 = 1;
const OK_MAGIC: u32 = 0x4b4f_584f; // "OXOK"

/// One rank's part of the set-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerRecord {
    /// Whether this rank made its peer memory and loaded the kernels.
    pub eligible: bool,
    /// Its process id.
    pub pid: u32,
    /// A random number drawn once per process: ranks with equal tokens share a process
    /// (pids alone can repeat across containers).
    pub process: u64,
    /// Its host: ranks with different hosts cannot map each other's memory.
    pub host: u64,
    /// Its table's fingerprint ([`PeerTable::fingerprint`]).
    pub table: u64,
    /// Its policy.
    pub policy: u8,
    /// The descriptor of its peer memory, in its process.
    pub fd: i32,
    /// The size of its peer memory.
    pub bytes: u64,
    /// A random number naming its descriptor socket for this set-up.
    pub socket: u64,
}

/// A policy as one byte.
pub const fn policy_code(p: PeerPolicy) -> u8 {
    match p {
        PeerPolicy::Auto => 0,
        PeerPolicy::Nccl => 1,
        PeerPolicy::Force(super::KernelAlgo::OneShot) => 2,
        PeerPolicy::Force(super::KernelAlgo::TwoShot) => 3,
        PeerPolicy::Force(super::KernelAlgo::AllGather) => 4,
        PeerPolicy::Force(super::KernelAlgo::ReduceScatter) => 5,
    }
}

impl PeerRecord {
    /// The record of a rank that takes no part (NCCL only): the others then make none.
    pub fn ineligible(table: &PeerTable, policy: PeerPolicy) -> PeerRecord {
        PeerRecord {
            table: table.fingerprint(),
            policy: policy_code(policy),
            fd: -1,
            ..PeerRecord::default()
        }
    }

    /// Its bytes, little-endian.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&VERSION.to_le_bytes());
        b[8] = u8::from(self.eligible);
        b[9] = self.policy;
        b[12..16].copy_from_slice(&self.pid.to_le_bytes());
        b[16..24].copy_from_slice(&self.process.to_le_bytes());
        b[24..32].copy_from_slice(&self.host.to_le_bytes());
        b[32..40].copy_from_slice(&self.table.to_le_bytes());
        b[40..44].copy_from_slice(&self.fd.to_le_bytes());
        b[48..56].copy_from_slice(&self.bytes.to_le_bytes());
        b[56..64].copy_from_slice(&self.socket.to_le_bytes());
        b
    }

    /// The record in `b`; `None` unless it is one (wrong length, magic or version, a flag
    /// byte other than 0 or 1).
    pub fn decode(b: &[u8]) -> Option<PeerRecord> {
        if b.len() != RECORD_BYTES {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        if u32_at(0) != MAGIC || u32_at(4) != VERSION || b[8] > 1 {
            return None;
        }
        Some(PeerRecord {
            eligible: b[8] == 1,
            policy: b[9],
            pid: u32_at(12),
            process: u64_at(16),
            host: u64_at(24),
            table: u64_at(32),
            fd: u32_at(40) as i32,
            bytes: u64_at(48),
            socket: u64_at(56),
        })
    }
}

/// Why a group cannot use peer memory, from every rank's record (in rank order); `None`: it
/// can. Every rank must have made its memory, on one host, with the same policy, table and
/// memory size.
pub fn refusal(records: &[Option<PeerRecord>]) -> Option<&'static str> {
    let first = match records.first() {
        Some(Some(r)) => r,
        Some(None) => return Some("a rank sent no valid record"),
        None => return Some("no ranks"),
    };
    for r in records {
        let Some(r) = r else {
            return Some("a rank sent no valid record");
        };
        if !r.eligible {
            return Some("a rank could not make peer memory or load the kernels");
        }
        if r.host != first.host {
            return Some("the ranks are on more than one host");
        }
        if r.policy != first.policy || r.table != first.table {
            return Some("the ranks' policies or tables differ");
        }
        if r.bytes != first.bytes {
            return Some("the ranks' peer memory sizes differ");
        }
    }
    None
}

/// A rank's verdict after mapping every peer's memory, as one word.
pub const fn verdict(ok: bool) -> u64 {
    ((OK_MAGIC as u64) << 32) | ok as u64
}

/// Whether every rank's verdict (in rank order) says it mapped every peer.
pub fn all_mapped(verdicts: &[u64]) -> bool {
    !verdicts.is_empty() && verdicts.iter().all(|&v| v == verdict(true))
}

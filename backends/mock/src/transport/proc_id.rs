//! The id of a communicator that spans processes: what it carries (the host's pid and a random
//! token), its bytes, and the token's source.

use oxccl_core::UniqueId;

/// The first bytes of an id that spans processes.
const MAGIC: &[u8; 8] = b"OXMPROC1";

/// What a process-spanning id carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcId {
    pub pid: u32,
    pub token: [u8; 16],
}

impl ProcId {
    /// The id's bytes.
    // Used by the transport (Linux only) and the tests.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn to_id(self) -> UniqueId {
        let mut b = [0u8; UniqueId::LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..28].copy_from_slice(&self.token);
        UniqueId(b)
    }

    /// The process-spanning id in `id`, if it is one.
    pub(crate) fn of(id: &UniqueId) -> Option<ProcId> {
        if &id.0[..8] != MAGIC || id.0[28..].iter().any(|b| *b != 0) {
            return None;
        }
        let mut token = [0u8; 16];
        token.copy_from_slice(&id.0[12..28]);
        Some(ProcId {
            pid: u32::from_le_bytes([id.0[8], id.0[9], id.0[10], id.0[11]]),
            token,
        })
    }

    /// The listener's abstract socket name.
    #[cfg(target_os = "linux")]
    pub(crate) fn socket_name(&self) -> String {
        let hex: String = self.token.iter().map(|b| format!("{b:02x}")).collect();
        format!("oxccl-mock-{}-{hex}", self.pid)
    }
}

/// 16 random bytes from the kernel (a clock mix if it refuses).
#[cfg(target_os = "linux")]
pub(crate) fn random_token() -> [u8; 16] {
    let mut t = [0u8; 16];
    // SAFETY: writes at most 16 bytes into `t`.
    let n = unsafe { libc::getrandom(t.as_mut_ptr().cast(), t.len(), 0) };
    if n != 16 {
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        t = (clock ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_plain_ids_are_not_process_ids() {
        let p = ProcId {
            pid: 77,
            token: [5; 16],
        };
        assert_eq!(ProcId::of(&p.to_id()), Some(p));
        assert_eq!(ProcId::of(&UniqueId([0; UniqueId::LEN])), None);
        let mut id = p.to_id();
        id.0[100] = 1;
        assert_eq!(ProcId::of(&id), None);
    }
}

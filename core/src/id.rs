//! The 128-byte rendezvous token of a communicator.

/// NCCL's `ncclUniqueId`: 128 opaque bytes made by one rank and shared with the others
/// (through a store, MPI, a file) before they create a communicator together.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct UniqueId(pub [u8; UniqueId::LEN]);

impl UniqueId {
    /// Length in bytes (`NCCL_UNIQUE_ID_BYTES`).
    pub const LEN: usize = 128;

    /// The id from bytes received from another rank; refuses any other length.
    pub fn from_bytes(bytes: &[u8]) -> crate::error::Result<UniqueId> {
        let arr: [u8; Self::LEN] =
            bytes
                .try_into()
                .map_err(|_| crate::error::Error::InvalidArgument {
                    arg: "unique_id",
                    expected: crate::text!("exactly {} bytes, got {}", Self::LEN, bytes.len()),
                })?;
        Ok(UniqueId(arr))
    }

    /// The bytes to send to the other ranks.
    pub const fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }
}

impl core::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "UniqueId(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_lengths_are_refused() {
        for n in [0usize, 1, 127, 129, 256] {
            let v = [0u8; 256];
            assert!(matches!(
                UniqueId::from_bytes(&v[..n]),
                Err(crate::error::Error::InvalidArgument {
                    arg: "unique_id",
                    ..
                })
            ));
        }
        let id = UniqueId::from_bytes(&[7u8; 128]).unwrap();
        assert_eq!(id.as_bytes()[127], 7);
    }
}

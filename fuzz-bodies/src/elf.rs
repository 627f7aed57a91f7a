//! The loader's ELF check (`oxccl::loader::elf::check`) on any bytes and any file size. It
//! never panics; an accepted file satisfies every documented rule, restated here in `u128`
//! (magic, 64-bit, this machine's byte order and machine, `ET_DYN`, 56-byte program headers,
//! the table, every LOAD and DYNAMIC segment and the section header table inside the file, a
//! LOAD among them); a refusal states a fact true of the bytes (the field it names holds what
//! it says, a truncated part really ends where it says, past the size); bytes past the header
//! region change nothing, and the two-step API agrees with the whole check.
//!
//! Input: byte 0 even, the rest is a whole file (its size is its length); odd, the next 8
//! bytes are the file's size (little-endian) and the rest its first bytes.

use oxccl::loader::elf::{self, Elf, ElfError, Part, HEADER_LEN, HOST_DATA, HOST_MACHINE};

/// The fields of the header and program headers, read independently of the check.
struct Model<'a> {
    head: &'a [u8],
    size: u64,
}

impl Model<'_> {
    fn bytes<const N: usize>(&self, at: u128) -> Option<[u8; N]> {
        let at = usize::try_from(at).ok()?;
        self.head.get(at..at.checked_add(N)?)?.try_into().ok()
    }
    fn u16(&self, at: u128) -> Option<u128> {
        self.bytes(at).map(|b| u128::from(u16::from_ne_bytes(b)))
    }
    fn u32(&self, at: u128) -> Option<u128> {
        self.bytes(at).map(|b| u128::from(u32::from_ne_bytes(b)))
    }
    fn u64(&self, at: u128) -> Option<u128> {
        self.bytes(at).map(|b| u128::from(u64::from_ne_bytes(b)))
    }
    fn phoff(&self) -> u128 {
        self.u64(32).unwrap()
    }
    fn phnum(&self) -> u128 {
        self.u16(56).unwrap()
    }
    fn table_end(&self) -> u128 {
        self.phoff() + self.phnum() * 56
    }
    /// `(type, offset, file size)` of program header `i`, when the head holds it.
    fn phdr(&self, i: u128) -> Option<(u128, u128, u128)> {
        let at = self.phoff() + i * 56;
        Some((self.u32(at)?, self.u64(at + 8)?, self.u64(at + 32)?))
    }
    fn shoff(&self) -> u128 {
        self.u64(40).unwrap()
    }
    fn section_end(&self) -> u128 {
        let count = self.u16(60).unwrap().max(1);
        self.shoff() + count * self.u16(58).unwrap()
    }
    /// Where `part` ends by the headers, and its offset and length.
    fn part(&self, part: Part) -> (u128, u128) {
        match part {
            Part::Header => (0, HEADER_LEN as u128),
            Part::ProgramHeaders => (self.phoff(), self.phnum() * 56),
            Part::Segment { index, kind } => {
                let (t, off, len) = self
                    .phdr(u128::from(index))
                    .expect("a named header is read");
                assert_eq!(t, u128::from(kind), "segment {index}: its type");
                assert!(kind == 1 || kind == 2, "only LOAD and DYNAMIC are checked");
                (off, len)
            }
            Part::SectionHeaders => {
                assert_ne!(self.shoff(), 0, "no section table to check");
                (self.shoff(), self.section_end() - self.shoff())
            }
        }
    }
}

/// One input: see the module's documentation.
pub fn fuzz(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (head, size) = if mode % 2 == 0 || rest.len() < 8 {
        (rest, rest.len() as u64)
    } else {
        let (s, head) = rest.split_at(8);
        (head, u64::from_le_bytes(s.try_into().unwrap()))
    };
    let got = elf::check(head, size);
    let m = Model { head, size };
    match &got {
        Ok(()) => accepted(&m),
        Err(e) => refused(&m, e),
    }
    // The two steps give the same answer.
    let steps = Elf::parse(&head[..head.len().min(HEADER_LEN)], size).and_then(|elf| {
        let (off, len) = elf.program_headers();
        let table = usize::try_from(off)
            .ok()
            .and_then(|o| head.get(o..))
            .unwrap_or_default();
        elf.check_layout(&table[..table.len().min(len)])
    });
    // A header cut in `head` but not in the file reads as Incomplete either way.
    assert_eq!(steps, got, "two steps and the whole check");
    // Bytes past the header region are never read.
    // (With the whole header in `head`: short of it, more bytes would be more of the header.)
    if head.len() >= HEADER_LEN && !matches!(got, Err(ElfError::Incomplete { .. })) {
        let mut longer = head.to_vec();
        longer.extend_from_slice(&[0xA5; 97]);
        assert_eq!(elf::check(&longer, size), got, "bytes past the region");
    }
}

fn accepted(m: &Model) {
    let head = m.head;
    let size = u128::from(m.size);
    assert!(head.len() >= HEADER_LEN);
    assert_eq!(&head[..4], b"\x7fELF");
    assert_eq!(head[4], 2, "64-bit");
    assert_eq!(head[5], HOST_DATA);
    assert_eq!(head[6], 1);
    assert_eq!(m.u16(16), Some(3), "ET_DYN");
    if let Some(machine) = HOST_MACHINE {
        assert_eq!(m.u16(18), Some(u128::from(machine)));
    }
    assert_eq!(m.u32(20), Some(1));
    assert_eq!(m.u16(54), Some(56));
    assert!(m.phnum() > 0);
    assert!(m.table_end() <= size);
    let mut loads = 0;
    for i in 0..m.phnum() {
        let (t, off, len) = m.phdr(i).expect("an accepted table was read");
        if t == 1 || t == 2 {
            assert!(off + len <= size, "segment {i} inside the file");
        }
        loads += u32::from(t == 1);
    }
    assert!(loads > 0);
    if m.shoff() != 0 {
        assert!(m.section_end() <= size);
    }
}

fn refused(m: &Model, e: &ElfError) {
    assert!(!e.to_string().is_empty());
    let head = m.head;
    match e {
        ElfError::NotElf { found } => {
            assert_eq!(found.as_slice(), &head[..head.len().min(4)]);
            assert!(!found.is_empty());
            assert_ne!(found.as_slice(), &b"\x7fELF"[..found.len()]);
        }
        ElfError::Class { found } => {
            assert_eq!(head[4], *found);
            assert_ne!(*found, 2);
        }
        ElfError::Encoding { found } => {
            assert_eq!(head[5], *found);
            assert_ne!(*found, HOST_DATA);
        }
        ElfError::Version { found } => {
            assert_ne!(*found, 1);
            let ident = u32::from(head[6]) == *found;
            assert!(ident || m.u32(20) == Some(u128::from(*found)));
        }
        ElfError::NotShared { found } => {
            assert_eq!(m.u16(16), Some(u128::from(*found)));
            assert_ne!(*found, 3);
        }
        ElfError::Machine { found, expected } => {
            assert_eq!(Some(*expected), HOST_MACHINE);
            assert_eq!(m.u16(18), Some(u128::from(*found)));
            assert_ne!(found, expected);
        }
        ElfError::ProgramHeaderSize { found } => {
            assert_eq!(m.u16(54), Some(u128::from(*found)));
            assert_ne!(*found, 56);
        }
        ElfError::NoProgramHeaders => assert_eq!(m.phnum(), 0),
        ElfError::NoLoadSegment { count } => {
            assert_eq!(u128::from(*count), m.phnum());
            assert!((0..m.phnum()).all(|i| m.phdr(i).unwrap().0 != 1));
        }
        ElfError::Truncated { part, end, size } => {
            assert_eq!(*size, m.size);
            assert!(end > size);
            let (off, len) = m.part(*part);
            assert_eq!(off + len, u128::from(*end), "{part}");
        }
        ElfError::Overflow { part, offset, len } => {
            assert_eq!(m.part(*part), (u128::from(*offset), u128::from(*len)));
            assert!(u128::from(*offset) + u128::from(*len) > u128::from(u64::MAX));
        }
        ElfError::Incomplete { part, end, have } => {
            assert!(*end <= m.size, "inside the file");
            assert!(have < end);
            match part {
                Part::Header => {
                    assert_eq!(*end, HEADER_LEN as u64);
                    assert_eq!(*have, head.len() as u64);
                }
                Part::ProgramHeaders => {
                    assert_eq!(u128::from(*end), m.table_end());
                    assert!(u128::from(*have) < m.table_end());
                }
                other => panic!("incomplete {other}: only the header and table are read"),
            }
        }
        other => panic!("the pure check said {other:?}"),
    }
}

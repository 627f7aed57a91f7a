//! A check of a library file's ELF header and program headers, run before `dlopen`.
//!
//! `dlopen` maps each loadable segment of a file straight from the file: a segment that claims
//! bytes past the end of a short file (an interrupted download, a copy cut by a full disk) is
//! mapped all the same, and the first touch of its missing pages raises `SIGBUS` inside the
//! dynamic loader, killing the process instead of returning an error. This check reads only
//! the 64-byte ELF header and the program header table (bounded reads, never a map, never the
//! whole file) and refuses, with a typed [`ElfError`], a file whose header or segments do not
//! fit in it, or that this process could not load anyway: not ELF, not 64-bit, the other byte
//! order, not a shared object, another machine.
//!
//! The check itself is pure, over the bytes read and the file's size ([`check`], or
//! [`Elf::parse`] then [`Elf::check_layout`]), so it runs on any input in tests and under the
//! fuzzer; [`check_file`] is the thin part that reads a file. A file can still change between
//! the check and `dlopen`: the check catches files that are already short, not a race.
//! [`check_file`] reads only a regular file, classified before it opens anything (see
//! [`crate::file`]): opening a FIFO would wait for a writer.
//!
//! Program headers are numbered from 0 in the order of the table, the numbers `readelf -l`
//! prints in its "Section to Segment mapping", so `program header 3 (LOAD)` is the fourth row
//! of its "Program Headers" list.

use crate::file::{self, FileKind};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Size of the ELF header of a 64-bit file (`Elf64_Ehdr`), the first bytes the check reads.
pub const HEADER_LEN: usize = 64;

/// Size of one program header of a 64-bit file (`Elf64_Phdr`), the only `e_phentsize` the
/// dynamic loader accepts.
pub const PROGRAM_HEADER_LEN: u16 = 56;

/// `ELFCLASS64`: the only class a 64-bit process can load.
const CLASS_64: u8 = 2;
/// `ELFDATA2LSB` / `ELFDATA2MSB`.
const DATA_LSB: u8 = 1;
const DATA_MSB: u8 = 2;
/// `EV_CURRENT`, the only ELF version there is.
const EV_CURRENT: u32 = 1;
/// `ET_DYN`: a shared object (or a position-independent executable).
const ET_DYN: u16 = 3;
/// `PT_LOAD` and `PT_DYNAMIC`: the segments `dlopen` maps or reads through the map.
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;

/// The byte order of this machine, as an `EI_DATA` value.
pub const HOST_DATA: u8 = if cfg!(target_endian = "little") {
    DATA_LSB
} else {
    DATA_MSB
};

/// The `e_machine` of this build's target: x86_64 (62), aarch64 (183), powerpc64 (21), the
/// architectures NCCL is built for. `None` on any other architecture: there the machine is
/// not checked by this module (the dynamic loader still refuses a foreign library, with its
/// own message).
pub const HOST_MACHINE: Option<u16> = if cfg!(target_arch = "x86_64") {
    Some(62)
} else if cfg!(target_arch = "aarch64") {
    Some(183)
} else if cfg!(target_arch = "powerpc64") {
    Some(21)
} else {
    None
};

/// A part of the file the check locates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The ELF header (the file's first [`HEADER_LEN`] bytes).
    Header,
    /// The program header table (`e_phoff`, `e_phnum` entries).
    ProgramHeaders,
    /// The file contents of one segment (`p_offset`, `p_filesz`).
    Segment {
        /// Its program header's place in the table, from 0 (as `readelf -l` numbers them).
        index: u16,
        /// Its `p_type` (`PT_LOAD` is 1, `PT_DYNAMIC` 2).
        kind: u32,
    },
    /// The section header table (`e_shoff`, `e_shnum` entries): not used by `dlopen`, but it
    /// is the end of a linked library, so a cut download loses it first.
    SectionHeaders,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Header => f.write_str("the ELF header"),
            Part::ProgramHeaders => f.write_str("the program header table"),
            Part::Segment { index, kind } => {
                write!(f, "program header {index} ({})", SegmentName(*kind))
            }
            Part::SectionHeaders => f.write_str("the section header table"),
        }
    }
}

/// `readelf`'s name of a segment type.
struct SegmentName(u32);

impl fmt::Display for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            PT_LOAD => f.write_str("LOAD"),
            PT_DYNAMIC => f.write_str("DYNAMIC"),
            other => write!(f, "type {other:#x}"),
        }
    }
}

/// What is wrong with a file, found before `dlopen`. Each names the field or part at fault,
/// what it holds and what was expected; numbers are bytes from the start of the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ElfError {
    /// Not a regular file (a directory, a device, a FIFO, a socket): nothing `dlopen` can map,
    /// and a FIFO would block whoever opens it.
    #[error("{}", file::NotRegular(*.kind))]
    NotAFile {
        /// What it is.
        kind: FileKind,
    },
    /// Reading the file failed.
    #[error("cannot read {part}: {reason}")]
    Unreadable {
        /// What was being read.
        part: Part,
        /// The operating system's message.
        reason: String,
    },
    /// The file does not start with the ELF magic `7f 45 4c 46`.
    #[error("not an ELF file: it starts with {}, an ELF file with 7f 45 4c 46", Hex(.found))]
    NotElf {
        /// Its first bytes (up to four).
        found: Vec<u8>,
    },
    /// Not a 64-bit ELF file (`EI_CLASS`).
    #[error("ELF class {found} ({}), but this process loads only 64-bit libraries (ELFCLASS64)", class_name(*.found))]
    Class {
        /// The `EI_CLASS` byte.
        found: u8,
    },
    /// The other byte order than this machine's (`EI_DATA`).
    #[error("data encoding {found} ({}), but this machine is {}", data_name(*.found), data_name(HOST_DATA))]
    Encoding {
        /// The `EI_DATA` byte.
        found: u8,
    },
    /// An ELF version other than 1 (`EI_VERSION` or `e_version`).
    #[error("ELF version {found}, expected 1 (EV_CURRENT)")]
    Version {
        /// The version found.
        found: u32,
    },
    /// Not a shared object (`e_type` other than `ET_DYN`).
    #[error("ELF type {found} ({}), not a shared object (ET_DYN)", type_name(*.found))]
    NotShared {
        /// The `e_type` field.
        found: u16,
    },
    /// Built for another machine (`e_machine`).
    #[error("built for machine {found} ({}), but this process runs on {expected} ({})", machine_name(*.found), machine_name(*.expected))]
    Machine {
        /// The `e_machine` field.
        found: u16,
        /// This build's machine ([`HOST_MACHINE`]).
        expected: u16,
    },
    /// Program headers of a size other than [`PROGRAM_HEADER_LEN`] (`e_phentsize`).
    #[error("program header size (e_phentsize) {found}, expected {PROGRAM_HEADER_LEN}")]
    ProgramHeaderSize {
        /// The `e_phentsize` field.
        found: u16,
    },
    /// No program headers (`e_phnum` 0): nothing to load.
    #[error("no program headers (e_phnum is 0): nothing to load")]
    NoProgramHeaders,
    /// Program headers, but none of type `LOAD`: nothing to load.
    #[error("no LOAD program header among the {count}: nothing to load")]
    NoLoadSegment {
        /// How many program headers there are.
        count: u16,
    },
    /// A part of the file ends past the end of the file: the file was cut short (or the
    /// header that locates the part is corrupt).
    #[error("truncated: {part} ends at byte {end}, the file has {size}")]
    Truncated {
        /// The part.
        part: Part,
        /// Where it ends, from its offset and size in the headers.
        end: u64,
        /// The file's size.
        size: u64,
    },
    /// A part's offset plus its size does not fit in 64 bits (a corrupt header).
    #[error("{part}: offset {offset} + size {len} overflows 64 bits")]
    Overflow {
        /// The part.
        part: Part,
        /// Its offset.
        offset: u64,
        /// Its size.
        len: u64,
    },
    /// The bytes given to the check end before a part that the file's size says is there:
    /// for [`check`], a `head` too short; for [`check_file`], a file that shrank while read.
    #[error("{part} ends at byte {end}, past the {have} bytes read")]
    Incomplete {
        /// The part.
        part: Part,
        /// Where it ends.
        end: u64,
        /// Where the bytes available end.
        have: u64,
    },
}

impl ElfError {
    /// Whether glibc's dynamic loader, searching directories for a library name, passes over
    /// a file with this problem silently and tries the next directory (another class or
    /// another machine), rather than failing the `dlopen`.
    pub fn skipped_by_search(&self) -> bool {
        matches!(self, ElfError::Class { .. } | ElfError::Machine { .. })
    }
}

struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("nothing");
        }
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

fn class_name(c: u8) -> &'static str {
    match c {
        1 => "ELFCLASS32, 32-bit",
        2 => "ELFCLASS64, 64-bit",
        _ => "invalid",
    }
}

fn data_name(d: u8) -> &'static str {
    match d {
        DATA_LSB => "little-endian, ELFDATA2LSB",
        DATA_MSB => "big-endian, ELFDATA2MSB",
        _ => "invalid",
    }
}

fn type_name(t: u16) -> &'static str {
    match t {
        0 => "ET_NONE",
        1 => "ET_REL, an object file",
        2 => "ET_EXEC, an executable",
        3 => "ET_DYN",
        4 => "ET_CORE, a core dump",
        _ => "unknown",
    }
}

fn machine_name(m: u16) -> &'static str {
    match m {
        3 => "x86",
        8 => "MIPS",
        20 => "PowerPC",
        21 => "PowerPC64",
        22 => "s390",
        40 => "ARM",
        62 => "x86_64",
        183 => "AArch64",
        243 => "RISC-V",
        258 => "LoongArch",
        _ => "unknown",
    }
}

/// A header that passed [`Elf::parse`]: where the program header table is, and what
/// [`Elf::check_layout`] checks next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elf {
    size: u64,
    phoff: u64,
    phnum: u16,
    shoff: u64,
    shentsize: u16,
    shnum: u16,
}

/// `bytes[at..at + N]`, or `None` past its end.
fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    field(bytes, at).map_or(0, u16::from_ne_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    field(bytes, at).map_or(0, u32::from_ne_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    field(bytes, at).map_or(0, u64::from_ne_bytes)
}

/// Where `part` ends, `offset + len`, refused when it overflows or lies past the file's
/// `size`, or past the `have` bytes available to the check.
fn locate(part: Part, offset: u64, len: u64, size: u64, have: u64) -> Result<u64, ElfError> {
    let end = offset
        .checked_add(len)
        .ok_or(ElfError::Overflow { part, offset, len })?;
    if end > size {
        return Err(ElfError::Truncated { part, end, size });
    }
    if end > have {
        return Err(ElfError::Incomplete { part, end, have });
    }
    Ok(end)
}

impl Elf {
    /// Checks the ELF header: `header` holds the file's first bytes (at least
    /// [`HEADER_LEN`] of them when the file has that many), `size` is the file's size. Refuses
    /// anything a 64-bit process on this machine could not load, and a program header table
    /// that does not fit in the file.
    pub fn parse(header: &[u8], size: u64) -> Result<Elf, ElfError> {
        let have = header.len() as u64;
        // The magic first, on whatever bytes there are: a short file of other content is
        // "not ELF" rather than "truncated".
        let magic = b"\x7fELF";
        let start = &header[..header.len().min(4)];
        if start.is_empty() {
            let end = HEADER_LEN as u64;
            return Err(if end > size {
                ElfError::Truncated {
                    part: Part::Header,
                    end,
                    size,
                }
            } else {
                ElfError::Incomplete {
                    part: Part::Header,
                    end,
                    have,
                }
            });
        }
        if start != &magic[..start.len()] {
            return Err(ElfError::NotElf {
                found: start.to_vec(),
            });
        }
        // The identification bytes that are there, before the length: a 32-bit library is
        // shorter than a 64-bit header and is better told as 32-bit.
        if let Some(&class) = header.get(4) {
            if class != CLASS_64 {
                return Err(ElfError::Class { found: class });
            }
        }
        if let Some(&data) = header.get(5) {
            if data != HOST_DATA {
                return Err(ElfError::Encoding { found: data });
            }
        }
        if let Some(&version) = header.get(6) {
            if u32::from(version) != EV_CURRENT {
                return Err(ElfError::Version {
                    found: u32::from(version),
                });
            }
        }
        locate(Part::Header, 0, HEADER_LEN as u64, size, have)?;
        let e_type = u16_at(header, 16);
        if e_type != ET_DYN {
            return Err(ElfError::NotShared { found: e_type });
        }
        let machine = u16_at(header, 18);
        if let Some(expected) = HOST_MACHINE {
            if machine != expected {
                return Err(ElfError::Machine {
                    found: machine,
                    expected,
                });
            }
        }
        let version = u32_at(header, 20);
        if version != EV_CURRENT {
            return Err(ElfError::Version { found: version });
        }
        let phoff = u64_at(header, 32);
        let shoff = u64_at(header, 40);
        let phentsize = u16_at(header, 54);
        let phnum = u16_at(header, 56);
        let shentsize = u16_at(header, 58);
        let shnum = u16_at(header, 60);
        if phentsize != PROGRAM_HEADER_LEN {
            return Err(ElfError::ProgramHeaderSize { found: phentsize });
        }
        if phnum == 0 {
            return Err(ElfError::NoProgramHeaders);
        }
        let len = u64::from(phnum) * u64::from(PROGRAM_HEADER_LEN);
        // Only against the size: the table is read next, from wherever it is.
        locate(Part::ProgramHeaders, phoff, len, size, u64::MAX)?;
        Ok(Elf {
            size,
            phoff,
            phnum,
            shoff,
            shentsize,
            shnum,
        })
    }

    /// Where the program header table is: its offset in the file and its length in bytes
    /// (inside the file, as [`Elf::parse`] checked).
    pub fn program_headers(&self) -> (u64, usize) {
        (
            self.phoff,
            usize::from(self.phnum) * usize::from(PROGRAM_HEADER_LEN),
        )
    }

    /// The file's size the header was checked against.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Checks that every `LOAD` and `DYNAMIC` segment lies inside the file (the first that
    /// does not is reported, in table order), that there is a `LOAD` segment, and that the
    /// section header table, when the header locates one, lies inside the file. `table` is
    /// the program header table, as located by [`Elf::program_headers`].
    pub fn check_layout(&self, table: &[u8]) -> Result<(), ElfError> {
        let (phoff, want) = self.program_headers();
        if table.len() < want {
            return Err(ElfError::Incomplete {
                part: Part::ProgramHeaders,
                end: phoff.saturating_add(want as u64),
                have: phoff.saturating_add(table.len() as u64),
            });
        }
        let mut loads = 0u32;
        for index in 0..self.phnum {
            let at = usize::from(index) * usize::from(PROGRAM_HEADER_LEN);
            let kind = u32_at(table, at);
            if kind != PT_LOAD && kind != PT_DYNAMIC {
                continue;
            }
            loads += u32::from(kind == PT_LOAD);
            let offset = u64_at(table, at + 8);
            let filesz = u64_at(table, at + 32);
            locate(
                Part::Segment { index, kind },
                offset,
                filesz,
                self.size,
                u64::MAX,
            )?;
        }
        if loads == 0 {
            return Err(ElfError::NoLoadSegment { count: self.phnum });
        }
        if self.shoff != 0 {
            // `e_shnum` 0 with a table means more sections than 16 bits count: the real
            // number is in entry 0, which must be there at least.
            let count = if self.shnum == 0 { 1 } else { self.shnum };
            let len = u64::from(count) * u64::from(self.shentsize);
            locate(Part::SectionHeaders, self.shoff, len, self.size, u64::MAX)?;
        }
        Ok(())
    }
}

/// The whole check over bytes in memory: `head` holds the file from its first byte through
/// at least the end of its program header table (or all of a shorter file), `size` is the
/// file's size. Pure: the same answer for the same bytes, whatever lies past the table.
pub fn check(head: &[u8], size: u64) -> Result<(), ElfError> {
    let elf = Elf::parse(head, size)?;
    let (offset, len) = elf.program_headers();
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let table = head.get(start..).unwrap_or_default();
    let table = &table[..table.len().min(len)];
    elf.check_layout(table)
}

/// Checks the file at `path` (see the module's documentation): refuses anything but a regular
/// file before opening it ([`ElfError::NotAFile`]), opens it without blocking, reads its ELF
/// header and program header table (at most 64 + 65535 × 56 bytes), and runs [`Elf::parse`]
/// and [`Elf::check_layout`] against its size.
pub fn check_file(path: &Path) -> Result<(), ElfError> {
    let unreadable = |part| {
        move |e: io::Error| ElfError::Unreadable {
            part,
            reason: e.to_string(),
        }
    };
    let kind = file::kind(path).map_err(unreadable(Part::Header))?;
    if kind != FileKind::Regular {
        return Err(ElfError::NotAFile { kind });
    }
    let file = file::open_nonblocking(path).map_err(unreadable(Part::Header))?;
    // Again on what was opened: the path may have been replaced since it was classified.
    let meta = file.metadata().map_err(unreadable(Part::Header))?;
    let kind = FileKind::of(meta.file_type());
    if kind != FileKind::Regular {
        return Err(ElfError::NotAFile { kind });
    }
    let size = meta.len();
    let mut header = [0u8; HEADER_LEN];
    let n = read_at_most(&file, 0, &mut header).map_err(unreadable(Part::Header))?;
    let elf = Elf::parse(&header[..n], size)?;
    let (offset, len) = elf.program_headers();
    let mut table = vec![0u8; len];
    let n = read_at_most(&file, offset, &mut table).map_err(unreadable(Part::ProgramHeaders))?;
    elf.check_layout(&table[..n])
}

/// Reads from `offset` until `buf` is full or the file ends; how many bytes were read.
fn read_at_most(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let at = offset.saturating_add(done as u64);
        match file.read_at(&mut buf[done..], at) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests;

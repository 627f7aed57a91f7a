use super::*;

const LOAD: u32 = PT_LOAD;
const DYNAMIC: u32 = PT_DYNAMIC;
const NOTE: u32 = 4;

/// A 64-bit shared object for this machine: the header, then its program headers
/// `(type, offset, file size)` at byte 64, and a section header table of `shnum` entries at
/// `shoff`.
fn image(phdrs: &[(u32, u64, u64)], shoff: u64, shnum: u16) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_LEN];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = CLASS_64;
    h[5] = HOST_DATA;
    h[6] = 1;
    h[16..18].copy_from_slice(&ET_DYN.to_ne_bytes());
    h[18..20].copy_from_slice(&HOST_MACHINE.unwrap_or(62).to_ne_bytes());
    h[20..24].copy_from_slice(&1u32.to_ne_bytes());
    h[32..40].copy_from_slice(&64u64.to_ne_bytes());
    h[40..48].copy_from_slice(&shoff.to_ne_bytes());
    h[52..54].copy_from_slice(&64u16.to_ne_bytes());
    h[54..56].copy_from_slice(&PROGRAM_HEADER_LEN.to_ne_bytes());
    h[56..58].copy_from_slice(&(phdrs.len() as u16).to_ne_bytes());
    h[58..60].copy_from_slice(&64u16.to_ne_bytes());
    h[60..62].copy_from_slice(&shnum.to_ne_bytes());
    for &(kind, offset, filesz) in phdrs {
        let mut p = vec![0u8; usize::from(PROGRAM_HEADER_LEN)];
        p[..4].copy_from_slice(&kind.to_ne_bytes());
        p[8..16].copy_from_slice(&offset.to_ne_bytes());
        p[32..40].copy_from_slice(&filesz.to_ne_bytes());
        p[40..48].copy_from_slice(&filesz.to_ne_bytes());
        h.extend_from_slice(&p);
    }
    h
}

/// Like a real library: text, data, dynamic inside data, a note; sections at the end.
const SIZE: u64 = 10_000;
fn library() -> Vec<u8> {
    image(
        &[
            (LOAD, 0, 6000),
            (LOAD, 6000, 2000),
            (DYNAMIC, 7000, 500),
            (NOTE, 512, 36),
        ],
        SIZE - 640,
        10,
    )
}

fn set(mut bytes: Vec<u8>, at: usize, value: &[u8]) -> Vec<u8> {
    bytes[at..at + value.len()].copy_from_slice(value);
    bytes
}

/// Byte `at` of program header `i` of an `image`.
fn ph(i: usize, at: usize) -> usize {
    HEADER_LEN + i * usize::from(PROGRAM_HEADER_LEN) + at
}

#[test]
fn a_whole_library_passes() {
    assert_eq!(check(&library(), SIZE), Ok(()));
    // Bytes past the table change nothing: only the header region is read.
    let mut longer = library();
    longer.extend_from_slice(&[0xAB; 4096]);
    assert_eq!(check(&longer, SIZE), Ok(()));
}

#[test]
fn bad_magic_is_not_elf() {
    let e = check(&set(library(), 0, b"MZ\x90\x00"), SIZE).unwrap_err();
    assert_eq!(
        e,
        ElfError::NotElf {
            found: b"MZ\x90\x00".to_vec()
        }
    );
    assert_eq!(
        e.to_string(),
        "not an ELF file: it starts with 4d 5a 90 00, an ELF file with 7f 45 4c 46"
    );
    // A short text file is not ELF either, rather than a truncated one.
    assert_eq!(
        check(b"hi\n", 3),
        Err(ElfError::NotElf {
            found: b"hi\n".to_vec()
        })
    );
}

#[test]
fn an_empty_or_short_file_is_truncated_at_the_header() {
    let e = check(b"", 0).unwrap_err();
    assert_eq!(
        e,
        ElfError::Truncated {
            part: Part::Header,
            end: 64,
            size: 0
        }
    );
    assert_eq!(
        e.to_string(),
        "truncated: the ELF header ends at byte 64, the file has 0"
    );
    assert_eq!(
        check(&library()[..40], 40),
        Err(ElfError::Truncated {
            part: Part::Header,
            end: 64,
            size: 40
        })
    );
    // The magic alone, cut inside it.
    assert_eq!(
        check(b"\x7fE", 2),
        Err(ElfError::Truncated {
            part: Part::Header,
            end: 64,
            size: 2
        })
    );
}

#[test]
fn a_32_bit_library_is_refused_by_class() {
    let e = check(&set(library(), 4, &[1]), SIZE).unwrap_err();
    assert_eq!(e, ElfError::Class { found: 1 });
    assert!(e.skipped_by_search());
    assert_eq!(
        e.to_string(),
        "ELF class 1 (ELFCLASS32, 32-bit), but this process loads only 64-bit libraries (ELFCLASS64)"
    );
    // A whole 32-bit header is shorter than a 64-bit one: still told by its class.
    assert_eq!(
        check(&set(library(), 4, &[1])[..52], 52),
        Err(ElfError::Class { found: 1 })
    );
    assert_eq!(
        check(&set(library(), 4, &[7]), SIZE),
        Err(ElfError::Class { found: 7 })
    );
}

#[test]
fn the_other_byte_order_is_refused() {
    let other = 3 - HOST_DATA;
    let e = check(&set(library(), 5, &[other]), SIZE).unwrap_err();
    assert_eq!(e, ElfError::Encoding { found: other });
    assert!(!e.skipped_by_search());
    if cfg!(target_endian = "little") {
        assert_eq!(
            e.to_string(),
            "data encoding 2 (big-endian, ELFDATA2MSB), but this machine is little-endian, ELFDATA2LSB"
        );
    }
}

#[test]
fn another_elf_version_is_refused() {
    assert_eq!(
        check(&set(library(), 6, &[0]), SIZE),
        Err(ElfError::Version { found: 0 })
    );
    assert_eq!(
        check(&set(library(), 20, &2u32.to_ne_bytes()), SIZE),
        Err(ElfError::Version { found: 2 })
    );
}

#[test]
fn another_machine_is_refused() {
    let Some(host) = HOST_MACHINE else {
        return;
    };
    let other: u16 = if host == 3 { 62 } else { 3 };
    let e = check(&set(library(), 18, &other.to_ne_bytes()), SIZE).unwrap_err();
    assert_eq!(
        e,
        ElfError::Machine {
            found: other,
            expected: host
        }
    );
    assert!(e.skipped_by_search());
    if cfg!(target_arch = "x86_64") {
        assert_eq!(
            e.to_string(),
            "built for machine 3 (x86), but this process runs on 62 (x86_64)"
        );
    }
}

#[test]
fn an_executable_or_object_is_not_a_shared_object() {
    let e = check(&set(library(), 16, &2u16.to_ne_bytes()), SIZE).unwrap_err();
    assert_eq!(e, ElfError::NotShared { found: 2 });
    assert_eq!(
        e.to_string(),
        "ELF type 2 (ET_EXEC, an executable), not a shared object (ET_DYN)"
    );
    assert_eq!(
        check(&set(library(), 16, &1u16.to_ne_bytes()), SIZE),
        Err(ElfError::NotShared { found: 1 })
    );
}

#[test]
fn program_header_size_and_count_are_checked() {
    assert_eq!(
        check(&set(library(), 54, &32u16.to_ne_bytes()), SIZE),
        Err(ElfError::ProgramHeaderSize { found: 32 })
    );
    assert_eq!(
        check(&set(library(), 56, &0u16.to_ne_bytes()), SIZE),
        Err(ElfError::NoProgramHeaders)
    );
    let e = check(&image(&[(DYNAMIC, 0, 10), (NOTE, 0, 10)], 0, 0), SIZE).unwrap_err();
    assert_eq!(e, ElfError::NoLoadSegment { count: 2 });
    assert_eq!(
        e.to_string(),
        "no LOAD program header among the 2: nothing to load"
    );
}

#[test]
fn a_program_header_table_past_the_end_is_truncated() {
    // 4 headers of 56 bytes from byte 64: the table ends at 288.
    let e = check(&library()[..200], 200).unwrap_err();
    assert_eq!(
        e,
        ElfError::Truncated {
            part: Part::ProgramHeaders,
            end: 288,
            size: 200
        }
    );
    assert_eq!(
        e.to_string(),
        "truncated: the program header table ends at byte 288, the file has 200"
    );
    // The offset itself past the end.
    assert_eq!(
        check(&set(library(), 32, &20_000u64.to_ne_bytes()), SIZE),
        Err(ElfError::Truncated {
            part: Part::ProgramHeaders,
            end: 20_224,
            size: SIZE
        })
    );
    // An offset whose end overflows.
    let off = u64::MAX - 100;
    let e = check(&set(library(), 32, &off.to_ne_bytes()), SIZE).unwrap_err();
    assert_eq!(
        e,
        ElfError::Overflow {
            part: Part::ProgramHeaders,
            offset: off,
            len: 224
        }
    );
    assert_eq!(
        e.to_string(),
        format!("the program header table: offset {off} + size 224 overflows 64 bits")
    );
}

#[test]
fn a_segment_past_the_end_is_truncated_and_named_by_its_index() {
    // Cut inside the first LOAD: it is the first reported, as program header 0.
    let e = check(&library(), 4096).unwrap_err();
    assert_eq!(
        e,
        ElfError::Truncated {
            part: Part::Segment {
                index: 0,
                kind: LOAD
            },
            end: 6000,
            size: 4096
        }
    );
    assert_eq!(
        e.to_string(),
        "truncated: program header 0 (LOAD) ends at byte 6000, the file has 4096"
    );
    // Cut inside the second.
    let e = check(&library(), 7999).unwrap_err();
    assert_eq!(
        e.to_string(),
        "truncated: program header 1 (LOAD) ends at byte 8000, the file has 7999"
    );
    // A DYNAMIC segment pointing past the end.
    let e = check(&set(library(), ph(2, 8), &9_800u64.to_ne_bytes()), SIZE).unwrap_err();
    assert_eq!(
        e,
        ElfError::Truncated {
            part: Part::Segment {
                index: 2,
                kind: DYNAMIC
            },
            end: 10_300,
            size: SIZE
        }
    );
    assert_eq!(
        e.to_string(),
        "truncated: program header 2 (DYNAMIC) ends at byte 10300, the file has 10000"
    );
    // Other segments are not checked: the loader does not map them from the file.
    assert_eq!(
        check(&set(library(), ph(3, 8), &u64::MAX.to_ne_bytes()), SIZE),
        Ok(())
    );
}

#[test]
fn a_segment_whose_end_overflows_is_refused() {
    let big = u64::MAX - 5;
    let e = check(&set(library(), ph(1, 32), &big.to_ne_bytes()), SIZE).unwrap_err();
    assert_eq!(
        e,
        ElfError::Overflow {
            part: Part::Segment {
                index: 1,
                kind: LOAD
            },
            offset: 6000,
            len: big
        }
    );
    assert_eq!(
        e.to_string(),
        format!("program header 1 (LOAD): offset 6000 + size {big} overflows 64 bits")
    );
    let e = check(&set(library(), ph(0, 8), &u64::MAX.to_ne_bytes()), SIZE).unwrap_err();
    assert!(matches!(
        e,
        ElfError::Overflow {
            part: Part::Segment { index: 0, .. },
            ..
        }
    ));
}

#[test]
fn a_section_header_table_past_the_end_is_truncated() {
    // Segments intact, the last byte missing: the section header table is cut.
    let e = check(&library(), SIZE - 1).unwrap_err();
    assert_eq!(
        e,
        ElfError::Truncated {
            part: Part::SectionHeaders,
            end: SIZE,
            size: SIZE - 1
        }
    );
    assert_eq!(
        e.to_string(),
        "truncated: the section header table ends at byte 10000, the file has 9999"
    );
    // No table (e_shoff 0): nothing to check.
    assert_eq!(
        check(&set(library(), 40, &0u64.to_ne_bytes()), 8000),
        Ok(())
    );
    // e_shnum 0 with a table: its first entry must be there.
    let no_count = set(library(), 60, &0u16.to_ne_bytes());
    assert_eq!(
        check(&no_count, SIZE - 640 + 63),
        Err(ElfError::Truncated {
            part: Part::SectionHeaders,
            end: SIZE - 640 + 64,
            size: SIZE - 640 + 63
        })
    );
    let overflow = set(library(), 40, &(u64::MAX - 1).to_ne_bytes());
    assert!(matches!(
        check(&overflow, SIZE),
        Err(ElfError::Overflow {
            part: Part::SectionHeaders,
            ..
        })
    ));
}

#[test]
fn bytes_given_short_of_the_table_are_incomplete_not_truncated() {
    let e = check(&library()[..100], SIZE).unwrap_err();
    assert_eq!(
        e,
        ElfError::Incomplete {
            part: Part::ProgramHeaders,
            end: 288,
            have: 100
        }
    );
    assert_eq!(
        check(&library()[..10], SIZE),
        Err(ElfError::Incomplete {
            part: Part::Header,
            end: 64,
            have: 10
        })
    );
    assert!(matches!(
        check(b"", SIZE),
        Err(ElfError::Incomplete {
            part: Part::Header,
            ..
        })
    ));
}

#[test]
fn the_two_steps_agree_with_the_whole_check() {
    let lib = library();
    let elf = Elf::parse(&lib[..HEADER_LEN], 4096).unwrap();
    assert_eq!(elf.size(), 4096);
    assert_eq!(elf.program_headers(), (64, 224));
    assert_eq!(elf.check_layout(&lib[64..288]), check(&lib, 4096));
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("oxccl-elf-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn check_file_reads_only_what_it_needs_and_names_io_failures() {
    let d = scratch("check_file");
    let path = d.join("lib.so");
    // The header region, then a sparse tail: the file's size is what counts.
    std::fs::write(&path, library()).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(SIZE).unwrap();
    assert_eq!(check_file(&path), Ok(()));
    f.set_len(4096).unwrap();
    assert_eq!(
        check_file(&path).unwrap_err().to_string(),
        "truncated: program header 0 (LOAD) ends at byte 6000, the file has 4096"
    );
    f.set_len(0).unwrap();
    assert_eq!(
        check_file(&path),
        Err(ElfError::Truncated {
            part: Part::Header,
            end: 64,
            size: 0
        })
    );
    assert_eq!(
        check_file(&d),
        Err(ElfError::NotAFile {
            kind: FileKind::Directory
        })
    );
    let e = check_file(&d.join("missing.so")).unwrap_err();
    assert!(
        matches!(&e, ElfError::Unreadable { part: Part::Header, reason } if reason.contains("No such file")),
        "{e:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

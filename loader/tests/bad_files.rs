//! Cut and corrupted copies of every cached NCCL release (scripts/fetch-nccl.sh): each is
//! refused before `dlopen` with `LoadError::BadElf` naming the file, the part at fault and
//! the numbers, through `Library::open`, `OXCCL_NCCL_LIBRARY` and a bare name found through
//! `LD_LIBRARY_PATH`, instead of the process dying of SIGBUS inside the dynamic loader.
//!
//! And files that are not regular files (a FIFO, a symlink to one, a directory, a character
//! device, a socket): each is refused promptly with `LoadError::NotAFile` naming the path and
//! its kind, through the same ways and the Python wheel folders of the search, instead of the
//! loader blocking forever in the open of a FIFO.

mod common;

use oxccl_loader::elf::{self, ElfError, Part};
use oxccl_loader::{FileKind, Library, LoadError, ENV_LIBRARY};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// Environment variables are process-wide: tests that set or load take this lock.
static ENV: Mutex<()> = Mutex::new(());

/// Bytes written over a copy: (offset, bytes).
type Patch = (u64, Vec<u8>);

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;

/// How much of a release a copy holds for real; past it, a copy is a hole of the right size.
/// The check reads only the header and program header table (under 1 KiB in every release),
/// so a hole stands in for the rest, and no copy of 300 MB is written per case.
const REAL_PREFIX: u64 = 1 << 20;

/// The fields of a real release the expectations are computed from, read here with plain
/// offsets (not with the code under test).
struct Layout {
    size: u64,
    phoff: u64,
    phnum: u16,
    /// `(p_type, p_offset, p_filesz)` of each program header.
    phdrs: Vec<(u32, u64, u64)>,
    shoff: u64,
    shend: u64,
}

fn layout(lib: &Path) -> Layout {
    let mut head = vec![0u8; 4096];
    File::open(lib).unwrap().read_exact(&mut head).unwrap();
    let u16_at = |at: usize| u16::from_le_bytes(head[at..at + 2].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap());
    let phoff = u64_at(32);
    let phnum = u16_at(56);
    let phdrs = (0..usize::from(phnum))
        .map(|i| {
            let at = phoff as usize + i * 56;
            (u32_at(at), u64_at(at + 8), u64_at(at + 32))
        })
        .collect();
    let shoff = u64_at(40);
    Layout {
        size: std::fs::metadata(lib).unwrap().len(),
        phoff,
        phnum,
        phdrs,
        shoff,
        shend: shoff + u64::from(u16_at(60)) * u64::from(u16_at(58)),
    }
}

impl Layout {
    /// What the check must say of the release cut to `len` bytes: the first part, in the
    /// order header, program header table, LOAD/DYNAMIC segments, section header table, that
    /// ends past `len`.
    fn expected_cut(&self, len: u64) -> ElfError {
        let truncated = |part, end| ElfError::Truncated {
            part,
            end,
            size: len,
        };
        if len < 64 {
            return truncated(Part::Header, 64);
        }
        let table_end = self.phoff + u64::from(self.phnum) * 56;
        if table_end > len {
            return truncated(Part::ProgramHeaders, table_end);
        }
        for (i, &(kind, offset, filesz)) in self.phdrs.iter().enumerate() {
            if (kind == PT_LOAD || kind == PT_DYNAMIC) && offset + filesz > len {
                let part = Part::Segment {
                    index: i as u16,
                    kind,
                };
                return truncated(part, offset + filesz);
            }
        }
        assert!(self.shend > len, "a cut at {len} leaves the file whole");
        truncated(Part::SectionHeaders, self.shend)
    }

    /// The end of program header `index`'s segment.
    fn segment_end(&self, index: usize) -> u64 {
        self.phdrs[index].1 + self.phdrs[index].2
    }

    /// The index of the `n`-th program header of type `kind`.
    fn nth(&self, kind: u32, n: usize) -> usize {
        self.phdrs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.0 == kind)
            .nth(n)
            .expect("a program header of that type")
            .0
    }
}

/// `dir/name`: the first `len` bytes of `src` (real bytes up to [`REAL_PREFIX`], a hole
/// after), with `patches` (offset, bytes) written over it.
fn cut_copy(src: &Path, dir: &Path, name: &str, len: u64, patches: &[Patch]) -> PathBuf {
    let dst = dir.join(name);
    let mut prefix = Vec::new();
    File::open(src)
        .unwrap()
        .take(len.min(REAL_PREFIX))
        .read_to_end(&mut prefix)
        .unwrap();
    for (at, bytes) in patches {
        let at = *at as usize;
        prefix[at..at + bytes.len()].copy_from_slice(bytes);
    }
    let mut f = File::create(&dst).unwrap();
    f.write_all(&prefix).unwrap();
    f.set_len(len).unwrap();
    dst
}

/// The cut points of a release: inside the header, just past it, inside the first page, at
/// 300 KiB, half, one byte short of the second LOAD segment, one byte short of the whole.
fn cuts(l: &Layout) -> Vec<u64> {
    vec![
        0,
        3,
        40,
        64,
        4096,
        300 * 1024,
        l.size / 2,
        l.segment_end(l.nth(PT_LOAD, 1)) - 1,
        l.size - 1,
    ]
}

/// `Library::open` refuses `path` with exactly `problem`, and the text says it.
fn assert_refused(path: &Path, problem: &ElfError) {
    let e = Library::open(path).unwrap_err();
    assert_eq!(
        e,
        LoadError::BadElf {
            path: path.to_path_buf(),
            problem: problem.clone()
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "{}: not a loadable shared library: {problem}",
            path.display()
        )
    );
}

#[test]
fn every_release_cut_anywhere_is_refused_with_the_part_and_the_numbers() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::scratch("cut");
    for r in common::releases_or_fail() {
        let l = layout(&r.lib);
        for len in cuts(&l) {
            let copy = cut_copy(&r.lib, &dir, &format!("{}-{len}.so", r.version), len, &[]);
            let want = l.expected_cut(len);
            // The check alone first: should it pass, dlopen of a hole would not return.
            assert_eq!(
                elf::check_file(&copy),
                Err(want.clone()),
                "{} at {len}",
                r.version
            );
            assert_refused(&copy, &want);
            std::fs::remove_file(&copy).unwrap();
        }
        println!("{}: every cut refused", r.version);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_texts_of_a_cut_release_name_the_file_and_the_numbers() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::scratch("texts");
    let Some(r) = common::releases_or_fail().pop() else {
        return;
    };
    let l = layout(&r.lib);
    let copy = cut_copy(&r.lib, &dir, "libnccl.so.2", 4096, &[]);
    let e = Library::open(&copy).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: not a loadable shared library: truncated: program header 0 (LOAD) ends at byte {}, the file has 4096",
            copy.display(),
            l.segment_end(0)
        )
    );
    println!("{e}");
    let copy = cut_copy(&r.lib, &dir, "libnccl.so.2", l.size - 1, &[]);
    let e = Library::open(&copy).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: not a loadable shared library: truncated: the section header table ends at byte {}, the file has {}",
            copy.display(),
            l.shend,
            l.size - 1
        )
    );
    println!("{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_release_with_a_corrupted_header_is_refused_by_the_field_at_fault() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::scratch("corrupt");
    let host = elf::HOST_MACHINE.unwrap_or(62);
    let other_machine: u16 = if host == 62 { 183 } else { 62 };
    for r in common::releases_or_fail() {
        let l = layout(&r.lib);
        let ph = |i: usize, at: u64| l.phoff + i as u64 * 56 + at;
        let load1 = l.nth(PT_LOAD, 1);
        let dynamic = l.nth(PT_DYNAMIC, 0);
        let le64 = |v: u64| v.to_le_bytes().to_vec();
        let le16 = |v: u16| v.to_le_bytes().to_vec();
        let cases: Vec<(&str, Patch, ElfError)> = vec![
            (
                "magic",
                (0, vec![0]),
                ElfError::NotElf {
                    found: b"\0ELF".to_vec(),
                },
            ),
            ("class", (4, vec![1]), ElfError::Class { found: 1 }),
            ("data", (5, vec![2]), ElfError::Encoding { found: 2 }),
            ("version", (6, vec![0]), ElfError::Version { found: 0 }),
            ("type", (16, le16(2)), ElfError::NotShared { found: 2 }),
            (
                "machine",
                (18, le16(other_machine)),
                ElfError::Machine {
                    found: other_machine,
                    expected: host,
                },
            ),
            (
                "phentsize",
                (54, le16(64)),
                ElfError::ProgramHeaderSize { found: 64 },
            ),
            ("phnum", (56, le16(0)), ElfError::NoProgramHeaders),
            (
                "phoff",
                (32, le64(l.size)),
                ElfError::Truncated {
                    part: Part::ProgramHeaders,
                    end: l.size + u64::from(l.phnum) * 56,
                    size: l.size,
                },
            ),
            (
                "load_filesz",
                (ph(load1, 32), le64(l.size)),
                ElfError::Truncated {
                    part: Part::Segment {
                        index: load1 as u16,
                        kind: PT_LOAD,
                    },
                    end: l.phdrs[load1].1 + l.size,
                    size: l.size,
                },
            ),
            (
                "dynamic_offset",
                (ph(dynamic, 8), le64(u64::MAX)),
                ElfError::Overflow {
                    part: Part::Segment {
                        index: dynamic as u16,
                        kind: PT_DYNAMIC,
                    },
                    offset: u64::MAX,
                    len: l.phdrs[dynamic].2,
                },
            ),
            (
                "shoff",
                (40, le64(l.size)),
                ElfError::Truncated {
                    part: Part::SectionHeaders,
                    end: l.size + (l.shend - l.shoff),
                    size: l.size,
                },
            ),
        ];
        for (name, patch, want) in cases {
            let copy = cut_copy(
                &r.lib,
                &dir,
                &format!("{}-{name}.so", r.version),
                l.size,
                &[patch],
            );
            assert_eq!(
                elf::check_file(&copy),
                Err(want.clone()),
                "{} {name}",
                r.version
            );
            assert_refused(&copy, &want);
            std::fs::remove_file(&copy).unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cut_release_through_the_environment_variable_is_refused() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::scratch("env");
    let Some(r) = common::releases_or_fail().pop() else {
        return;
    };
    let l = layout(&r.lib);
    let copy = cut_copy(&r.lib, &dir, "libnccl.so.2", 300 * 1024, &[]);
    std::env::set_var(ENV_LIBRARY, &copy);
    let e = Library::load();
    std::env::remove_var(ENV_LIBRARY);
    assert_eq!(
        e.unwrap_err(),
        LoadError::BadElf {
            path: copy,
            problem: l.expected_cut(300 * 1024)
        }
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cut_release_found_by_name_in_ld_library_path_is_refused() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let root = common::scratch("by-name");
    let Some(r) = common::releases_or_fail().pop() else {
        return;
    };
    let l = layout(&r.lib);
    // First folder: a 32-bit file of the name, which the loader's search passes over; then a
    // folder without it; then the cut copy, the file the search would map.
    let (first, empty, cut) = (root.join("a"), root.join("b"), root.join("c"));
    for d in [&first, &empty, &cut] {
        std::fs::create_dir_all(d).unwrap();
    }
    cut_copy(&r.lib, &first, "libnccl.so.2", 4096, &[(4, vec![1])]);
    let copy = cut_copy(&r.lib, &cut, "libnccl.so.2", 4096, &[]);
    let saved = std::env::var_os("LD_LIBRARY_PATH");
    let joined = std::env::join_paths([&first, &empty, &cut]).unwrap();
    std::env::set_var("LD_LIBRARY_PATH", &joined);
    let by_name = Library::open("libnccl.so.2");
    // Discovery tries the name first and lists why it failed.
    std::env::remove_var(ENV_LIBRARY);
    let discovered = Library::load();
    match saved {
        Some(v) => std::env::set_var("LD_LIBRARY_PATH", v),
        None => std::env::remove_var("LD_LIBRARY_PATH"),
    }
    let want = LoadError::BadElf {
        path: copy.clone(),
        problem: l.expected_cut(4096),
    };
    assert_eq!(by_name.unwrap_err(), want);
    match discovered {
        // A Python environment on this machine may hold a good one, found after the name.
        Ok(lib) => println!("discovery went on to {}", lib.path().display()),
        Err(LoadError::NothingFound { tried }) => {
            let t = tried
                .iter()
                .find(|t| t.place == "libnccl.so.2 (system search)")
                .expect("the name was tried");
            assert_eq!(
                t.reason,
                format!("not loadable: {}: {}", copy.display(), l.expected_cut(4096))
            );
        }
        Err(e) => panic!("{e}"),
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// How long a refusal of a special file may take: it needs no more than a `stat`, so only a
/// blocked open runs into this.
const PROMPTLY: Duration = Duration::from_secs(10);

/// `f()` run on a thread, or an error when it panicked or gave no answer within [`PROMPTLY`]
/// (a load blocked on a FIFO): the test fails instead of hanging. A thread left blocked ends
/// with the test process.
fn promptly<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(PROMPTLY).map_err(|e| match e {
        mpsc::RecvTimeoutError::Timeout => format!("no answer within {PROMPTLY:?}: blocked"),
        mpsc::RecvTimeoutError::Disconnected => "the load panicked".to_owned(),
    })
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// `LoadError::NotAFile` for `path` of `kind`, and its text.
fn assert_not_a_file(e: &LoadError, path: &Path, kind: FileKind) {
    assert_eq!(
        *e,
        LoadError::NotAFile {
            path: path.to_path_buf(),
            kind
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "{}: {kind}, not a regular file; a shared library file was expected",
            path.display()
        )
    );
}

#[test]
fn special_files_are_refused_promptly_by_what_they_are() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::scratch("special");
    let fifo = dir.join("fifo.so");
    mkfifo(&fifo);
    let link = dir.join("link-to-fifo.so");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    let folder = dir.join("folder.so");
    std::fs::create_dir(&folder).unwrap();
    let socket = dir.join("socket.so");
    let _listener = UnixListener::bind(&socket).unwrap();
    let cases = [
        (fifo.clone(), FileKind::Fifo),
        (link, FileKind::Fifo),
        (folder, FileKind::Directory),
        (PathBuf::from("/dev/null"), FileKind::CharDevice),
        (socket, FileKind::Socket),
    ];
    for (path, kind) in cases {
        let p = path.clone();
        let checked = promptly(move || elf::check_file(&p));
        assert_eq!(
            checked,
            Ok(Err(ElfError::NotAFile { kind })),
            "{}",
            path.display()
        );
        let p = path.clone();
        let e = promptly(move || Library::open(&p).map(|_| ()))
            .unwrap_or_else(|why| panic!("{}: {why}", path.display()))
            .expect_err("refused");
        assert_not_a_file(&e, &path, kind);
        println!("{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fifo_named_by_the_environment_variable_is_refused_promptly() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::scratch("env-fifo");
    let fifo = dir.join("libnccl.so.2");
    mkfifo(&fifo);
    std::env::set_var(ENV_LIBRARY, &fifo);
    let loaded = promptly(|| Library::load().map(|_| ()));
    std::env::remove_var(ENV_LIBRARY);
    let e = loaded.unwrap().expect_err("refused");
    assert_not_a_file(&e, &fifo, FileKind::Fifo);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fifo_found_by_name_in_ld_library_path_is_refused_promptly() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::scratch("by-name-fifo");
    let fifo = dir.join("libnccl.so.2");
    mkfifo(&fifo);
    let saved = std::env::var_os("LD_LIBRARY_PATH");
    std::env::set_var("LD_LIBRARY_PATH", &dir);
    std::env::remove_var(ENV_LIBRARY);
    // dlopen's own search would open the FIFO and block: the loader refuses it first.
    let by_name = promptly(|| Library::open("libnccl.so.2").map(|_| ()));
    let discovered = promptly(|| Library::load().map(|l| l.path().to_path_buf()));
    match saved {
        Some(v) => std::env::set_var("LD_LIBRARY_PATH", v),
        None => std::env::remove_var("LD_LIBRARY_PATH"),
    }
    let e = by_name.unwrap().expect_err("refused");
    assert_not_a_file(&e, &fifo, FileKind::Fifo);
    match discovered.unwrap() {
        // A Python environment on this machine may hold a good one, found after the name.
        Ok(path) => println!("discovery went on to {}", path.display()),
        Err(LoadError::NothingFound { tried }) => {
            let t = tried
                .iter()
                .find(|t| t.place == "libnccl.so.2 (system search)")
                .expect("the name was tried");
            assert_eq!(
                t.reason,
                format!(
                    "not loadable: {}: a FIFO (named pipe), not a regular file; a shared library file was expected",
                    fifo.display()
                )
            );
        }
        Err(e) => panic!("{e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fifo_in_a_python_wheel_folder_is_passed_over_promptly() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    let venv = common::scratch("venv-fifo");
    let lib = venv.join("lib/python3.12/site-packages/nvidia/nccl/lib");
    std::fs::create_dir_all(&lib).unwrap();
    let fifo = lib.join("libnccl.so.2");
    mkfifo(&fifo);
    let saved = std::env::var_os("VIRTUAL_ENV");
    std::env::set_var("VIRTUAL_ENV", &venv);
    std::env::remove_var(ENV_LIBRARY);
    let discovered = promptly(|| Library::load().map(|l| l.path().to_path_buf()));
    match saved {
        Some(v) => std::env::set_var("VIRTUAL_ENV", v),
        None => std::env::remove_var("VIRTUAL_ENV"),
    }
    match discovered.unwrap() {
        // The system search, tried before the wheel folders, found one on this machine.
        Ok(path) => println!("skipped: the search found {} first", path.display()),
        Err(LoadError::NothingFound { tried }) => {
            let t = tried
                .iter()
                .find(|t| Path::new(&t.place) == fifo)
                .unwrap_or_else(|| panic!("the wheel folder was tried: {tried:#?}"));
            assert_eq!(
                t.reason,
                format!(
                    "not loadable: {}: a FIFO (named pipe), not a regular file; a shared library file was expected",
                    fifo.display()
                )
            );
        }
        Err(e) => panic!("{e}"),
    }
    let _ = std::fs::remove_dir_all(&venv);
}

/// What `main` returning a load error prints (`Debug`): the message as `Display` shows it,
/// every place tried, then how to get a usable library, not the struct's fields.
#[test]
fn a_load_error_prints_its_message_and_the_fix_through_debug() {
    use oxccl_loader::Tried;
    let e = LoadError::NothingFound {
        tried: vec![
            Tried {
                place: "OXCCL_NCCL_LIBRARY".into(),
                reason: "unset".into(),
            },
            Tried {
                place: "libnccl.so.2 (system search)".into(),
                reason: "no such file".into(),
            },
        ],
    };
    let d = format!("{e:?}");
    assert!(d.starts_with(&e.to_string()), "{d}");
    assert!(
        d.contains("\n  - libnccl.so.2 (system search): no such file"),
        "{d}"
    );
    assert!(
        d.ends_with(&format!("\n  to fix: {}", oxccl_core::error::GET_NCCL)),
        "{d}"
    );
    assert!(!d.contains("NothingFound") && !d.contains("Tried {"), "{d}");
    let missing = LoadError::Missing {
        path: "/nope/libnccl.so.2".into(),
    };
    assert!(format!("{missing:?}").starts_with("/nope/libnccl.so.2: no such file\n  to fix: "));
}

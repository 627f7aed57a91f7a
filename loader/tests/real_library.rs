//! Every cached NCCL release (scripts/fetch-nccl.sh), loaded for real: version, full feature
//! set, unique ids, the failing init path with NCCL's texts, the config it gets; and each kind
//! of bad library with its own error.

mod common;

use oxccl_core::{CommConfig, ConfigField, Error, Feature, Progress, ResultCode, Version};
use oxccl_loader::{ConfigBuf, Library, LoadError, RawComm, ENV_LIBRARY};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Environment variables are process-wide: tests that set or read them take this lock.
static ENV: Mutex<()> = Mutex::new(());

/// Every feature each release of the matrix has, written out by hand from the headers.
fn expected_features(version: &str) -> Option<Vec<Feature>> {
    use Feature::*;
    let v213 = vec![Avg, Bfloat16, PreMulSum, LastError];
    let v214 = [v213.clone(), vec![NonBlocking, Finalize]].concat();
    let v218 = [v214.clone(), vec![Split]].concat();
    let v219 = [v218.clone(), vec![BufferRegistration, MemAlloc]].concat();
    let v223 = [v219.clone(), vec![GroupSimulate, ScalableInit]].concat();
    let v228 = [
        v223.clone(),
        vec![Float8, Shrink, WindowRegistration, AllToAll, GatherScatter],
    ]
    .concat();
    Some(match version {
        "2.13.4" => v213,
        "2.14.3" => v214,
        "2.18.3" => v218,
        "2.19.3" => v219,
        "2.23.4" => v223,
        "2.28.3" => v228,
        "2.32.3" => Feature::ALL.to_vec(),
        _ => return None,
    })
}

fn null() -> RawComm {
    RawComm::NULL
}

#[test]
fn every_release_loads_by_path_with_its_version_and_features() {
    for r in common::releases_or_fail() {
        let lib = Library::open(&r.lib).unwrap_or_else(|e| panic!("{}: {e}", r.version));
        assert_eq!(lib.version().to_string(), r.version);
        assert_eq!(lib.path(), r.lib.as_path());
        let want = expected_features(&r.version).unwrap_or_else(|| {
            panic!(
                "{}: add this release to expected_features in real_library.rs",
                r.version
            )
        });
        let have: Vec<Feature> = Feature::ALL
            .into_iter()
            .filter(|f| lib.features().has(*f))
            .collect();
        assert_eq!(have, want, "{}", r.version);
        // A missing feature has a reason that names a version or a symbol.
        for (f, res) in lib.features().iter() {
            if let Err(m) = res {
                assert!(!m.to_string().is_empty(), "{f}");
            }
        }
        println!("{}: loaded in {:?}", r.version, lib.load_time());
    }
}

#[test]
fn every_release_loads_through_the_environment_variable() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    for r in common::releases_or_fail() {
        std::env::set_var(ENV_LIBRARY, &r.lib);
        let lib = Library::load();
        std::env::remove_var(ENV_LIBRARY);
        let lib = lib.unwrap_or_else(|e| panic!("{}: {e}", r.version));
        assert_eq!(lib.version().to_string(), r.version);
    }
}

#[test]
fn a_broken_environment_variable_is_its_own_error_not_a_fallback() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var(ENV_LIBRARY, "/nonexistent/oxccl/libnccl.so.2");
    let e = Library::load().unwrap_err();
    std::env::remove_var(ENV_LIBRARY);
    assert!(
        matches!(&e, LoadError::Missing { path } if path.ends_with("oxccl/libnccl.so.2")),
        "{e}"
    );
}

#[test]
fn discovery_lists_every_place_it_tried() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    std::env::remove_var(ENV_LIBRARY);
    match Library::load() {
        // A machine with NCCL installed finds it; that is right too.
        Ok(lib) => println!(
            "discovery found {} at {}",
            lib.version(),
            lib.path().display()
        ),
        Err(LoadError::NothingFound { tried }) => {
            let places: Vec<&str> = tried.iter().map(|t| t.place.as_str()).collect();
            assert_eq!(places[0], ENV_LIBRARY);
            assert!(
                places.contains(&"libnccl.so.2 (system search)"),
                "{places:?}"
            );
            assert!(places.contains(&"libnccl.so (system search)"), "{places:?}");
            let msg = LoadError::NothingFound {
                tried: tried.clone(),
            }
            .to_string();
            assert!(msg.contains("libnccl.so.2 (system search): "), "{msg}");
            println!("{msg}");
        }
        Err(e) => panic!("unexpected {e}"),
    }
}

#[test]
fn unique_ids_are_made() {
    for r in common::releases_or_fail() {
        let lib = Library::open(&r.lib).unwrap();
        let f = lib.api().get_unique_id.expect("ncclGetUniqueId");
        let mut id = oxccl_core::UniqueId([0; 128]);
        // SAFETY: writes 128 bytes into `id`.
        let code = unsafe { f(&mut id) };
        lib.check(code, null())
            .unwrap_or_else(|e| panic!("{}: {e}", r.version));
        assert!(id.as_bytes().iter().any(|b| *b != 0), "{}", r.version);
    }
}

#[test]
fn init_without_a_gpu_fails_with_nccl_texts() {
    for r in common::releases_or_fail() {
        let lib = Library::open(&r.lib).unwrap();
        let api = lib.api();
        let mut id = oxccl_core::UniqueId([0; 128]);
        // SAFETY: writes 128 bytes into `id`.
        lib.check(unsafe { api.get_unique_id.unwrap()(&mut id) }, null())
            .unwrap();
        let mut comm: RawComm = null();
        // SAFETY: valid out-pointer; one rank of one; fails before touching a GPU here.
        let code = unsafe { api.comm_init_rank.unwrap()(&mut comm, 1, id, 0) };
        if code == 0 {
            println!(
                "{}: a GPU is present, init succeeded; destroying",
                r.version
            );
            // SAFETY: `comm` was just created.
            unsafe { api.comm_destroy.unwrap()(comm) };
            continue;
        }
        match lib.check(code, comm) {
            Err(Error::Backend {
                code: c,
                text,
                last,
            }) => {
                assert_eq!(c, ResultCode(code));
                assert!(!text.is_empty());
                if lib.features().has(Feature::LastError) {
                    assert!(!last.is_empty(), "{}: empty last error", r.version);
                }
                println!(
                    "{}: {}",
                    r.version,
                    Error::Backend {
                        code: c,
                        text,
                        last
                    }
                );
            }
            other => panic!("{}: {other:?}", r.version),
        }
    }
}

#[test]
fn config_buf_matches_the_header_layout() {
    for r in common::releases_or_fail() {
        let lib = Library::open(&r.lib).unwrap();
        let v = lib.version();
        let Some((size, offsets)) = common::c_layout(&r) else {
            assert!(!lib.features().has(Feature::NonBlocking));
            continue;
        };
        let mut cfg = CommConfig::new().blocking(false);
        if ConfigField::MaxCtas.since() <= v {
            cfg = cfg
                .set(ConfigField::MaxCtas, 7)
                .unwrap()
                .net_name("Socket")
                .unwrap();
        }
        let mut buf = ConfigBuf::new(&cfg, v).unwrap();
        assert_eq!(buf.size(), size, "{}", r.version);
        let ptr = buf.as_mut_ptr() as *const u8;
        let read_i32 = |name: &str| {
            let off = offsets.iter().find(|(n, _)| n == name).unwrap().1;
            // SAFETY: `off` is inside the 120-byte struct behind `ptr` (checked by the layout
            // test), aligned for i32; `buf` is alive.
            unsafe { std::ptr::read(ptr.add(off) as *const i32) }
        };
        assert_eq!(read_i32("magic") as u32, 0xcafe_beef);
        assert_eq!(read_i32("version"), v.code().unwrap());
        assert_eq!(read_i32("blocking"), 0);
        if ConfigField::MaxCtas.since() <= v {
            assert_eq!(read_i32("maxCTAs"), 7);
            assert_eq!(read_i32("minCTAs"), i32::MIN);
        }
        // A field newer than the release is refused by name.
        if let Some(newer) = ConfigField::ALL
            .into_iter()
            .find(|f| f.since() > v && !f.is_string())
        {
            let e = ConfigBuf::new(&CommConfig::new().set(newer, 1).unwrap(), v).unwrap_err();
            assert!(e.to_string().contains(newer.c_name()), "{e}");
        }
    }
}

#[test]
fn codes_map_to_errors_with_the_library_texts() {
    let Some(r) = common::releases_or_fail().pop() else {
        return;
    };
    let lib = Library::open(&r.lib).unwrap();
    assert_eq!(lib.check(0, null()), Ok(()));
    assert_eq!(lib.progress(0, null()), Ok(Progress::Done));
    assert_eq!(lib.progress(7, null()), Ok(Progress::InProgress));
    match lib.check(7, null()) {
        Err(Error::Backend { code, .. }) => assert_eq!(code, ResultCode::IN_PROGRESS),
        other => panic!("{other:?}"),
    }
    match lib.check(6, null()) {
        Err(Error::Remote { detail }) => {
            assert!(detail.contains(lib.error_string(6).as_str()), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    for code in [1, 8, 9, 42, -1, i32::MIN] {
        match lib.check(code, null()) {
            Err(Error::Backend { code: c, text, .. }) => {
                assert_eq!(c, ResultCode(code));
                assert_eq!(text, lib.error_string(code));
                assert!(!text.is_empty(), "{code}");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert!(lib.progress(code, null()).is_err(), "{code}");
    }
    println!("8 reads as {:?}", lib.error_string(8));
}

#[test]
fn a_missing_file_is_missing() {
    let e = Library::open("/nonexistent/dir/libnccl.so.2").unwrap_err();
    assert_eq!(
        e,
        LoadError::Missing {
            path: PathBuf::from("/nonexistent/dir/libnccl.so.2")
        }
    );
    assert!(e.to_string().contains("/nonexistent/dir/libnccl.so.2"));
}

#[test]
fn a_text_file_is_not_elf() {
    let dir = common::scratch("text");
    let p = dir.join("libnccl.so.2");
    std::fs::write(&p, "this is not a shared library\n").unwrap();
    match Library::open(&p) {
        Err(LoadError::BadElf { path, problem }) => {
            assert_eq!(path, p);
            assert_eq!(
                problem,
                oxccl_loader::ElfError::NotElf {
                    found: b"this".to_vec()
                }
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_library_with_a_missing_dependency_is_not_loadable() {
    // Passes the ELF check, fails in dlopen: the dynamic loader's own text.
    let dir = common::scratch("needs");
    let src = dir.join("needs.c");
    std::fs::write(
        &src,
        "int ncclGetVersion(int* v) { *v = 22304; return 0; }\n",
    )
    .unwrap();
    let dep = dir.join("liboxcclgone.so");
    let so = dir.join("libnccl.so.2");
    for (out, extra) in [(&dep, vec![]), (&so, vec![dep.clone()])] {
        let status = std::process::Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(out)
            .arg(&src)
            // Recorded as needed even though nothing of it is used.
            .arg("-Wl,--no-as-needed")
            .args(extra)
            .status()
            .expect("gcc runs");
        assert!(status.success());
    }
    std::fs::remove_file(&dep).unwrap();
    match Library::open(&so) {
        Err(LoadError::NotLoadable { path, reason }) => {
            assert_eq!(path, so);
            assert!(reason.contains("liboxcclgone.so"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn libc_is_not_nccl() {
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/aarch64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
        "/usr/lib64/libc.so.6",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.exists())
    .expect("a libc.so.6");
    match Library::open(libc) {
        Err(LoadError::NotNccl { path }) => assert_eq!(path, libc),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_old_nccl_is_too_old() {
    let dir = common::scratch("old");
    let src = dir.join("old.c");
    std::fs::write(
        &src,
        "int ncclGetVersion(int* v) { *v = 21205; return 0; }\n",
    )
    .unwrap();
    let so = dir.join("libnccl.so.2");
    let out = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .output()
        .expect("gcc runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e = Library::open(&so).unwrap_err();
    assert_eq!(
        e,
        LoadError::TooOld {
            path: so.clone(),
            found: Version::new(2, 12, 5),
            minimum: Version::MIN_SUPPORTED
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("2.12.5") && msg.contains(&Version::MIN_SUPPORTED.to_string()),
        "{msg}"
    );
}

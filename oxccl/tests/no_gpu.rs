//! The NCCL backend on a machine without a GPU, against real NCCL releases from the cache that
//! `scripts/fetch-nccl.sh` fills: every refusal is a typed error (argument, version gate, missing
//! CUDA driver), never a panic.

use oxccl::core::Backend;
use oxccl::core::ReshapeBackend;
use oxccl::{CommConfig, ConfigField, Device, Error, Feature, Missing, Nccl, ResultCode, Version};
use std::path::PathBuf;

fn library(version: &str) -> Option<Nccl> {
    // Where scripts/fetch-nccl.sh keeps the releases (`OXCCL_NCCL_CACHE`, as it honours it).
    let cache = std::env::var_os("OXCCL_NCCL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/nccl"));
    let path = cache.join(version).join("lib/libnccl.so.2");
    if !path.exists() {
        assert!(
            std::env::var("OXCCL_SKIP_REAL_NCCL").as_deref() == Ok("1"),
            "{} is missing: run scripts/fetch-nccl.sh (or set OXCCL_SKIP_REAL_NCCL=1)",
            path.display()
        );
        eprintln!(
            "skipped: {} missing and OXCCL_SKIP_REAL_NCCL=1",
            path.display()
        );
        return None;
    }
    Some(Nccl::open(&path).expect("the cached release loads"))
}

/// These tests are about machines without a CUDA driver; on a GPU machine they say so and skip.
fn no_driver() -> bool {
    // SAFETY: only tries to dlopen the CUDA driver library.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    if present {
        eprintln!("skipped: a CUDA driver is present here; these tests cover machines without one");
    }
    !present
}

#[test]
fn init_without_a_gpu_is_a_typed_error_not_a_panic() {
    let Some(nccl) = library("2.32.3") else {
        return;
    };
    if !no_driver() {
        return;
    }
    let id = nccl
        .unique_id()
        .expect("ncclGetUniqueId works without a GPU");
    assert!(id.as_bytes().iter().any(|b| *b != 0));
    for result in [
        nccl.init_rank(&id, 0, 1, Device(0), &CommConfig::new())
            .map(|_| ()),
        nccl.init_all(&[0]).map(|_| ()),
        oxccl::Comm::init_rank(&nccl, &id, 0, 1, 0, &CommConfig::new()).map(|_| ()),
    ] {
        match result {
            Err(Error::Backend { code, text, .. }) => {
                assert_eq!(code, ResultCode::UNHANDLED_CUDA_ERROR);
                assert!(text.contains("no CUDA driver"), "{text}");
            }
            other => panic!("expected a typed CUDA error, got {other:?}"),
        }
    }
}

#[test]
fn arguments_are_refused_before_anything_else() {
    let Some(nccl) = library("2.32.3") else {
        return;
    };
    let id = nccl.unique_id().unwrap();
    let cfg = CommConfig::new();
    let arg = |r: oxccl::Result<oxccl::NcclComm>| match r {
        Err(Error::InvalidArgument { arg, .. }) => arg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    assert_eq!(arg(nccl.init_rank(&id, 1, 1, Device(0), &cfg)), "rank");
    assert_eq!(arg(nccl.init_rank(&id, 0, 0, Device(0), &cfg)), "size");
    assert_eq!(
        arg(nccl.init_rank(&id, 0, u32::MAX, Device(0), &cfg)),
        "size"
    );
    assert!(matches!(
        nccl.init_all(&[]),
        Err(Error::InvalidArgument { arg: "devices", .. })
    ));
    assert!(matches!(
        nccl.init_all(&[0, 0]),
        Err(Error::InvalidArgument { arg: "devices", .. })
    ));
    assert!(matches!(
        nccl.init_rank_scalable(&[], 0, 2, Device(0), &cfg),
        Err(Error::InvalidArgument { arg: "ids", .. })
    ));
}

#[test]
fn hidden_features_are_unsupported_through_the_backend() {
    let Some(nccl) = library("2.32.3") else {
        return;
    };
    assert!(nccl.features().has(Feature::Shrink));
    let hidden = nccl
        .without(Feature::ScalableInit)
        .without(Feature::AllToAll);
    assert!(!hidden.features().has(Feature::AllToAll));
    assert!(hidden.features().has(Feature::GatherScatter));
    let id = hidden.unique_id().unwrap();
    assert!(matches!(
        hidden.init_rank_scalable(&[id], 0, 1, Device(0), &CommConfig::new()),
        Err(Error::Unsupported {
            feature: Feature::ScalableInit,
            ..
        })
    ));
}

#[test]
fn version_gates_hold_through_the_backend() {
    // 2.14.3 has config structs but not commName (2.27.3): refused by name, before any CUDA call
    if let Some(nccl) = library("2.14.3") {
        let id = nccl.unique_id().unwrap();
        let cfg = CommConfig::new().comm_name("trainer").unwrap();
        match nccl.init_rank(&id, 0, 1, Device(0), &cfg) {
            Err(Error::InvalidArgument {
                arg: "config",
                expected,
            }) => {
                assert!(
                    expected.contains("commName") && expected.contains("2.27.3"),
                    "{expected}"
                );
            }
            other => panic!("expected the config refused, got {other:?}"),
        }
        let cfg = CommConfig::new().set(ConfigField::MaxCtas, 4).unwrap();
        assert!(matches!(
            nccl.init_rank(&id, 0, 1, Device(0), &cfg),
            Err(Error::InvalidArgument { arg: "config", .. })
        ));
    }
    // 2.13.4 has no ncclCommInitRankConfig: a config is unsupported, with the version it needs
    if let Some(nccl) = library("2.13.4") {
        let id = nccl.unique_id().unwrap();
        assert_eq!(
            nccl.init_rank(&id, 0, 1, Device(0), &CommConfig::new().blocking(false))
                .unwrap_err(),
            Error::Unsupported {
                feature: Feature::NonBlocking,
                missing: Missing::TooOld {
                    need: Version::new(2, 14, 3),
                    have: Version::new(2, 13, 4)
                }
            }
        );
    }
    // 2.19.3 predates scalable init (2.23.4)
    if let Some(nccl) = library("2.19.3") {
        let id = nccl.unique_id().unwrap();
        assert!(matches!(
            nccl.init_rank_scalable(&[id], 0, 1, Device(0), &CommConfig::new()),
            Err(Error::Unsupported {
                feature: Feature::ScalableInit,
                missing: Missing::TooOld { .. }
            })
        ));
    }
}

/// The outermost group end: `Done`, or without a CUDA driver NCCL's typed CUDA error.
fn launched(r: oxccl::Result<oxccl::Progress>) {
    match r {
        Ok(p) => assert_eq!(p, oxccl::Progress::Done),
        Err(Error::Backend { code, .. }) => assert_eq!(code, ResultCode::UNHANDLED_CUDA_ERROR),
        Err(e) => panic!("expected Done or a CUDA error, got {e:?}"),
    }
}

#[test]
fn groups_are_counted_per_thread_and_per_library() {
    for version in ["2.13.4", "2.28.3", "2.32.3"] {
        let Some(nccl) = library(version) else {
            return;
        };
        // An end without a start is refused before NCCL is called.
        assert!(matches!(
            nccl.group_end(),
            Err(Error::InvalidState {
                attempted: "group_end",
                ..
            })
        ));
        // Nested: the inner end is counted and needs no GPU; a clone shares the library's depth.
        nccl.group_start().unwrap();
        let clone = nccl.clone();
        clone.group_start().unwrap();
        assert_eq!(clone.group_end(), Ok(oxccl::Progress::Done));
        // Another thread has no group open on this library.
        std::thread::scope(|s| {
            s.spawn(|| assert!(nccl.group_end().is_err()));
        });
        launched(nccl.group_end());
        // Closed, whatever NCCL answered: a further end is refused.
        assert!(matches!(nccl.group_end(), Err(Error::InvalidState { .. })));
        // The guard closes its group when dropped, and once when ended.
        drop(oxccl::GroupGuard::start(nccl.clone()).unwrap());
        assert!(matches!(nccl.group_end(), Err(Error::InvalidState { .. })));
        launched(oxccl::GroupGuard::start(nccl.clone()).unwrap().end());
        assert!(matches!(nccl.group_end(), Err(Error::InvalidState { .. })));
    }
}

/// Revoke, shrink and grow against every cached release: each is there exactly from its
/// release on, with its symbols resolved, and absent before with the reason naming both
/// versions.
#[test]
fn revoke_shrink_and_grow_are_gated_by_the_release() {
    for (v, revoke, shrink, grow) in [
        ("2.23.4", false, false, false),
        ("2.28.3", false, true, false),
        ("2.32.3", true, true, true),
    ] {
        let Some(nccl) = library(v) else { continue };
        let f = nccl.features();
        assert_eq!(f.has(Feature::Revoke), revoke, "{v}");
        assert_eq!(f.has(Feature::Shrink), shrink, "{v}");
        assert_eq!(f.has(Feature::Grow), grow, "{v}");
        let api = nccl.library().api();
        assert_eq!(api.comm_revoke.is_some(), revoke, "{v}");
        assert_eq!(api.comm_shrink.is_some(), shrink, "{v}");
        assert_eq!(api.comm_grow.is_some(), grow, "{v}");
        if !revoke {
            let e = f
                .require(Feature::Revoke)
                .expect_err("revoke before 2.28.7");
            let text = e.to_string();
            assert!(text.contains("2.28.7") && text.contains(v), "{text}");
        }
    }
}

/// Joining a grow through the backend: refused before NCCL on a release without it (naming
/// both versions) and, on one with it, for a rank past the size or an id nobody made.
#[test]
fn join_grown_is_gated_and_checked_before_the_library() {
    if let Some(old) = library("2.28.3") {
        let e = old
            .join_grown(
                &oxccl::UniqueId([7; 128]),
                2,
                3,
                Device(0),
                &CommConfig::new(),
            )
            .expect_err("grow on 2.28.3");
        assert!(
            matches!(
                e,
                Error::Unsupported {
                    feature: Feature::Grow,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("2.28.3"), "{e}");
    }
    let Some(new) = library("2.32.3") else { return };
    let e = new
        .join_grown(
            &oxccl::UniqueId([7; 128]),
            3,
            3,
            Device(0),
            &CommConfig::new(),
        )
        .expect_err("a rank past the size");
    assert!(
        matches!(e, Error::InvalidArgument { arg: "rank", .. }),
        "{e}"
    );
    let e = new
        .join_grown(
            &oxccl::UniqueId([0; 128]),
            2,
            3,
            Device(0),
            &CommConfig::new(),
        )
        .expect_err("an id of zeros");
    assert!(matches!(e, Error::InvalidArgument { arg: "id", .. }), "{e}");
}

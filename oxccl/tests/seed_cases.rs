//! Seed cases of PyTorch's NCCL process-group tests (shared/reference/seed-tests.md), ported
//! to `ProcessGroup` on the mock world: ranks as threads sharing one mock backend and one
//! in-process store. The bodies are in `pg_cases/`, written once over the backend; the same
//! bodies run on NCCL under torchrun (`examples/pg_cases.rs`). Cases 15 and 30 (peers that die,
//! a timeout dump) need processes: `tests/safety_processes.rs`.

mod pg_cases;

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::Error;
use pg_cases::{collectives, groups, run, run_on, safety};
use std::sync::Arc;

/// The NCCL release `scripts/fetch-nccl.sh` caches (any release: case 1 never reaches a GPU);
/// `None` only when the cache is missing and `OXCCL_SKIP_REAL_NCCL=1` says to go without.
fn cached_nccl() -> Option<oxccl::Nccl> {
    let cache = std::env::var_os("OXCCL_NCCL_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/nccl"));
    let path = cache.join("2.32.3/lib/libnccl.so.2");
    if !path.exists() {
        assert!(
            std::env::var("OXCCL_SKIP_REAL_NCCL").as_deref() == Ok("1"),
            "{} is missing: run scripts/fetch-nccl.sh (or set OXCCL_SKIP_REAL_NCCL=1)",
            path.display()
        );
        println!(
            "skipped: {} missing and OXCCL_SKIP_REAL_NCCL=1",
            path.display()
        );
        return None;
    }
    Some(oxccl::Nccl::open(&path).expect("the cached release loads"))
}

#[test]
fn case_01_no_gpu_is_a_clear_error() {
    let Some(nccl) = cached_nccl() else {
        return;
    };
    if oxccl::nccl::require_driver().is_ok() {
        println!("skipped: this machine has a CUDA driver; case 1 is about machines without");
        return;
    }
    // Refused at construction, lazy or eager (c10d's constructor refuses before any use).
    for opts in [pg_cases::lazy(0), pg_cases::eager(0)] {
        let bound = opts.bound_device;
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let err = ProcessGroup::new(nccl.clone(), store, 0, 1, opts)
            .map(|_| ())
            .unwrap_err();
        let Error::Backend { code, text, .. } = &err else {
            panic!("bound={bound:?}: expected a backend error, got {err:?}")
        };
        assert_eq!(*code, oxccl::ResultCode::UNHANDLED_CUDA_ERROR, "{err}");
        assert!(text.contains("no CUDA driver"), "{err}");
        assert!(
            err.to_string().contains("needs NVIDIA GPUs, none found"),
            "{err}"
        );
    }
}

#[test]
fn case_02_two_ranks_on_one_device_are_invalid_usage() {
    // The mock refuses a device another rank of the communicator is on, as NCCL does
    // ("Duplicate GPU detected"): every rank gets the backend's invalid usage.
    run(2, pg_cases::case_02);
}

#[test]
fn case_03_use_after_destroy_is_an_error() {
    run(2, pg_cases::case_03);
}

#[test]
fn case_04_abort_unblocks_a_stuck_op() {
    run(2, pg_cases::case_04);
}

#[test]
fn case_05_unordered_destroy_does_not_deadlock() {
    run(2, pg_cases::case_05);
}

#[test]
fn case_06_split_counts() {
    run(2, pg_cases::case_06);
}

#[test]
fn case_07_lazy_split() {
    run(2, pg_cases::case_07);
}

#[test]
fn case_08_eager_split() {
    run(2, pg_cases::case_08);
}

#[test]
fn case_09_nonblocking_init_lazy_and_eager() {
    run(2, pg_cases::case_09);
    // Inits that stay in progress for a few polls, so the ops really wait for them.
    let slow_init = MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::mock::DEFAULT_VERSION),
        oxccl::mock::FaultPlan::new(),
        5,
        oxccl::mock::DEFAULT_INIT_TIMEOUT,
    );
    run_on(slow_init, 2, pg_cases::case_09);
}

#[test]
fn case_10_timeout_precedence() {
    use oxccl::rules::env::effective_timeout;
    use std::time::Duration;
    let s = Duration::from_secs;
    assert_eq!(effective_timeout(None, None, None), s(600));
    assert_eq!(effective_timeout(Some(s(123)), None, None), s(123));
    assert_eq!(effective_timeout(None, Some(s(123)), None), s(600));
    assert_eq!(
        effective_timeout(Some(s(1240)), Some(s(123)), None),
        s(1240)
    );
    run(1, pg_cases::case_10);
}

#[test]
fn case_11_group_uid_and_description() {
    run(2, pg_cases::case_11);
}

#[test]
fn case_12_nan_check() {
    run(2, safety::case_12);
}

#[test]
fn case_13_error_reason_propagation() {
    run(2, safety::case_13);
}

#[test]
fn case_14_wait_timeout() {
    run(2, safety::case_14);
}

#[test]
fn case_16_strict_boolean_environment() {
    use oxccl::rules::env::EnvConfig;
    for bad in ["abc", "-1", "2147483647", "4294967295"] {
        let e =
            EnvConfig::from_lookup(|k| (k == "OXCCL_BLOCKING_WAIT").then_some(bad)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    arg: "OXCCL_BLOCKING_WAIT",
                    ..
                }
            ),
            "{bad}: {e:?}"
        );
        assert!(
            e.to_string().contains(bad),
            "{bad}: the value is not named: {e}"
        );
    }
    for (v, want) in [("1", true), ("0", false)] {
        let ok = EnvConfig::from_lookup(|k| (k == "OXCCL_BLOCKING_WAIT").then_some(v)).unwrap();
        assert_eq!(ok.blocking_wait, want, "{v}");
    }
    // The same strictness for another boolean, and the default when unset.
    let e = EnvConfig::from_lookup(|k| (k == "OXCCL_NAN_CHECK").then_some("abc")).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                arg: "OXCCL_NAN_CHECK",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!EnvConfig::from_lookup(|_| None).unwrap().blocking_wait);
}

#[test]
fn case_17_broadcast_coalesced() {
    run(2, collectives::case_17);
}

#[test]
fn case_18_all_reduce_coalesced_uneven() {
    run(2, collectives::case_18);
    run(3, collectives::case_18);
}

#[test]
fn case_19_coalescing_block_gives_one_work() {
    run(2, collectives::case_19);
}

/// A mock imitating NCCL 2.23.4, the last release without fp8.
fn before_fp8() -> MockBackend {
    MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::Version::new(2, 23, 4)),
        oxccl::mock::FaultPlan::new(),
        1,
        oxccl::mock::DEFAULT_INIT_TIMEOUT,
    )
}

#[test]
fn case_20_fp8_reductions_follow_the_library() {
    run(2, collectives::case_20);
    run(3, collectives::case_20);
    run_on(before_fp8(), 2, collectives::case_20);
}

/// c10d moves fp8 as bytes for non-reductions on any NCCL (reference/c10d-behaviour.md:
/// "bool and fp8 travel as uint8 for non-reductions"), so case 20's fp8 all_gather is
/// byte-exact before NCCL 2.24.3 too: it travels as uint8 there (`check::wire_dtype`), while
/// the reductions of `case_20` are refused naming Float8 and 2.24.3.
#[test]
fn case_20_fp8_all_gather_before_nccl_2_24() {
    run_on(before_fp8(), 2, collectives::case_20_gather);
}

/// Every other operation that only moves data carries fp8 byte-exact too, on any library.
#[test]
fn case_20_fp8_moves_on_any_nccl() {
    run_on(before_fp8(), 2, collectives::case_20_moves);
    run_on(before_fp8(), 3, collectives::case_20_moves);
    run(3, collectives::case_20_moves);
}

#[test]
fn case_21_reduce_scatter_int64() {
    run(2, collectives::case_21);
    run(4, collectives::case_21);
}

#[test]
fn case_22_single_rank_groups() {
    run(2, collectives::case_22);
    // Ranks 2 and 3 join the world and leave the rest to ranks 0 and 1 (as on 4 GPUs).
    run(4, collectives::case_22);
}

#[test]
fn case_23_dtype_mismatch_across_ranks() {
    run(2, collectives::case_23);
}

#[test]
fn case_24_complex_as_real_pairs() {
    run(2, collectives::case_24);
}

#[test]
fn case_25_membership() {
    run(2, groups::case_25);
}

#[test]
fn case_26_subgroups_with_global_peers() {
    run(4, groups::case_26);
}

#[test]
fn case_31_config_passes_through() {
    run(2, groups::case_31);
    let before_config = MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::Version::new(2, 16, 5)),
        oxccl::mock::FaultPlan::new(),
        1,
        oxccl::mock::DEFAULT_INIT_TIMEOUT,
    );
    run_on(before_config, 2, groups::case_31_before_2_17);
}

#[test]
fn case_27_completion_hooks() {
    run(2, safety::case_27);
}

#[test]
fn case_28_flight_recorder_ring() {
    run(2, safety::case_28);
}

#[test]
fn case_29_flight_recorder_states() {
    run(2, safety::case_29);
}

#[test]
fn destroy_frees_blocked_threads() {
    run(2, safety::destroy_frees_blocked_threads);
}

#[test]
fn coalescing_edge_cases() {
    run(2, collectives::coalescing_edge_cases);
    run(3, collectives::coalescing_edge_cases);
}

#[test]
fn shutdown_aborts_communicators_still_initializing() {
    // Rank 0's nonblocking init never finishes (its polls say InProgress for ever).
    let backend = MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::mock::DEFAULT_VERSION),
        oxccl::mock::FaultPlan::new().init_in_progress(0, u32::MAX),
        u32::MAX,
        oxccl::mock::DEFAULT_INIT_TIMEOUT,
    );
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let pg = ProcessGroup::new(
        backend,
        store,
        0,
        1,
        PgOptions {
            bound_device: Some(oxccl::Device(0)),
            config: oxccl::CommConfig::new().blocking(false),
            ..pg_cases::lazy(0)
        },
    )
    .unwrap();
    assert_eq!(pg.comm_state(), Some(oxccl::CommState::Initializing));
    let began = std::time::Instant::now();
    oxccl::pg::shutdown(&[&pg], std::time::Duration::from_secs(2));
    assert!(began.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(pg.comm_state(), Some(oxccl::CommState::Aborted));
}

#[test]
fn subgroup_of_a_lazy_parent() {
    run(4, groups::subgroup_of_a_lazy_parent);
}

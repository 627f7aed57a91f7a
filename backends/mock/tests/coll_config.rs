//! Collectives with a per-call configuration on the mock: checked as NCCL's backend checks
//! them (the operations NCCL configures, the configuration's numbers, the release), then run.

mod common;

use common::*;
use oxccl_core::coll_config::CollConfig;
use oxccl_core::PerCallConfig;
use oxccl_core::{
    CommOp, Communicator, DataType, Error, Feature, Progress, ReduceOp, Stream, Version,
};
use oxccl_mock::{MockComm, World};

fn world(n: u32, version: Version) -> Vec<MockComm> {
    World::builder(n).version(version).build().unwrap()
}

#[test]
fn a_configured_all_reduce_sums() {
    let cfg = CollConfig {
        max_ctas: Some(4),
        profiler_tag: 42,
        ..CollConfig::default()
    }
    .algorithms("ring");
    let out = on_ranks(world(3, Version::new(2, 32, 3)), |c| {
        let s = stream();
        let mut b = Buf::from_bytes(&i64s(&[c.rank() as i64 + 1; 4]));
        // SAFETY: `b` outlives the synchronize below.
        unsafe { c.issue_configured(&in_place(&mut b, DataType::Int64, ReduceOp::Sum), &s, &cfg) }
            .unwrap();
        s.synchronize().unwrap();
        assert_eq!(c.poll(), Ok(Progress::Done));
        i64::from_ne_bytes(b.bytes()[..8].try_into().unwrap())
    });
    assert_eq!(out, vec![6, 6, 6]);
}

#[test]
fn what_nccl_cannot_configure_is_refused_first() {
    let w = world(2, Version::new(2, 32, 3));
    let s = stream();
    let b = Buf::filled(8, 0);
    let send = CommOp::Send {
        buf: b.rd(DataType::Int64),
        dtype: DataType::Int64,
        peer: 1,
    };
    // SAFETY: refused before anything is queued.
    let e = unsafe { w[0].issue_configured(&send, &s, &CollConfig::default()) }.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { arg: "op", .. }), "{e}");
    let mut b = Buf::filled(8, 0);
    let bad = CollConfig {
        min_ctas: Some(8),
        max_ctas: Some(2),
        ..CollConfig::default()
    };
    let op = in_place(&mut b, DataType::Int64, ReduceOp::Sum);
    // SAFETY: refused before anything is queued.
    let e = unsafe { w[0].issue_configured(&op, &s, &bad) }.unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                arg: "min_ctas",
                ..
            }
        ),
        "{e}"
    );
    let old = world(2, Version::new(2, 28, 9));
    // SAFETY: refused before anything is queued.
    let e = unsafe { old[0].issue_configured(&op, &s, &CollConfig::default()) }.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                feature: Feature::CollConfig,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("needs NCCL 2.31.2, loaded 2.28.9"),
        "{e}"
    );
}

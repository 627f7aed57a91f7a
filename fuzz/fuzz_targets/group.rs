//! Random start / end / enqueue / fail sequences on a small group state: never panics, the
//! depth matches a model, refused calls change nothing, recovery always returns to closed.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use oxccl_core::state::group::{Ended, GroupKind, GroupState, OpSummary};
use oxccl_core::{DataType, Error, OpKind, ReduceOp};

const CAP: usize = 6;

#[derive(Debug, Arbitrary)]
enum Step {
    Start(Kind),
    End(Kind),
    Enqueue { comm: u8, op: Op },
    Fail,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Kind {
    Group,
    Coalescing,
    Fused,
}

#[derive(Debug, Arbitrary)]
struct Op {
    kind: u8,
    dtype: u8,
    numel_in: usize,
    numel_out: usize,
    reduce: u8,
    root: Option<u32>,
    peer: Option<u32>,
}

const KINDS: [OpKind; 14] = [
    OpKind::AllReduce,
    OpKind::Broadcast,
    OpKind::Reduce,
    OpKind::AllGather,
    OpKind::ReduceScatter,
    OpKind::AllToAll,
    OpKind::AllToAllV,
    OpKind::Gather,
    OpKind::Scatter,
    OpKind::AllGatherV,
    OpKind::ReduceScatterV,
    OpKind::Send,
    OpKind::Recv,
    OpKind::Barrier,
];

fn kind(k: Kind) -> GroupKind {
    match k {
        Kind::Group => GroupKind::Group,
        Kind::Coalescing => GroupKind::Coalescing,
        Kind::Fused => GroupKind::Fused,
    }
}

fn summary(op: &Op) -> OpSummary {
    let k = KINDS
        .get(usize::from(op.kind) % KINDS.len())
        .copied()
        .unwrap_or(OpKind::Barrier);
    let dtype = DataType::from_code(i32::from(op.dtype % 14));
    let reduce = ReduceOp::BUILTIN.get(usize::from(op.reduce)).copied();
    OpSummary {
        kind: k,
        dtype,
        numel_in: op.numel_in,
        numel_out: op.numel_out,
        reduce,
        root: op.root,
        peer: op.peer,
    }
}

fn check_text(e: Error) {
    let _ = format!("{e}");
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(steps) = Vec::<Step>::arbitrary(&mut u) else {
        return;
    };
    let mut g = GroupState::<CAP>::new();
    let mut depth: u32 = 0;
    for step in &steps {
        let before = g.clone();
        match step {
            Step::Start(k) => match g.start(kind(*k)) {
                Ok(d) => {
                    depth += 1;
                    assert_eq!(d, depth);
                    if depth == 1 {
                        assert!(g.queued().is_empty(), "a new block starts empty");
                    }
                }
                Err(e) => {
                    assert_eq!(g.depth(), before.depth());
                    assert_eq!(g.queued(), before.queued());
                    check_text(e.into());
                }
            },
            Step::End(k) => match g.end(kind(*k)) {
                Ok(ended) => {
                    depth -= 1; // underflow would panic here: the model checks "never negative"
                    match ended {
                        Ended::Nested { depth: d } => assert_eq!(d, depth),
                        Ended::Empty { .. } => assert!(depth == 0 && g.queued().is_empty()),
                        Ended::Flushed {
                            ops,
                            comm,
                            spans_comms,
                            kind,
                        } => {
                            assert_eq!(depth, 0);
                            assert_eq!(ops, g.queued().len());
                            assert!(ops > 0);
                            assert_eq!(g.queued().first().map(|q| q.comm), Some(comm));
                            if kind != GroupKind::Group {
                                assert!(!spans_comms);
                                assert!(g.queued().iter().all(|q| q.comm == comm));
                            }
                        }
                    }
                }
                Err(e) => {
                    assert_eq!(g.depth(), before.depth());
                    check_text(e.into());
                }
            },
            Step::Enqueue { comm, op } => {
                let s = summary(op);
                match g.enqueue(u64::from(*comm % 4), s) {
                    Ok(()) => {
                        assert!(depth > 0);
                        assert_eq!(g.queued().last().map(|q| q.op), Some(s));
                    }
                    Err(e) => {
                        assert_eq!(g.queued(), before.queued());
                        check_text(e.into());
                    }
                }
            }
            Step::Fail => {
                let r = g.fail();
                assert_eq!(r.group_ends, depth);
                depth = 0;
                assert!(!g.is_open() && g.kind().is_none() && g.queued().is_empty());
            }
        }
        assert_eq!(g.depth(), depth);
        assert_eq!(g.is_open(), depth > 0);
        assert_eq!(g.kind().is_some(), depth > 0);
        assert!(g.queued().len() <= CAP);
    }
    // Whatever happened, recovery closes everything.
    let r = g.fail();
    assert_eq!(r.group_ends, depth);
    assert_eq!(g.depth(), 0);
});

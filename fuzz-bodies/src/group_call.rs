//! The group/coalescing state machine against a reference model written here from the rules
//! in `core/src/state/group_call.rs`'s docs: arbitrary start / end / enqueue / fail sequences across
//! the three kinds, nested, ends without starts, failures mid-block. After every step the
//! state (depth, kind, pinned communicator, queued operations) equals the model's, every
//! answer (depth, `Ended`, `Recovery`, the exact refusal) is the model's, and a refusal names
//! the argument the model says is at fault.

use arbitrary::{Arbitrary, Unstructured};
use oxccl_core::state::group_call::{
    Ended, GroupError, GroupKind, GroupState, OpSummary, Recovery, MAX_GROUP_DEPTH,
};
use oxccl_core::{DataType, Error, HostScalar, OpKind, ReduceOp, Scalar};

/// A small capacity, so that `QueueFull` is reached.
const CAP: usize = 6;

#[derive(Debug, Arbitrary)]
enum Step {
    Start(Kind),
    /// Many nested group starts at once, so that the depth limit is reachable.
    StartMany(u16),
    End(Kind),
    Enqueue {
        comm: u8,
        op: Op,
    },
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
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
    factor: u8,
    root: Option<u32>,
    peer: Option<u32>,
}

/// Premul-sum factors, NaN and both zeros included (bitwise identity decides sameness).
const FACTORS: [f32; 4] = [1.0, 0.0, -0.0, f32::NAN];

fn kind(k: Kind) -> GroupKind {
    match k {
        Kind::Group => GroupKind::Group,
        Kind::Coalescing => GroupKind::Coalescing,
        Kind::Fused => GroupKind::Fused,
    }
}

fn pick<T: Copy>(xs: &[T], i: u8) -> Option<T> {
    xs.get(usize::from(i) % xs.len().max(1)).copied()
}

/// The model's view of a reduction: a builtin index or a premul factor's bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Red {
    Builtin(u8),
    PreMul(u32),
}

fn summary(op: &Op) -> (OpSummary, Option<Red>) {
    let k = pick(&OpKind::ALL, op.kind).unwrap_or(OpKind::Barrier);
    let dtype = DataType::from_code(i32::from(op.dtype % 14));
    let (reduce, red) = match op.reduce % 7 {
        r @ 0..=4 => (
            ReduceOp::BUILTIN.get(usize::from(r)).copied(),
            Some(Red::Builtin(r)),
        ),
        5 => {
            let f = pick(&FACTORS, op.factor).unwrap_or(1.0);
            (
                Some(ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(f)))),
                Some(Red::PreMul(f.to_bits())),
            )
        }
        _ => (None, None),
    };
    let s = OpSummary {
        kind: k,
        dtype,
        numel_in: op.numel_in,
        numel_out: op.numel_out,
        reduce,
        root: op.root,
        peer: op.peer,
    };
    (s, red)
}

/// The reference model: plain fields, rules restated from the documentation.
#[derive(Debug, Default, Clone)]
struct Model {
    depth: u32,
    kind: Option<GroupKind>,
    first_comm: Option<u64>,
    spans: bool,
    ops: Vec<(u64, OpSummary, Option<Red>)>,
}

impl Model {
    fn start(&mut self, k: GroupKind) -> Result<u32, GroupError> {
        if self.depth > 0 {
            let outer = self.kind.expect("open block has a kind");
            if k != GroupKind::Group {
                return Err(GroupError::Nested { outer, inner: k });
            }
            if self.depth == MAX_GROUP_DEPTH {
                return Err(GroupError::TooDeep {
                    max: MAX_GROUP_DEPTH,
                });
            }
        } else {
            *self = Model {
                kind: Some(k),
                ..Model::default()
            };
        }
        self.depth += 1;
        Ok(self.depth)
    }

    fn enqueue(&mut self, comm: u64, op: OpSummary, red: Option<Red>) -> Result<(), GroupError> {
        if self.depth == 0 {
            return Err(GroupError::NotOpen { kind: op.kind });
        }
        let k = self.kind.expect("open block has a kind");
        if k != GroupKind::Group {
            if let Some(pinned) = self.first_comm {
                if pinned != comm {
                    return Err(GroupError::CommMismatch { pinned, got: comm });
                }
            }
        }
        if k == GroupKind::Fused {
            if !matches!(
                op.kind,
                OpKind::AllReduce | OpKind::AllGather | OpKind::ReduceScatter
            ) {
                return Err(GroupError::NotFusable { kind: op.kind });
            }
            if let Some((_, first, first_red)) = self.ops.first() {
                if first.kind != op.kind {
                    return Err(GroupError::MixedKinds {
                        first: first.kind,
                        got: op.kind,
                    });
                }
                if let (Some(a), Some(b)) = (first.dtype, op.dtype) {
                    if a != b {
                        return Err(GroupError::MixedDtypes { first: a, got: b });
                    }
                }
                if let (Some(a), Some(b)) = (first_red, red) {
                    if *a != b {
                        let name = |r: &Option<ReduceOp>| r.as_ref().map_or("", ReduceOp::name);
                        return Err(GroupError::MixedReduceOps {
                            first: name(&first.reduce),
                            got: name(&op.reduce),
                        });
                    }
                }
            }
        }
        if self.ops.len() == CAP {
            return Err(GroupError::QueueFull { capacity: CAP });
        }
        self.ops.push((comm, op, red));
        match self.first_comm {
            None => self.first_comm = Some(comm),
            Some(c) => self.spans |= c != comm,
        }
        Ok(())
    }

    fn end(&mut self, k: GroupKind) -> Result<Ended, GroupError> {
        if self.depth == 0 {
            return Err(GroupError::EndWithoutStart { kind: k });
        }
        let open = self.kind.expect("open block has a kind");
        let expected = if self.depth > 1 {
            GroupKind::Group
        } else {
            open
        };
        if k != expected {
            return Err(GroupError::KindMismatch {
                open: expected,
                ended: k,
            });
        }
        self.depth -= 1;
        if self.depth > 0 {
            return Ok(Ended::Nested { depth: self.depth });
        }
        self.kind = None;
        Ok(match self.ops.first() {
            None => Ended::Empty { kind: open },
            Some((comm, _, _)) => Ended::Flushed {
                kind: open,
                comm: *comm,
                spans_comms: self.spans,
                ops: self.ops.len(),
            },
        })
    }

    fn fail(&mut self) -> Recovery {
        let open = self.depth > 0;
        let r = Recovery {
            group_ends: self.depth,
            kind: if open { self.kind } else { None },
            dropped: if open { self.ops.len() } else { 0 },
        };
        *self = Model::default();
        r
    }
}

/// The argument a refusal must name (`None`: a state error, not an argument error).
fn expected_arg(e: &GroupError) -> Option<&'static str> {
    match e {
        GroupError::CommMismatch { .. } => Some("comm"),
        GroupError::MixedDtypes { .. } => Some("dtype"),
        GroupError::QueueFull { .. }
        | GroupError::NotFusable { .. }
        | GroupError::MixedKinds { .. }
        | GroupError::MixedReduceOps { .. } => Some("op"),
        _ => None,
    }
}

fn check_error(e: GroupError) {
    let want = expected_arg(&e);
    let msg = e.to_string();
    assert!(!msg.is_empty());
    match (Error::from(e), want) {
        (Error::InvalidArgument { arg, .. }, Some(w)) => assert_eq!(arg, w, "{msg}"),
        (Error::InvalidState { .. }, None) => {}
        (got, w) => panic!("{msg}: became {got:?}, wanted argument {w:?}"),
    }
}

fn same_state(g: &GroupState<CAP>, m: &Model) {
    assert_eq!(g.depth(), m.depth, "depth");
    assert_eq!(g.is_open(), m.depth > 0);
    assert_eq!(g.kind(), m.kind, "kind");
    assert_eq!(g.comm(), m.first_comm, "pinned communicator");
    let got: Vec<(u64, OpKind)> = g.queued().iter().map(|q| (q.comm, q.op.kind)).collect();
    let want: Vec<(u64, OpKind)> = m.ops.iter().map(|(c, o, _)| (*c, o.kind)).collect();
    assert_eq!(got, want, "queued operations");
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let Ok(steps) = Vec::<Step>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut g = GroupState::<CAP>::new();
    let mut m = Model::default();
    for step in &steps {
        match step {
            Step::Start(k) => {
                let (got, want) = (g.start(kind(*k)), m.start(kind(*k)));
                assert_eq!(got, want, "start({k:?})");
                if let Err(e) = got {
                    check_error(e);
                }
            }
            Step::StartMany(n) => {
                for _ in 0..(n % 1100) {
                    let (got, want) = (g.start(GroupKind::Group), m.start(GroupKind::Group));
                    assert_eq!(got, want, "start(group) at depth {}", m.depth);
                    if got.is_err() {
                        break;
                    }
                }
            }
            Step::End(k) => {
                let (got, want) = (g.end(kind(*k)), m.end(kind(*k)));
                assert_eq!(got, want, "end({k:?})");
                if let Err(e) = got {
                    check_error(e);
                }
            }
            Step::Enqueue { comm, op } => {
                let (s, red) = summary(op);
                let comm = u64::from(*comm % 4);
                let (got, want) = (g.enqueue(comm, s), m.enqueue(comm, s, red));
                assert_eq!(got, want, "enqueue({comm}, {s:?})");
                if let Err(e) = got {
                    check_error(e);
                }
            }
            Step::Fail => assert_eq!(g.fail(), m.fail(), "fail"),
        }
        same_state(&g, &m);
    }
    // Whatever happened, recovery owes exactly the open depth and closes everything.
    assert_eq!(g.fail(), m.fail());
    same_state(&g, &m);
}

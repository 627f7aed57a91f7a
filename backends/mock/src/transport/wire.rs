//! The messages between a rank's process and the host process (rank 0's), as bytes: a frame is
//! `[len: u32 LE][payload]`, the payload a tag then fixed-width little-endian fields. Errors and
//! operation descriptions cross the wire with what the ranks need of them.

use super::child_spec::ChildSpec;
use super::fields::{get_error, put_error, short, R, W};
use super::proc_id::ProcId;
use super::wire_one_sided::{get_answer, get_call, put_answer, put_call, OneSidedCall};
use crate::delivery::Delivery;
use crate::fault::FaultKind;
use crate::op_desc::OpDesc;
use oxccl_core::{DataType, HostScalar, OpKind, RawBuf, RawBufMut, ReduceOp, Result, Scalar};
use std::time::Duration;

/// The largest frame accepted (a batch of many v-collectives fits far below it).
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// A buffer offset meaning "no buffer".
pub(crate) const NONE: u64 = u64::MAX;

/// One job of a batch: the op with offsets into the batch's segment instead of addresses.
#[derive(Debug, Clone)]
pub(crate) struct WireJob {
    pub desc: OpDesc,
    pub seq: u64,
    pub index: u64,
    pub fault: Option<FaultKind>,
}

/// A message of either side.
#[derive(Debug)]
pub(crate) enum Msg {
    /// rank → host: join the communicator of `token` as `rank` of `size`, from process `pid`,
    /// waiting at most `limit_ms` for the other ranks.
    Hello {
        token: [u8; 16],
        rank: u32,
        size: u32,
        pid: u32,
        limit_ms: u64,
    },
    /// host → rank: the join's outcome: the process of every rank once all joined (a shrink
    /// hosts its child in the process of the child's rank 0, which every survivor must
    /// know even when the host is gone), or why not.
    Welcome(Result<Vec<u32>>),
    /// rank → host: run `jobs` (offsets into segment `seg`, sent with the message when new)
    /// in order on the host's stream for remote stream `stream`.
    Batch {
        id: u64,
        stream: u64,
        seg: u64,
        seg_len: u64,
        jobs: Vec<WireJob>,
    },
    /// host → rank: batch `id` ran; `Err` is the rank's own error after it.
    Done { id: u64, result: Result<()> },
    /// rank → host: the rank is gone (aborted, failed, destroyed), with why.
    Dead { why: String },
    /// rank → host: segment `seg` is no longer used.
    Forget { seg: u64 },
    /// rank → host: the rank's call of split `seq` (`color` None: NOCOLOR).
    Split {
        seq: u64,
        color: Option<u32>,
        key: u32,
    },
    /// host → rank: where the rank's child of split `seq` is (`None`: NOCOLOR), or why the
    /// split failed.
    SplitDone {
        seq: u64,
        result: Result<Option<ChildSpec>>,
    },
    /// rank → host: a one-sided call of one of the rank's streams (`id` numbers the answer).
    OneSided { id: u64, call: OneSidedCall },
    /// host → rank: one-sided call `id` ran: the puts a wait took for the rank, or why not.
    OneSidedDone {
        id: u64,
        result: Result<Vec<Delivery>>,
    },
}

fn put_result(w: &mut W, res: &Result<()>) {
    match res {
        Ok(()) => w.u8(0),
        Err(e) => put_error(w, e),
    }
}

fn get_result(r: &mut R<'_>) -> Result<Result<()>> {
    if r.0.first() == Some(&0) {
        r.u8()?;
        return Ok(Ok(()));
    }
    Ok(Err(get_error(r)?))
}

fn put_op(w: &mut W, op: Option<ReduceOp>) {
    match op {
        None => w.u8(0),
        Some(ReduceOp::Sum) => w.u8(1),
        Some(ReduceOp::Prod) => w.u8(2),
        Some(ReduceOp::Min) => w.u8(3),
        Some(ReduceOp::Max) => w.u8(4),
        Some(ReduceOp::Avg) => w.u8(5),
        Some(ReduceOp::PreMulSum(Scalar::Host(h))) => {
            let (tag, bits) = match h {
                HostScalar::F16(b) => (0, u64::from(b)),
                HostScalar::Bf16(b) => (1, u64::from(b)),
                HostScalar::F32(f) => (2, u64::from(f.to_bits())),
                HostScalar::F64(f) => (3, f.to_bits()),
            };
            w.u8(6);
            w.u8(tag);
            w.u64(bits);
        }
        // The address was turned into a segment offset by the sender.
        Some(ReduceOp::PreMulSum(Scalar::Device { addr })) => {
            w.u8(7);
            w.u64(addr as u64);
        }
    }
}

fn get_op(r: &mut R<'_>) -> Result<Option<ReduceOp>> {
    Ok(Some(match r.u8()? {
        0 => return Ok(None),
        1 => ReduceOp::Sum,
        2 => ReduceOp::Prod,
        3 => ReduceOp::Min,
        4 => ReduceOp::Max,
        5 => ReduceOp::Avg,
        6 => {
            let tag = r.u8()?;
            let bits = r.u64()?;
            ReduceOp::PreMulSum(Scalar::Host(match tag {
                0 => HostScalar::F16(bits as u16),
                1 => HostScalar::Bf16(bits as u16),
                2 => HostScalar::F32(f32::from_bits(bits as u32)),
                _ => HostScalar::F64(f64::from_bits(bits)),
            }))
        }
        7 => ReduceOp::PreMulSum(Scalar::Device { addr: r.usize()? }),
        _ => return Err(short()),
    }))
}

fn put_opt(w: &mut W, v: Option<u32>) {
    w.u64(v.map_or(NONE, u64::from));
}

fn get_opt(r: &mut R<'_>) -> Result<Option<u32>> {
    let v = r.u64()?;
    Ok(if v == NONE {
        None
    } else {
        Some(u32::try_from(v).map_err(|_| short())?)
    })
}

fn put_job(w: &mut W, j: &WireJob) {
    let d = &j.desc;
    w.u8(OpKind::ALL.iter().position(|k| *k == d.kind).unwrap_or(0) as u8);
    w.u32(d.dtype.map_or(u32::MAX, |t| t.code() as u32));
    put_op(w, d.op);
    put_opt(w, d.root);
    put_opt(w, d.peer);
    w.u64(d.send.addr as u64);
    w.u64(d.send.len as u64);
    w.u64(d.recv.addr as u64);
    w.u64(d.recv.len as u64);
    w.list(&d.counts);
    w.list(&d.recv_counts);
    w.u64(j.seq);
    w.u64(j.index);
    match j.fault {
        None | Some(FaultKind::Fail(_)) => w.u8(0),
        Some(FaultKind::Hang) => w.u8(1),
        Some(FaultKind::Lose) => w.u8(2),
        Some(FaultKind::Delay(d)) => {
            w.u8(3);
            w.u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        }
    }
}

fn get_job(r: &mut R<'_>) -> Result<WireJob> {
    let kind = *OpKind::ALL.get(r.u8()? as usize).ok_or_else(short)?;
    let dt = r.u32()?;
    let dtype = if dt == u32::MAX {
        None
    } else {
        Some(DataType::from_code(dt as i32).ok_or_else(short)?)
    };
    let op = get_op(r)?;
    let root = get_opt(r)?;
    let peer = get_opt(r)?;
    let send = RawBuf {
        addr: r.usize()?,
        len: r.usize()?,
    };
    let recv = RawBufMut {
        addr: r.usize()?,
        len: r.usize()?,
    };
    let counts = r.list()?;
    let recv_counts = r.list()?;
    let seq = r.u64()?;
    let index = r.u64()?;
    let fault = match r.u8()? {
        0 => None,
        1 => Some(FaultKind::Hang),
        2 => Some(FaultKind::Lose),
        _ => Some(FaultKind::Delay(Duration::from_nanos(r.u64()?))),
    };
    Ok(WireJob {
        desc: OpDesc {
            kind,
            dtype,
            op,
            root,
            peer,
            send,
            recv,
            counts,
            recv_counts,
        },
        seq,
        index,
        fault,
    })
}

impl Msg {
    /// The frame of this message (length prefix included).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = W(vec![0; 4]);
        match self {
            Msg::Hello {
                token,
                rank,
                size,
                pid,
                limit_ms,
            } => {
                w.u8(1);
                w.0.extend_from_slice(token);
                w.u32(*rank);
                w.u32(*size);
                w.u32(*pid);
                w.u64(*limit_ms);
            }
            Msg::Welcome(res) => {
                w.u8(2);
                match res {
                    Ok(pids) => {
                        w.u8(0);
                        w.u32(u32::try_from(pids.len()).unwrap_or(0));
                        for p in pids.iter().take(u32::MAX as usize) {
                            w.u32(*p);
                        }
                    }
                    Err(e) => put_error(&mut w, e),
                }
            }
            Msg::Batch {
                id,
                stream,
                seg,
                seg_len,
                jobs,
            } => {
                w.u8(3);
                w.u64(*id);
                w.u64(*stream);
                w.u64(*seg);
                w.u64(*seg_len);
                w.u32(jobs.len() as u32);
                for j in jobs {
                    put_job(&mut w, j);
                }
            }
            Msg::Done { id, result } => {
                w.u8(4);
                w.u64(*id);
                put_result(&mut w, result);
            }
            Msg::Dead { why } => {
                w.u8(5);
                w.str(why);
            }
            Msg::Forget { seg } => {
                w.u8(6);
                w.u64(*seg);
            }
            Msg::Split { seq, color, key } => {
                w.u8(7);
                w.u64(*seq);
                put_opt(&mut w, *color);
                w.u32(*key);
            }
            Msg::SplitDone { seq, result } => {
                w.u8(8);
                w.u64(*seq);
                match result {
                    Err(e) => put_error(&mut w, e),
                    Ok(None) => w.u8(0),
                    Ok(Some(c)) => {
                        w.u8(9);
                        w.u32(c.id.pid);
                        w.0.extend_from_slice(&c.id.token);
                        w.u32(c.rank);
                        w.u32(c.size);
                    }
                }
            }
            Msg::OneSided { id, call } => {
                w.u8(9);
                w.u64(*id);
                put_call(&mut w, call);
            }
            Msg::OneSidedDone { id, result } => {
                w.u8(10);
                w.u64(*id);
                put_answer(&mut w, result);
            }
        }
        let len = (w.0.len() - 4) as u32;
        w.0[..4].copy_from_slice(&len.to_le_bytes());
        w.0
    }

    /// The message of one frame's payload (without its length prefix).
    pub(crate) fn decode(p: &[u8]) -> Result<Msg> {
        let mut r = R(p);
        Ok(match r.u8()? {
            1 => {
                let mut token = [0u8; 16];
                token.copy_from_slice(r.take(16)?);
                Msg::Hello {
                    token,
                    rank: r.u32()?,
                    size: r.u32()?,
                    pid: r.u32()?,
                    limit_ms: r.u64()?,
                }
            }
            2 => Msg::Welcome(match get_result(&mut r)? {
                Ok(()) => {
                    let n = r.u32()? as usize;
                    // Four bytes a pid: a count the frame cannot hold is malformed.
                    if n > r.0.len() / 4 {
                        return Err(short());
                    }
                    (0..n)
                        .map(|_| r.u32())
                        .collect::<Result<Vec<u32>>>()
                        .map(Ok)?
                }
                Err(e) => Err(e),
            }),
            3 => {
                let id = r.u64()?;
                let stream = r.u64()?;
                let seg = r.u64()?;
                let seg_len = r.u64()?;
                let n = r.u32()? as usize;
                if n > r.0.len() {
                    return Err(short());
                }
                let jobs = (0..n)
                    .map(|_| get_job(&mut r))
                    .collect::<Result<Vec<_>>>()?;
                Msg::Batch {
                    id,
                    stream,
                    seg,
                    seg_len,
                    jobs,
                }
            }
            4 => Msg::Done {
                id: r.u64()?,
                result: get_result(&mut r)?,
            },
            5 => Msg::Dead { why: r.str()? },
            6 => Msg::Forget { seg: r.u64()? },
            7 => Msg::Split {
                seq: r.u64()?,
                color: get_opt(&mut r)?,
                key: r.u32()?,
            },
            8 => {
                let seq = r.u64()?;
                let result = match r.0.first() {
                    Some(0) => {
                        r.u8()?;
                        Ok(None)
                    }
                    Some(9) => {
                        r.u8()?;
                        let pid = r.u32()?;
                        let mut token = [0u8; 16];
                        token.copy_from_slice(r.take(16)?);
                        Ok(Some(ChildSpec {
                            id: ProcId { pid, token },
                            rank: r.u32()?,
                            size: r.u32()?,
                        }))
                    }
                    _ => Err(get_error(&mut r)?),
                };
                Msg::SplitDone { seq, result }
            }
            9 => Msg::OneSided {
                id: r.u64()?,
                call: get_call(&mut r)?,
            },
            10 => Msg::OneSidedDone {
                id: r.u64()?,
                result: get_answer(&mut r)?,
            },
            _ => return Err(short()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::{text, Error};

    #[test]
    fn batch_round_trips() {
        let desc = OpDesc {
            kind: OpKind::AllToAllV,
            dtype: Some(DataType::Bfloat16),
            op: Some(ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(0.5)))),
            root: Some(3),
            peer: None,
            send: RawBuf { addr: 64, len: 7 },
            recv: RawBufMut { addr: 128, len: 9 },
            counts: vec![1, 2, 4],
            recv_counts: vec![3, 3, 3],
        };
        let m = Msg::Batch {
            id: 9,
            stream: 4,
            seg: 2,
            seg_len: 4096,
            jobs: vec![WireJob {
                desc: desc.clone(),
                seq: 5,
                index: 6,
                fault: Some(FaultKind::Delay(Duration::from_millis(3))),
            }],
        };
        let f = m.encode();
        let Msg::Batch {
            id,
            stream,
            seg,
            seg_len,
            jobs,
        } = Msg::decode(&f[4..]).unwrap()
        else {
            panic!("not a batch")
        };
        assert_eq!((id, stream, seg, seg_len), (9, 4, 2, 4096));
        assert_eq!(jobs[0].desc, desc);
        assert_eq!((jobs[0].seq, jobs[0].index), (5, 6));
        assert_eq!(
            jobs[0].fault,
            Some(FaultKind::Delay(Duration::from_millis(3)))
        );
    }

    #[test]
    fn split_messages_round_trip() {
        let spec = ChildSpec {
            id: ProcId {
                pid: 42,
                token: [7; 16],
            },
            rank: 2,
            size: 3,
        };
        let cases = [
            Ok(Some(spec)),
            Ok(None),
            Err(Error::Remote {
                detail: text!("split 1: rank 3 exited"),
            }),
        ];
        for result in cases {
            let f = Msg::SplitDone {
                seq: 4,
                result: result.clone(),
            }
            .encode();
            let Msg::SplitDone { seq, result: got } = Msg::decode(&f[4..]).unwrap() else {
                panic!("not a split answer")
            };
            assert_eq!((seq, got), (4, result));
            for cut in 1..f.len() - 4 {
                assert!(Msg::decode(&f[4..4 + cut]).is_err(), "cut at {cut}");
            }
        }
        let f = Msg::Split {
            seq: 1,
            color: None,
            key: 9,
        }
        .encode();
        let Msg::Split { seq, color, key } = Msg::decode(&f[4..]).unwrap() else {
            panic!("not a split call")
        };
        assert_eq!((seq, color, key), (1, None, 9));
    }

    #[test]
    fn errors_round_trip_and_short_frames_fail() {
        let e = Error::Mismatch {
            what: "count",
            detail: text!("rank 0: 1, rank 1: 2"),
        };
        let f = Msg::Done {
            id: 1,
            result: Err(e.clone()),
        }
        .encode();
        let Msg::Done { result, .. } = Msg::decode(&f[4..]).unwrap() else {
            panic!()
        };
        assert_eq!(result, Err(e));
        for cut in 1..f.len() - 4 {
            assert!(Msg::decode(&f[4..4 + cut]).is_err(), "cut at {cut}");
        }
    }
}

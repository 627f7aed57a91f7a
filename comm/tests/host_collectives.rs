//! Every collective on the mock world through oxccl-comm's typed layer: `HostBuf`s handed to
//! operations as `Operand`s, element types mapped by `Element` (bool's sum as or, its product
//! as and), results read back by download on every rank. A rank per thread, as the process
//! group drives them.

use half::bf16;
use oxccl_comm::buffer::{HostBuf, Memory, Operand};
use oxccl_comm::element::host_op;
use oxccl_comm::mock::{MockBackend, MockComm, MockStream, World};
use oxccl_comm::{
    CommOp, Communicator, Element, Error, HostScalar, RawBuf, RawBufMut, ReduceOp, Result, Scalar,
};
use std::time::{Duration, Instant};

/// A rank on its thread: its communicator and stream.
struct Rank {
    comm: MockComm,
    stream: MockStream,
    mock: MockBackend,
}

impl Rank {
    fn r(&self) -> u32 {
        self.comm.rank()
    }

    fn n(&self) -> u32 {
        self.comm.size()
    }

    fn up<T: Element>(&self, v: &[T]) -> HostBuf<T> {
        self.mock.upload(&self.stream, v).unwrap()
    }

    fn zeros<T: Element>(&self, len: usize) -> HostBuf<T> {
        self.mock.alloc_zeros(&self.stream, len).unwrap()
    }

    fn down<T: Element>(&self, b: &HostBuf<T>) -> Vec<T> {
        self.mock.download(&self.stream, b).unwrap()
    }

    /// Issues what `op` makes of `send` (read) and `recv` (written); their accesses end with
    /// the issue, as outside a group they may.
    fn run<'c, T: Element>(
        &self,
        send: Option<&HostBuf<T>>,
        recv: Option<&mut HostBuf<T>>,
        op: impl FnOnce(RawBuf, RawBufMut) -> CommOp<'c>,
    ) -> Result<()> {
        let dev = self.comm.device();
        let (s, _read) = match send {
            Some(b) => {
                let (s, a) = b.read("send", dev, &self.stream)?;
                (s, Some(a))
            }
            None => (RawBuf::EMPTY, None),
        };
        let (r, _write) = match recv {
            Some(b) => {
                let (r, a) = b.write("recv", dev, &self.stream)?;
                (r, Some(a))
            }
            None => (RawBufMut::EMPTY, None),
        };
        // SAFETY: host memory of the stated lengths, kept alive on the stream by the accesses
        // until the queued work has run.
        unsafe { self.comm.issue(&op(s, r), &self.stream) }
    }

    /// All-reduce of `send` into a new buffer under `op` (as `Element` maps it for `T`).
    fn all_reduce<T: Element>(&self, send: &[T], op: ReduceOp) -> Result<Vec<T>> {
        let s = self.up(send);
        let mut r = self.zeros::<T>(send.len());
        let op = host_op::<T>(op)?;
        self.run(Some(&s), Some(&mut r), |s, r| {
            CommOp::all_reduce(s, r, T::DTYPE, op)
        })?;
        Ok(self.down(&r))
    }
}

/// Runs `body` on each of `n` ranks, one thread each.
fn on_ranks<T: Send>(n: u32, body: impl Fn(&Rank) -> T + Sync) -> Vec<T> {
    let comms = World::new(n).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|comm| {
                let body = &body;
                s.spawn(move || {
                    let rank = Rank {
                        stream: comm.new_stream().unwrap(),
                        comm,
                        mock: MockBackend::new(),
                    };
                    body(&rank)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn all_reduce_gives_each_operator_s_result_on_every_rank() {
    on_ranks(4, |k| {
        let (r, n) = (k.r() as f32, k.n() as f32);
        let x = [r + 1.0, -(r + 1.0)];
        assert_eq!(k.all_reduce(&x, ReduceOp::Sum).unwrap(), [10.0, -10.0]);
        assert_eq!(k.all_reduce(&x, ReduceOp::Prod).unwrap(), [24.0, 24.0]);
        assert_eq!(k.all_reduce(&x, ReduceOp::Min).unwrap(), [1.0, -4.0]);
        assert_eq!(k.all_reduce(&x, ReduceOp::Max).unwrap(), [4.0, -1.0]);
        assert_eq!(k.all_reduce(&x, ReduceOp::Avg).unwrap(), [2.5, -2.5]);
        let half = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(0.5)));
        assert_eq!(k.all_reduce(&x, half).unwrap(), [5.0, -5.0]);
        let i = [i64::from(k.r()) * 1_000_000_000_000];
        assert_eq!(
            k.all_reduce(&i, ReduceOp::Sum).unwrap(),
            [6_000_000_000_000]
        );
        let b = [bf16::from_f32(r + 0.5)];
        assert_eq!(
            k.all_reduce(&b, ReduceOp::Max).unwrap(),
            [bf16::from_f32(n - 0.5)]
        );
    });
}

/// bool travels as uint8: sum is or, prod is and, avg is refused before any rank issues.
#[test]
fn bools_reduce_as_logical_or_and_and() {
    on_ranks(3, |k| {
        let x = [k.r() == 1, true, false];
        assert_eq!(
            k.all_reduce(&x, ReduceOp::Sum).unwrap(),
            [true, true, false]
        );
        assert_eq!(
            k.all_reduce(&x, ReduceOp::Prod).unwrap(),
            [false, true, false]
        );
        assert_eq!(
            k.all_reduce(&x, ReduceOp::Max).unwrap(),
            [true, true, false]
        );
        match k.all_reduce(&x, ReduceOp::Avg) {
            Err(Error::InvalidArgument { arg: "op", .. }) => {}
            other => panic!("{other:?}"),
        }
        // A device premul-sum factor is refused by the typed layer on any type.
        let dev = ReduceOp::PreMulSum(Scalar::Device { addr: 0x100 });
        match k.all_reduce(&[1.0f32], dev) {
            Err(Error::InvalidArgument { arg: "op", .. }) => {}
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn in_place_operations_read_and_write_one_buffer() {
    on_ranks(3, |k| {
        let r = k.r();
        let mut b = k.up(&[r + 1; 4]);
        k.run::<u32>(None, Some(&mut b), |_, b| {
            CommOp::all_reduce_in_place(b, u32::DTYPE, ReduceOp::Sum)
        })
        .unwrap();
        assert_eq!(k.down(&b), [6; 4]);
        let mut b = k.up(&[r as i8 - 1; 2]);
        k.run::<i8>(None, Some(&mut b), |_, b| {
            CommOp::broadcast_in_place(b, i8::DTYPE, 2)
        })
        .unwrap();
        assert_eq!(k.down(&b), [1; 2]);
    });
}

#[test]
fn rooted_operations_reach_and_leave_their_root() {
    on_ranks(3, |k| {
        let (r, n) = (k.r(), k.n() as usize);
        let root = 1;
        // Broadcast from the root.
        let s = k.up(&[r as f64 * 1.5; 3]);
        let mut d = k.zeros::<f64>(3);
        k.run(Some(&s), Some(&mut d), |s, d| {
            CommOp::broadcast(s, d, f64::DTYPE, root)
        })
        .unwrap();
        assert_eq!(k.down(&d), [1.5; 3]);
        // Reduce to the root; elsewhere no output.
        let s = k.up(&[i32::try_from(r).unwrap() + 1; 2]);
        if r == root {
            let mut d = k.zeros::<i32>(2);
            k.run(Some(&s), Some(&mut d), |s, d| {
                CommOp::reduce(s, d, i32::DTYPE, ReduceOp::Prod, root)
            })
            .unwrap();
            assert_eq!(k.down(&d), [6; 2]);
        } else {
            k.run::<i32>(Some(&s), None, |s, d| {
                CommOp::reduce(s, d, i32::DTYPE, ReduceOp::Prod, root)
            })
            .unwrap();
        }
        // Gather to the root, scatter from it.
        let s = k.up(&[r as u8 + 7; 2]);
        if r == root {
            let mut all = k.zeros::<u8>(2 * n);
            k.run(Some(&s), Some(&mut all), |s, d| {
                CommOp::gather(s, d, u8::DTYPE, root)
            })
            .unwrap();
            assert_eq!(k.down(&all), [7, 7, 8, 8, 9, 9]);
            let parts = k.up(&[30u8, 30, 31, 31, 32, 32]);
            let mut mine = k.zeros::<u8>(2);
            k.run(Some(&parts), Some(&mut mine), |s, d| {
                CommOp::scatter(s, d, u8::DTYPE, root)
            })
            .unwrap();
            assert_eq!(k.down(&mine), [31; 2]);
        } else {
            k.run::<u8>(Some(&s), None, |s, d| CommOp::gather(s, d, u8::DTYPE, root))
                .unwrap();
            let mut mine = k.zeros::<u8>(2);
            k.run::<u8>(None, Some(&mut mine), |s, d| {
                CommOp::scatter(s, d, u8::DTYPE, root)
            })
            .unwrap();
            assert_eq!(k.down(&mine), [30 + r as u8; 2]);
        }
    });
}

#[test]
fn gathers_scatters_and_all_to_alls_place_each_rank_s_part() {
    on_ranks(3, |k| {
        let (r, n) = (k.r(), k.n() as usize);
        let s = k.up(&[u64::from(r) + 1; 2]);
        let mut all = k.zeros::<u64>(2 * n);
        k.run(Some(&s), Some(&mut all), |s, d| {
            CommOp::all_gather(s, d, u64::DTYPE)
        })
        .unwrap();
        assert_eq!(k.down(&all), [1, 1, 2, 2, 3, 3]);
        // Reduce-scatter: element j of rank r's whole is r * 10 + j; rank r keeps part r.
        let whole: Vec<i64> = (0..2 * n as i64).map(|j| i64::from(r) * 10 + j).collect();
        let s = k.up(&whole);
        let mut part = k.zeros::<i64>(2);
        k.run(Some(&s), Some(&mut part), |s, d| {
            CommOp::reduce_scatter(s, d, i64::DTYPE, ReduceOp::Sum)
        })
        .unwrap();
        let base = 2 * i64::from(r);
        assert_eq!(k.down(&part), [30 + 3 * base, 30 + 3 * (base + 1)]);
        // All-to-all: part p of rank r (one element) holds 10 r + p.
        let s = k.up(&(0..3).map(|p| 10 * r + p).collect::<Vec<u32>>());
        let mut d = k.zeros::<u32>(3);
        k.run(Some(&s), Some(&mut d), |s, d| {
            CommOp::all_to_all(s, d, u32::DTYPE)
        })
        .unwrap();
        assert_eq!(k.down(&d), (0..3).map(|q| 10 * q + r).collect::<Vec<_>>());
        // Uneven: rank r sends p + 1 elements to rank p, receives r + 1 from each.
        let send_counts = [1, 2, 3];
        let recv_counts = [r as usize + 1; 3];
        let s = k.up(&(0..3u32)
            .flat_map(|p| vec![10 * r + p; p as usize + 1])
            .collect::<Vec<_>>());
        let mut d = k.zeros::<u32>(3 * (r as usize + 1));
        k.run(Some(&s), Some(&mut d), |s, d| {
            CommOp::all_to_all_v(s, d, u32::DTYPE, &send_counts, &recv_counts)
        })
        .unwrap();
        let want: Vec<u32> = (0..3)
            .flat_map(|q| vec![10 * q + r; r as usize + 1])
            .collect();
        assert_eq!(k.down(&d), want);
    });
}

/// Typed buffers of different element types on two ranks are one operation the ranks
/// disagree on: each rank is told, naming the types, instead of a hang.
#[test]
fn ranks_that_pass_different_element_types_are_told_on_every_rank() {
    let errs = on_ranks(2, |k| {
        let issued = if k.r() == 0 {
            let s = k.up(&[1.0f32; 4]);
            let mut d = k.zeros::<f32>(4);
            k.run(Some(&s), Some(&mut d), |s, d| {
                CommOp::all_reduce(s, d, f32::DTYPE, ReduceOp::Sum)
            })
        } else {
            let s = k.up(&[1i32; 4]);
            let mut d = k.zeros::<i32>(4);
            k.run(Some(&s), Some(&mut d), |s, d| {
                CommOp::all_reduce(s, d, i32::DTYPE, ReduceOp::Sum)
            })
        };
        issued.unwrap();
        let began = Instant::now();
        loop {
            if let Err(e) = k.comm.poll() {
                break e;
            }
            assert!(began.elapsed() < Duration::from_secs(5), "no error seen");
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    for e in errs {
        match e {
            Error::Mismatch {
                what: "dtype",
                detail,
            } => {
                assert!(
                    detail.contains("float32") && detail.contains("int32"),
                    "{detail}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}

//! The mock world's memory as oxccl-comm gives it: `HostBuf` through the `Memory` and
//! `Operand` traits. A buffer is reached only through streams, each use waits for the one
//! before (on any stream), a download waits for the work that writes the buffer, and memory
//! dropped while queued work still uses it lives until that work ran.

use half::{bf16, f16};
use oxccl_comm::buffer::{Buffer, HostBuf, Memory, Operand};
use oxccl_comm::element::host_op;
use oxccl_comm::mock::{MockBackend, MockComm, MockStream, World};
use oxccl_comm::{
    CommOp, Communicator, Device, Element, Error, Feature, FeatureSet, Missing, ReduceOp, Result,
    Version,
};
use std::fmt::Debug;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn one_rank() -> MockComm {
    World::new(1).unwrap().pop().unwrap()
}

/// An all-reduce of `send` into `recv` on `stream`, the buffers taken as the process group
/// takes them: read and write accesses held across the issue.
fn all_reduce<T: Element>(
    c: &MockComm,
    stream: &MockStream,
    send: &HostBuf<T>,
    recv: &mut HostBuf<T>,
    op: ReduceOp,
) -> Result<()> {
    let (s, _read) = send.read("send", c.device(), stream)?;
    let (r, _write) = recv.write("recv", c.device(), stream)?;
    let op = CommOp::all_reduce(s, r, T::DTYPE, host_op::<T>(op)?);
    // SAFETY: both buffers are host memory of their stated lengths, kept alive on the stream
    // by their accesses until the queued work has run.
    unsafe { c.issue(&op, stream) }
}

/// Holds `stream` until the returned sender sends (or is dropped).
fn gate(stream: &MockStream) -> mpsc::Sender<()> {
    let (open, wait) = mpsc::channel::<()>();
    stream
        .host_fn(move || {
            let _ = wait.recv();
        })
        .unwrap();
    open
}

/// Opens `gate` after a while, from another thread: a download that does not wait for the
/// gated work returns before then, with the old contents.
fn open_later(gate: mpsc::Sender<()>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let _ = gate.send(());
    })
}

fn round_trip<T: Element + PartialEq + Debug>(values: &[T]) {
    let mock = MockBackend::new();
    let st = mock.stream(Device(0)).unwrap();
    let buf = mock.upload(&st, values).unwrap();
    assert_eq!(
        (buf.len(), buf.is_empty()),
        (values.len(), values.is_empty())
    );
    assert!(!buf.is_comm());
    assert!(
        buf.comm_mem().is_none(),
        "a plain buffer has no allocation identity"
    );
    assert_eq!(mock.download(&st, &buf).unwrap(), values);
}

#[test]
fn every_element_type_uploads_and_downloads_unchanged() {
    round_trip(&[1.5f32, -0.0, f32::MAX]);
    round_trip(&[2.25f64, f64::MIN_POSITIVE]);
    round_trip(&[-128i8, 0, 127]);
    round_trip(&[0u8, 255]);
    round_trip(&[i32::MIN, 7]);
    round_trip(&[u64::MAX, 1]);
    round_trip(&[bf16::from_f32(3.5), bf16::MIN]);
    round_trip(&[f16::from_f32(-2.0), f16::MAX]);
    round_trip(&[true, false, true]);
    round_trip(&[
        float8::F8E5M2::from_f32(1.5),
        float8::F8E5M2::from_f32(-4.0),
    ]);
    round_trip::<i64>(&[]);
}

#[test]
fn zeros_are_zero_in_every_type() {
    let mock = MockBackend::new();
    let st = MockStream::new().unwrap();
    assert_eq!(
        mock.download(&st, &mock.alloc_zeros::<f64>(&st, 3).unwrap())
            .unwrap(),
        [0.0; 3]
    );
    assert_eq!(
        mock.download(&st, &mock.alloc_zeros::<i32>(&st, 2).unwrap())
            .unwrap(),
        [0; 2]
    );
    assert_eq!(
        mock.download(&st, &mock.alloc_zeros::<bool>(&st, 2).unwrap())
            .unwrap(),
        [false; 2]
    );
    assert_eq!(
        mock.download(&st, &mock.alloc_zeros::<bf16>(&st, 1).unwrap())
            .unwrap(),
        [bf16::ZERO]
    );
    assert!(mock.alloc_zeros::<u8>(&st, 0).unwrap().is_empty());
}

#[test]
fn a_download_waits_for_the_operation_that_writes_the_buffer() {
    let c = one_rank();
    let mock = MockBackend::new();
    let st = c.new_stream().unwrap();
    let send = mock.upload(&st, &[4.0f32, 5.0]).unwrap();
    let mut recv = mock.alloc_zeros::<f32>(&st, 2).unwrap();
    let opener = open_later(gate(&st));
    all_reduce(&c, &st, &send, &mut recv, ReduceOp::Sum).unwrap();
    assert_eq!(mock.download(&st, &recv).unwrap(), [4.0, 5.0]);
    opener.join().unwrap();
}

/// A use on another stream waits for the last use on the first: the second operation reads
/// what the first wrote, though the first was held back.
#[test]
fn a_use_on_another_stream_waits_for_the_last_use() {
    let c = one_rank();
    let mock = MockBackend::new();
    let (a, b) = (c.new_stream().unwrap(), c.new_stream().unwrap());
    let x = mock.upload(&a, &[7i64; 3]).unwrap();
    let mut mid = mock.alloc_zeros::<i64>(&a, 3).unwrap();
    let mut out = mock.alloc_zeros::<i64>(&b, 3).unwrap();
    let opener = open_later(gate(&a));
    all_reduce(&c, &a, &x, &mut mid, ReduceOp::Max).unwrap();
    all_reduce(&c, &b, &mid, &mut out, ReduceOp::Max).unwrap();
    assert_eq!(mock.download(&b, &out).unwrap(), [7; 3]);
    opener.join().unwrap();
}

/// A buffer dropped right after the issue of the operation that reads it: its allocation is
/// held by the stream (not idle) until that operation ran, and the operation read its values.
#[test]
fn memory_dropped_while_queued_work_uses_it_lives_until_that_work_ran() {
    let c = one_rank();
    let mock = MockBackend::new();
    let st = c.new_stream().unwrap();
    let send = mock.upload_comm(&st, &[3u32, 1, 4]).unwrap();
    let mem = send
        .comm_mem()
        .expect("an allocation of the library's kind");
    let mut recv = mock.alloc_zeros::<u32>(&st, 3).unwrap();
    let open = gate(&st);
    all_reduce(&c, &st, &send, &mut recv, ReduceOp::Sum).unwrap();
    drop(send);
    assert!(
        !mem.keep.idle(),
        "the queued operation still holds the memory"
    );
    open.send(()).unwrap();
    assert_eq!(mock.download(&st, &recv).unwrap(), [3, 1, 4]);
    let began = Instant::now();
    while !mem.keep.idle() {
        assert!(began.elapsed() < Duration::from_secs(10), "never idle");
        std::thread::yield_now();
    }
}

#[test]
fn the_library_s_allocator_gives_distinct_allocations_and_refuses_empty_ones() {
    let mock = MockBackend::new();
    let st = MockStream::new().unwrap();
    let a = mock.alloc_comm::<f32>(&st, 4).unwrap();
    let b = mock.upload_comm(&st, &[1.0f32, 2.0]).unwrap();
    assert!(a.is_comm() && b.is_comm());
    let (ma, mb) = (a.comm_mem().unwrap(), b.comm_mem().unwrap());
    assert_ne!(ma.id, mb.id);
    assert_eq!((ma.bytes, mb.bytes), (16, 8));
    assert_eq!(Operand::<MockBackend>::numel(&b), 2);
    assert_eq!(b.download(&mock, &st).unwrap(), [1.0, 2.0]);
    match mock.alloc_comm::<f32>(&st, 0) {
        Err(Error::InvalidArgument { arg: "len", .. }) => {}
        other => panic!("{other:?}"),
    }
    match mock.upload_comm::<f32>(&st, &[]) {
        Err(Error::InvalidArgument { arg: "data", .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// A release before NCCL's allocator (2.19) has plain buffers only.
#[test]
fn a_release_without_the_allocator_refuses_its_buffers() {
    let old = Version::new(2, 18, 3);
    let mock = MockBackend::with_options(
        FeatureSet::for_version(old),
        Default::default(),
        1,
        Duration::from_secs(5),
    );
    let st = MockStream::new().unwrap();
    let want = Missing::TooOld {
        need: Feature::MemAlloc.since(),
        have: old,
    };
    for r in [
        mock.alloc_comm::<i32>(&st, 2).map(drop),
        mock.upload_comm(&st, &[1i32]).map(drop),
    ] {
        match r {
            Err(Error::Unsupported {
                feature: Feature::MemAlloc,
                missing,
            }) => assert_eq!(missing, want),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(mock.upload(&st, &[1i32]).unwrap().len(), 1);
}

#[test]
fn has_nan_looks_at_float_types_only() {
    let mock = MockBackend::new();
    let st = MockStream::new().unwrap();
    assert!(mock
        .has_nan(&st, &mock.upload(&st, &[1.0f32, f32::NAN]).unwrap())
        .unwrap());
    assert!(!mock
        .has_nan(&st, &mock.upload(&st, &[1.0f32, f32::INFINITY]).unwrap())
        .unwrap());
    assert!(mock
        .has_nan(&st, &mock.upload(&st, &[bf16::NAN]).unwrap())
        .unwrap());
    assert!(mock
        .has_nan(&st, &mock.upload(&st, &[f64::NAN]).unwrap())
        .unwrap());
    // Integers have no NaN, whatever their bits.
    assert!(!mock
        .has_nan(&st, &mock.upload(&st, &[u32::MAX]).unwrap())
        .unwrap());
}

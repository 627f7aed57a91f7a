//! The mock's registrations and symmetric windows: recorded per rank, refused as NCCL's
//! registry refuses them, gated by the version the world imitates, and released.

use oxccl_core::Windows;
use oxccl_core::{
    CommOp, Communicator, DataType, Error, Feature, FeatureSet, RawBuf, RawBufMut, Stream, Version,
};
use oxccl_mock::World;

#[test]
fn windows_are_recorded_released_and_refused_twice() {
    let comms = World::new(2).unwrap();
    let c = &comms[0];
    let buf = [0u8; 64];
    let addr = buf.as_ptr() as usize;
    let w = c.register_window(addr, 64).unwrap();
    assert_eq!((w.addr, w.bytes), (addr, 64));
    assert_eq!(c.windows(), vec![w]);
    assert_eq!(c.windows_made(), 1);
    // Rank 1 has none: windows are per rank.
    assert!(comms[1].windows().is_empty());
    // The same address twice is refused, naming the argument.
    assert!(matches!(
        c.register_window(addr, 64),
        Err(Error::InvalidArgument { arg: "addr", .. })
    ));
    assert!(matches!(
        c.register_window(0, 8),
        Err(Error::InvalidArgument { arg: "addr", .. })
    ));
    // A local registration of the same memory is another record, with another handle.
    let h = c.register(addr, 64).unwrap();
    assert_ne!(h.raw, w.raw);
    assert_eq!(c.registrations(), vec![h]);
    assert_eq!(c.registrations_made(), 1);
    c.deregister_window(w).unwrap();
    assert!(c.windows().is_empty());
    assert_eq!(c.windows_made(), 1, "made counts every window ever made");
    assert!(matches!(
        c.deregister_window(w),
        Err(Error::InvalidArgument { arg: "handle", .. })
    ));
    c.deregister(h).unwrap();
    assert!(c.registrations().is_empty());
}

#[test]
fn windows_need_2_27() {
    let comms = World::builder(1)
        .features(FeatureSet::for_version(Version::new(2, 26, 6)))
        .build()
        .unwrap();
    let buf = [0u8; 8];
    match comms[0].register_window(buf.as_ptr() as usize, 8) {
        Err(Error::Unsupported { feature, .. }) => {
            assert_eq!(feature, Feature::WindowRegistration);
        }
        other => panic!("expected Unsupported(WindowRegistration), got {other:?}"),
    }
    // Local registration is older (2.19) and still works there.
    assert!(comms[0].register(buf.as_ptr() as usize, 8).is_ok());
}

/// An operation whose buffers mix a window with plain memory is refused before it is queued,
/// naming the plain one, as the NCCL backend refuses it; all in windows (or none) runs.
#[test]
fn a_window_beside_plain_memory_is_refused_naming_the_plain_buffer() {
    let comms = World::new(1).unwrap();
    let c = &comms[0];
    let st = c.new_stream().unwrap();
    // Written by the mock's stream task through these addresses: mutable, and read only
    // after the stream is synchronized.
    let (mut a, mut b, mut d) = ([1.0f32; 4], [0.0f32; 4], [0.0f32; 4]);
    let addr = |x: &mut [f32; 4]| x.as_mut_ptr() as usize;
    let (a, b, d_at) = (addr(&mut a), addr(&mut b), addr(&mut d));
    c.register_window(a, 16).unwrap();
    let a2a = |send: usize, recv: usize| CommOp::AllToAll {
        send: RawBuf::new(send, 4),
        recv: RawBufMut::new(recv, 4),
        dtype: DataType::Float32,
    };
    // SAFETY: refused before anything is queued: no buffer is touched.
    match unsafe { c.issue(&a2a(a, b), &st) } {
        Err(Error::InvalidArgument { arg, expected }) => {
            assert_eq!(arg, "recv");
            assert!(expected.contains("window"), "{expected}");
        }
        other => panic!("expected recv refused, got {other:?}"),
    }
    // The plain one as send: named too.
    assert!(matches!(
        // SAFETY: refused before anything is queued, as above.
        unsafe { c.issue(&a2a(b, a), &st) },
        Err(Error::InvalidArgument { arg: "send", .. })
    ));
    // Neither in a window: runs (one rank: a copy).
    // SAFETY: both arrays outlive the stream synchronize below and are not touched meanwhile.
    unsafe { c.issue(&a2a(b, d_at), &st) }.unwrap();
    st.synchronize().unwrap();
    c.register_window(d_at, 16).unwrap();
    // Both in windows: runs, and the values arrive.
    // SAFETY: as above.
    unsafe { c.issue(&a2a(a, d_at), &st) }.unwrap();
    st.synchronize().unwrap();
    assert_eq!(d, [1.0f32; 4]);
}

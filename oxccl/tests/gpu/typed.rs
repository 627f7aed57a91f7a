//! The typed safe API (`Comm::all_reduce` and friends on cudarc slices).

use super::devbuf::Tally;
use oxccl::{Comm, DataType, ReduceOp};

/// The typed safe API on f32 slices.
pub fn typed(c: &mut Comm, t: &mut Tally) {
    let (n, r) = (c.size(), c.rank());
    let st = c.stream().clone();
    let mine: Vec<f32> = (0..33).map(|i| (r * 100 + i) as f32).collect();
    let send = st.clone_htod(&mine).expect("upload");
    let mut recv = st.alloc_zeros::<f32>(33).expect("alloc");
    let sum: Vec<f64> = (0..33)
        .map(|i| (0..n).map(|q| f64::from(q * 100 + i)).sum())
        .collect();
    match c
        .all_reduce(&send, &mut recv, ReduceOp::Sum)
        .and_then(|_| c.synchronize())
    {
        Ok(()) => t.check(
            "typed all_reduce f32",
            &st.clone_dtoh(&recv)
                .unwrap()
                .iter()
                .map(|x| *x as f64)
                .collect::<Vec<_>>(),
            &sum,
            DataType::Float32,
        ),
        Err(e) => t.error("typed all_reduce f32", e),
    }
    let mut whole = st.alloc_zeros::<f32>(33 * n as usize).expect("alloc");
    let want: Vec<f64> = (0..n)
        .flat_map(|q| (0..33).map(move |i| f64::from(q * 100 + i)))
        .collect();
    match c
        .all_gather(&send, &mut whole)
        .and_then(|_| c.synchronize())
    {
        Ok(()) => t.check(
            "typed all_gather f32",
            &st.clone_dtoh(&whole)
                .unwrap()
                .iter()
                .map(|x| *x as f64)
                .collect::<Vec<_>>(),
            &want,
            DataType::Float32,
        ),
        Err(e) => t.error("typed all_gather f32", e),
    }
    let mut b = st.clone_htod(&mine).expect("upload");
    let from0: Vec<f64> = (0..33).map(f64::from).collect();
    match c
        .broadcast_in_place(&mut b, 0)
        .and_then(|_| c.synchronize())
    {
        Ok(()) => t.check(
            "typed broadcast_in_place f32",
            &st.clone_dtoh(&b)
                .unwrap()
                .iter()
                .map(|x| *x as f64)
                .collect::<Vec<_>>(),
            &from0,
            DataType::Float32,
        ),
        Err(e) => t.error("typed broadcast_in_place f32", e),
    }
    // premul-sum with the factor in device memory, through the safe API; a raw device address
    // is refused there
    let factor = st.clone_htod(&[2.0f32]).expect("upload");
    let mut scaled = st.alloc_zeros::<f32>(33).expect("alloc");
    let twice: Vec<f64> = sum.iter().map(|x| 2.0 * x).collect();
    match c
        .all_reduce_premul_device(&send, &mut scaled, &factor)
        .and_then(|_| c.synchronize())
    {
        Ok(()) => t.check(
            "typed all_reduce_premul_device f32",
            &st.clone_dtoh(&scaled)
                .unwrap()
                .iter()
                .map(|x| *x as f64)
                .collect::<Vec<_>>(),
            &twice,
            DataType::Float32,
        ),
        Err(e) => t.error("typed all_reduce_premul_device f32", e),
    }
    let raw = oxccl::ReduceOp::PreMulSum(oxccl::Scalar::Device { addr: 0x1000 });
    match c.all_reduce(&send, &mut scaled, raw) {
        Err(oxccl::Error::InvalidArgument { arg: "op", .. }) => t.passed += 1,
        other => t.failed.push(format!(
            "safe raw device factor: expected InvalidArgument(op), got {other:?}"
        )),
    }
    // a wrong length is refused before NCCL with the argument named
    let mut short = st.alloc_zeros::<f32>(32).expect("alloc");
    match c.all_reduce(&send, &mut short, ReduceOp::Sum) {
        Err(oxccl::Error::InvalidArgument { arg: "recv", .. }) => t.passed += 1,
        other => t.failed.push(format!(
            "typed short recv: expected InvalidArgument(recv), got {other:?}"
        )),
    }
    // bool travels as uint8 with sum as max
    let flags: Vec<bool> = (0..5).map(|i| (i + r) % 2 == 0).collect();
    let fb = st.clone_htod(&flags).expect("upload");
    let mut orb = st.alloc_zeros::<bool>(5).expect("alloc");
    let any: Vec<f64> = (0..5)
        .map(|i| f64::from(u8::from((0..n).any(|q| (i + q) % 2 == 0))))
        .collect();
    match c
        .all_reduce(&fb, &mut orb, ReduceOp::Sum)
        .and_then(|_| c.synchronize())
    {
        Ok(()) => t.check(
            "typed all_reduce bool",
            &st.clone_dtoh(&orb)
                .unwrap()
                .iter()
                .map(|x| f64::from(u8::from(*x)))
                .collect::<Vec<_>>(),
            &any,
            DataType::Uint8,
        ),
        Err(e) => t.error("typed all_reduce bool", e),
    }
}

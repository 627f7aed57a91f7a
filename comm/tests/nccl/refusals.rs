//! What `Comm` refuses before NCCL sees it, with the error variant and the argument named: wrong
//! lengths, roots and peers outside the communicator, operators the type lacks, features the
//! library lacks, split colors NCCL cannot take, and everything after an abort. A refused call
//! reaches no rank's library, so the ranks stay in step and the communicator stays usable.

use super::{down, gpus, nccl, on_gpus, on_gpus_with, refused_arg, up, zeros};
use cudarc::driver::CudaSlice;
use oxccl_comm::{CommConfig, CommState, Error, Feature, HostScalar, Missing, ReduceOp, Scalar};

#[test]
fn wrong_lengths_name_the_buffer_at_fault() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let nu = n as usize;
        let four = up(&c, &[1.0f32; 4]);
        let mut three = zeros::<f32>(&c, 3);
        refused_arg(c.all_reduce(&four, &mut three, ReduceOp::Sum), "recv");
        let mut one_more = zeros::<f32>(&c, 4 * nu + 1);
        refused_arg(c.all_gather(&four, &mut one_more), "recv");
        refused_arg(
            c.reduce_scatter(&one_more, &mut three, ReduceOp::Sum),
            "send",
        );
        refused_arg(c.all_to_all(&four, &mut three), "recv");
        // The counts: one per rank, summing to the buffer lengths.
        let mut four_out = zeros::<f32>(&c, 4);
        let mut per_rank = vec![0; nu];
        per_rank[0] = 4;
        let too_many = vec![0; nu + 1];
        refused_arg(
            c.all_to_all_v(&four, &mut four_out, &too_many, &per_rank),
            "send_counts",
        );
        let mut short = per_rank.clone();
        short[0] = 3;
        refused_arg(
            c.all_to_all_v(&four, &mut four_out, &per_rank, &short),
            "recv_counts",
        );
        refused_arg(c.all_gather_v(&four, &mut four_out, &too_many), "counts");
        // Rooted: the root's buffers are whole, the others' empty.
        if r == 0 {
            refused_arg(
                c.reduce::<f32, CudaSlice<f32>>(&four, None, ReduceOp::Sum, 0),
                "recv",
            );
            refused_arg(c.broadcast(&four, &mut three, 0), "send");
            refused_arg(c.gather(&four, Some(&mut three), 0), "recv");
            refused_arg(
                c.scatter::<f32, CudaSlice<f32>>(None, &mut three, 0),
                "send",
            );
        } else {
            // A careless caller hands a buffer to a rank that is not the root.
            refused_arg(c.gather(&four, Some(&mut one_more), 0), "recv");
            refused_arg(c.scatter(Some(&one_more), &mut four_out, 0), "send");
        }
        let no_factor = zeros::<f32>(&c, 0);
        refused_arg(
            c.all_reduce_premul_device(&four, &mut four_out, &no_factor),
            "factor",
        );
        // Nothing reached NCCL: the ranks are still in step.
        c.all_reduce(&four, &mut four_out, ReduceOp::Sum).unwrap();
        assert_eq!(down(&c, &four_out), [n as f32; 4]);
        c.destroy().unwrap();
    });
}

#[test]
fn a_root_or_peer_outside_the_communicator_is_refused() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let x = up(&c, &[1i32; 2]);
        let mut y = zeros::<i32>(&c, 2);
        for bad in [n, n + 1, u32::MAX] {
            refused_arg(c.broadcast(&x, &mut y, bad), "root");
            refused_arg(c.broadcast_in_place(&mut y, bad), "root");
            refused_arg(c.reduce(&x, Some(&mut y), ReduceOp::Sum, bad), "root");
            refused_arg(c.gather(&x, Some(&mut y), bad), "root");
            refused_arg(c.scatter(Some(&x), &mut y, bad), "root");
            refused_arg(c.send(&x, bad), "peer");
            refused_arg(c.recv(&mut y, bad), "peer");
        }
        c.barrier().unwrap();
        c.destroy().unwrap();
    });
}

#[test]
fn operators_the_element_type_lacks_are_refused() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let b = up(&c, &[true]);
        let mut bo = zeros::<bool>(&c, 1);
        refused_arg(c.all_reduce(&b, &mut bo, ReduceOp::Avg), "op");
        let twice = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(2.0)));
        refused_arg(c.all_reduce_in_place(&mut bo, twice), "op");
        let i = up(&c, &[1i32; 2]);
        let mut io = zeros::<i32>(&c, 2);
        refused_arg(c.all_reduce(&i, &mut io, twice), "op");
        // A premul-sum factor of another type than the buffer's.
        let f = up(&c, &[1.0f32; 2]);
        let mut fo = zeros::<f32>(&c, 2);
        let wide = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F64(2.0)));
        refused_arg(c.all_reduce(&f, &mut fo, wide), "scalar");
        // A raw device address as factor: safe code cannot vouch for it.
        let raw = ReduceOp::PreMulSum(Scalar::Device { addr: 0x1000 });
        refused_arg(c.all_reduce(&f, &mut fo, raw), "op");
        refused_arg(c.reduce_scatter(&f, &mut fo, raw), "op");
        c.barrier().unwrap();
        c.destroy().unwrap();
    });
}

/// A library without a feature refuses the call that needs it, naming the feature, instead of
/// reaching a symbol it may not have.
#[test]
fn features_the_library_lacks_are_refused_with_the_feature() {
    let Some(n) = gpus() else { return };
    let lib = nccl()
        .without(Feature::Avg)
        .without(Feature::PreMulSum)
        .without(Feature::Split)
        .without(Feature::BufferRegistration);
    on_gpus_with(lib, n, move |_, mut c| {
        let x = up(&c, &[1.0f32; 2]);
        let mut y = zeros::<f32>(&c, 2);
        let lacks = |r: oxccl_comm::Result<()>, want: Feature| match r {
            Err(Error::Unsupported {
                feature,
                missing: Missing::Disabled,
            }) if feature == want => {}
            other => panic!("expected {want} unsupported, got {other:?}"),
        };
        lacks(c.all_reduce(&x, &mut y, ReduceOp::Avg), Feature::Avg);
        let twice = ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(2.0)));
        lacks(c.all_reduce(&x, &mut y, twice), Feature::PreMulSum);
        lacks(
            c.split(Some(0), 0, &CommConfig::new()).map(drop),
            Feature::Split,
        );
        lacks(c.register(&x).map(drop), Feature::BufferRegistration);
        c.all_reduce(&x, &mut y, ReduceOp::Sum).unwrap();
        assert_eq!(down(&c, &y), [n as f32; 2]);
        c.destroy().unwrap();
    });
}

#[test]
fn split_takes_colors_and_keys_up_to_i32_max_and_groups_by_color() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let cfg = CommConfig::new();
        refused_arg(c.split(Some(1 << 31), 0, &cfg), "color");
        refused_arg(c.split(Some(0), u32::MAX, &cfg), "key");
        // By parity, keys reversed: the child's ranks follow the keys.
        let mut child = c.split(Some(r % 2), n - r, &cfg).unwrap().expect("member");
        let members: Vec<u32> = (0..n).filter(|q| q % 2 == r % 2).collect();
        assert_eq!(child.size() as usize, members.len());
        let pos = members.iter().rev().position(|q| *q == r).unwrap();
        assert_eq!(child.rank() as usize, pos);
        let x = up(&child, &[r as u64 + 1]);
        let mut sum = zeros::<u64>(&child, 1);
        child.all_reduce(&x, &mut sum, ReduceOp::Sum).unwrap();
        let want: u64 = members.iter().map(|q| *q as u64 + 1).sum();
        assert_eq!(down(&child, &sum), [want]);
        // No color: this rank joins no child.
        assert!(c.split(None, 0, &cfg).unwrap().is_none());
        child.destroy().unwrap();
        c.destroy().unwrap();
    });
}

#[test]
fn after_an_abort_every_operation_is_refused_with_the_first_reason() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let x = up(&c, &[1.0f32; 2]);
        let mut y = zeros::<f32>(&c, 2);
        c.all_reduce(&x, &mut y, ReduceOp::Sum).unwrap();
        c.synchronize().unwrap();
        c.abort("stopped by the test");
        // Twice: the first reason stays.
        c.abort("a second abort");
        assert_eq!(c.state(), CommState::Aborted);
        let aborted = |r: oxccl_comm::Result<()>| match r {
            Err(Error::Aborted { reason }) => {
                assert!(reason.contains("stopped by the test"), "{reason}")
            }
            other => panic!("expected Aborted, got {other:?}"),
        };
        aborted(c.all_reduce(&x, &mut y, ReduceOp::Sum));
        aborted(c.broadcast_in_place(&mut y, 0));
        aborted(c.send(&x, 0));
        aborted(c.barrier());
        aborted(c.split(Some(0), 0, &CommConfig::new()).map(drop));
        // The end of an aborted communicator waits for no peer.
        c.destroy().unwrap();
    });
}

#[test]
fn an_abort_handle_stops_the_communicator_from_another_thread() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let h = c.abort_handle();
        assert_eq!(h.state(), CommState::Ready);
        let h2 = h.clone();
        std::thread::spawn(move || h2.abort("watchdog"))
            .join()
            .unwrap();
        assert_eq!(c.state(), CommState::Aborted);
        let mut y = zeros::<f32>(&c, 2);
        match c.all_reduce_in_place(&mut y, ReduceOp::Sum) {
            Err(Error::Aborted { reason }) => assert!(reason.contains("watchdog"), "{reason}"),
            other => panic!("expected Aborted, got {other:?}"),
        }
        c.destroy().unwrap();
        // The handle outlives the communicator: it reports the end and an abort is harmless.
        assert_ne!(h.state(), CommState::Ready);
        h.abort("late");
    });
}

/// Memory of another device is refused by argument, before NCCL (two GPUs or more).
#[test]
fn a_buffer_on_another_device_is_refused() {
    let Some(n) = gpus() else { return };
    if n < 2 {
        eprintln!("skipped: needs two GPUs");
        return;
    }
    on_gpus(n, move |r, mut c| {
        let other = cudarc::driver::CudaContext::new(((r + 1) % n) as usize).unwrap();
        let st = other.default_stream();
        let far = st.clone_htod(&[1.0f32; 2]).unwrap();
        let mut far_out = st.alloc_zeros::<f32>(2).unwrap();
        let near = up(&c, &[1.0f32; 2]);
        let mut near_out = zeros::<f32>(&c, 2);
        refused_arg(c.all_reduce(&far, &mut near_out, ReduceOp::Sum), "send");
        refused_arg(c.all_reduce(&near, &mut far_out, ReduceOp::Sum), "recv");
        refused_arg(c.send(&far, 0), "buf");
        c.barrier().unwrap();
        c.destroy().unwrap();
    });
}

//! `Comm::group`: the operations issued through a `CommGroup` launch together when it ends,
//! whether it ends by `end`, by drop, nested in another, or after one of its operations was
//! refused; the buffers it was handed are marked as used by its work, after the work; and
//! `Comm`'s own typed calls are refused while any group is open on the thread.

use super::{down, gpus, on_gpus, refused_arg, up, zeros};
use oxccl_comm::{CommState, Error, GroupGuard, Progress, ReduceOp};

#[test]
fn several_operations_in_one_group_all_run() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let a = up(&c, &[r as f32 + 1.0; 2]);
        let b = up(&c, &[r as i64; 3]);
        let mut sum = zeros::<f32>(&c, 2);
        let mut max = zeros::<i64>(&c, 3);
        let mut all = zeros::<i64>(&c, 3 * n as usize);
        let mut from_prev = zeros::<i64>(&c, 3);
        let mut g = c.group().unwrap();
        g.all_reduce(&a, &mut sum, ReduceOp::Sum).unwrap();
        g.all_reduce(&b, &mut max, ReduceOp::Max).unwrap();
        g.all_gather(&b, &mut all).unwrap();
        g.send(&b, next).unwrap();
        g.recv(&mut from_prev, prev).unwrap();
        assert_eq!(g.end().unwrap(), Progress::Done);
        assert_eq!(down(&c, &sum), [(n * (n + 1) / 2) as f32; 2]);
        assert_eq!(down(&c, &max), [i64::from(n) - 1; 3]);
        let want: Vec<i64> = (0..n).flat_map(|q| [i64::from(q); 3]).collect();
        assert_eq!(down(&c, &all), want);
        assert_eq!(down(&c, &from_prev), [i64::from(prev); 3]);
        c.destroy().unwrap();
    });
}

/// A group dropped without `end` still closes, once: its operations run, and the next
/// operation outside a group runs at once.
#[test]
fn a_dropped_group_launches_its_operations() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let mut x = up(&c, &[1u32; 4]);
        {
            let mut g = c.group().unwrap();
            g.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
        }
        assert_eq!(down(&c, &x), [n; 4]);
        c.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
        assert_eq!(down(&c, &x), [n * n; 4]);
        c.destroy().unwrap();
    });
}

#[test]
fn nested_groups_launch_at_the_outer_end() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let mut x = up(&c, &[2u64; 2]);
        let mut y = up(&c, &[3u64; 2]);
        let mut outer = c.group().unwrap();
        outer.all_reduce_in_place(&mut x, ReduceOp::Prod).unwrap();
        let mut inner = outer.group().unwrap();
        inner.all_reduce_in_place(&mut y, ReduceOp::Sum).unwrap();
        assert_eq!(inner.end().unwrap(), Progress::Done);
        outer.end().unwrap();
        assert_eq!(down(&c, &x), [2u64.pow(n); 2]);
        assert_eq!(down(&c, &y), [3 * u64::from(n); 2]);
        c.destroy().unwrap();
    });
}

/// An operation refused inside a group is not part of it; the others run, and the group is
/// closed as usual.
#[test]
fn a_refused_operation_leaves_the_rest_of_its_group() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let mut x = up(&c, &[5i32; 2]);
        let mut y = zeros::<i32>(&c, 2);
        let mut g = c.group().unwrap();
        refused_arg(g.broadcast_in_place(&mut y, n), "root");
        g.all_reduce_in_place(&mut x, ReduceOp::Min).unwrap();
        g.end().unwrap();
        assert_eq!(down(&c, &x), [5; 2]);
        c.barrier().unwrap();
        c.destroy().unwrap();
    });
}

/// NCCL enqueues a grouped operation's kernel only at the group's end. A buffer the group
/// writes is marked as written after that, so a read on another stream right after the end
/// waits for the kernel and sees its result, although a long memset on the communicator's
/// stream sits between the issue and the end. The same read after the same all-reduce
/// outside a group is the control.
#[test]
fn a_buffer_written_in_a_group_is_read_on_another_stream_after_the_group_ran() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |_, mut c| {
        let st = c.stream().clone();
        let other = st.context().new_stream().unwrap();
        let mut big = st.alloc_zeros::<u8>(8 << 30).unwrap();
        let x = up(&c, &[5.0f32; 1024]);
        let want = vec![5.0 * n as f32; 1024];

        let mut y = zeros::<f32>(&c, 1024);
        c.all_reduce(&x, &mut y, ReduceOp::Sum).unwrap();
        st.memset_zeros(&mut big).unwrap();
        assert_eq!(other.clone_dtoh(&y).unwrap(), want, "control, no group");
        c.synchronize().unwrap();

        let mut y = zeros::<f32>(&c, 1024);
        let mut g = c.group().unwrap();
        g.all_reduce(&x, &mut y, ReduceOp::Sum).unwrap();
        st.memset_zeros(&mut big).unwrap();
        g.end().unwrap();
        let seen = other.clone_dtoh(&y).unwrap();
        c.synchronize().unwrap();
        assert_eq!(down(&c, &y), want, "the group ran");
        assert_eq!(seen, want, "read on another stream after the group's end");
        c.destroy().unwrap();
    });
}

/// While a group is open on the thread (through a `GroupGuard` on the library, or a
/// `CommGroup` of another communicator), `Comm`'s typed calls are refused with the state
/// error that points at `CommGroup`, before NCCL; once it ends they run again.
#[test]
fn typed_calls_of_comm_are_refused_inside_a_group() {
    let Some(n) = gpus() else { return };
    on_gpus(n, move |r, mut c| {
        let x = up(&c, &[1.0f32; 2]);
        let mut y = zeros::<f32>(&c, 2);
        let g = GroupGuard::start(c.backend().backend()).unwrap();
        let refused = c.all_reduce(&x, &mut y, ReduceOp::Sum).unwrap_err();
        assert!(
            matches!(
                refused,
                Error::InvalidState { state: CommState::Ready, ref reason, .. }
                    if reason.contains("CommGroup")
            ),
            "{refused:?}"
        );
        assert!(matches!(c.send(&x, r), Err(Error::InvalidState { .. })));
        assert!(matches!(c.barrier(), Err(Error::InvalidState { .. })));
        g.end().unwrap();
        c.all_reduce(&x, &mut y, ReduceOp::Sum).unwrap();
        assert_eq!(down(&c, &y), [n as f32; 2]);
        c.destroy().unwrap();
    });
}

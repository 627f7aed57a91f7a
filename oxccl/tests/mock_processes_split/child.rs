//! The child side of the split scenarios: a mock communicator spanning this job's processes,
//! made through the store with the raw backend API, then split; what each rank saw is printed
//! as `RESULT key=value` lines for the parent test to check.

use oxccl::core::Backend;
use oxccl::core::{
    CommConfig, CommOp, Communicator, DataType, Device, FeatureSet, Progress, RawBuf, RawBufMut,
    Stream,
};
use oxccl::mock::{FaultPlan, MockBackend, MockComm, MockStream, DEFAULT_VERSION};
use oxccl::store::Store;
use oxccl::{Error, ReduceOp, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The init limit of the children's backend: it bounds splits and the joins of children.
pub const LIMIT_MS: u64 = 3_000;

/// The color and key of `rank` of `n` in `layout` (`None` color: NOCOLOR).
pub fn call(layout: &str, rank: u32, n: u32) -> (Option<u32>, u32) {
    match layout {
        "halves" => (Some(u32::from(rank >= n / 2)), rank),
        // Keys in reverse: the child's order is by key first, parent rank second.
        "oddeven" => (Some(rank % 2), n - rank),
        // The last rank takes no part; the others share one key: parent rank decides.
        "nocolor" if rank == n - 1 => (None, 0),
        _ => (Some(0), 0),
    }
}

/// The parent ranks of `rank`'s child in child-rank order (empty for NOCOLOR).
pub fn members(layout: &str, rank: u32, n: u32) -> Vec<u32> {
    let Some(color) = call(layout, rank, n).0 else {
        return Vec::new();
    };
    let mut m: Vec<(u32, u32)> = (0..n)
        .filter_map(|r| match call(layout, r, n) {
            (Some(c), k) if c == color => Some((k, r)),
            _ => None,
        })
        .collect();
    m.sort_unstable();
    m.into_iter().map(|(_, r)| r).collect()
}

fn variant(e: &Error) -> &'static str {
    match e {
        Error::Remote { .. } => "Remote",
        Error::Timeout { .. } => "Timeout",
        Error::Aborted { .. } => "Aborted",
        Error::InvalidState { .. } => "InvalidState",
        Error::Backend { .. } => "Backend",
        _ => "Other",
    }
}

/// The result of an op: its own error, or the error it left on the communicator.
fn outcome(c: &MockComm, s: &MockStream) -> Result<()> {
    s.synchronize()?;
    c.poll().map(|_| ())
}

/// An f64 all_reduce (sum) of `v` on `c`.
fn all_reduce(c: &MockComm, s: &MockStream, v: &[f64]) -> Result<Vec<f64>> {
    let mut out = vec![0f64; v.len()];
    let op = CommOp::AllReduce {
        send: RawBuf::new(v.as_ptr() as usize, v.len()),
        recv: RawBufMut::new(out.as_mut_ptr() as usize, out.len()),
        dtype: DataType::Float64,
        op: ReduceOp::Sum,
    };
    // SAFETY: `v` and `out` live until the stream is synchronized in `outcome`.
    unsafe { c.issue(&op, s) }?;
    outcome(c, s)?;
    Ok(out)
}

/// An f64 all_gather of `v` on `c`.
fn all_gather(c: &MockComm, s: &MockStream, v: &[f64]) -> Result<Vec<f64>> {
    let mut out = vec![0f64; v.len() * c.size() as usize];
    let op = CommOp::AllGather {
        send: RawBuf::new(v.as_ptr() as usize, v.len()),
        recv: RawBufMut::new(out.as_mut_ptr() as usize, out.len()),
        dtype: DataType::Float64,
    };
    // SAFETY: as in `all_reduce`.
    unsafe { c.issue(&op, s) }?;
    outcome(c, s)?;
    Ok(out)
}

/// This rank's part of a mock communicator over every rank of the job, bootstrapped through
/// the job's store; with the store, the rank and the size.
fn parent() -> Result<(MockComm, Arc<dyn Store>, u32, u32)> {
    let boot = oxccl::launch::Bootstrap::from_env()?;
    let backend = MockBackend::with_options(
        FeatureSet::for_version(DEFAULT_VERSION),
        FaultPlan::new(),
        1,
        Duration::from_millis(LIMIT_MS),
    )
    .across_processes();
    let (me, n) = (boot.rank, boot.world_size);
    let id = if me == 0 {
        let id = backend.unique_id()?;
        boot.store.set("split/id", id.as_bytes())?;
        id
    } else {
        let b = boot.store.get("split/id", Duration::from_secs(30))?;
        oxccl::core::UniqueId::from_bytes(&b)?
    };
    let comm = backend.init_rank(&id, me, n, Device(me), &CommConfig::new())?;
    Ok((comm, boot.store, me, n))
}

/// Every rank says it is done; rank 0 (which hosts the store) waits for `ranks`.
fn finish(store: &dyn Store, me: u32, ranks: impl Iterator<Item = u32>) -> Result<()> {
    match store.set(&format!("done/{me}"), b"1") {
        // Rank 0 leaves once it saw every key: a late confirmation may find it gone.
        Err(Error::Remote { .. }) if me != 0 => return Ok(()),
        other => other?,
    }
    if me == 0 {
        let keys: Vec<String> = ranks.map(|r| format!("done/{r}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        store.wait(&keys, Duration::from_secs(60))?;
    }
    Ok(())
}

/// Descriptors of this process that are the mock's shared segments, and sockets.
fn fds() -> (usize, usize) {
    let (mut mem, mut sock) = (0, 0);
    for e in std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
    {
        let t = std::fs::read_link(e.path()).unwrap_or_default();
        let t = t.to_string_lossy();
        mem += usize::from(t.contains("memfd:oxccl-mock"));
        sock += usize::from(t.starts_with("socket:"));
    }
    (mem, sock)
}

/// Polls a nonblocking split's child until it is ready (bounded).
fn ready(c: &MockComm) -> Result<()> {
    let start = Instant::now();
    while c.poll()? == Progress::InProgress {
        if start.elapsed() > Duration::from_secs(20) {
            return Err(Error::Remote {
                detail: oxccl::core::text!("the child stayed in progress"),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// `layout:<halves|oddeven|nocolor>:<b|nb>`: split, then all_reduce and all_gather on the
/// child, a split of the child, and no descriptor left once the children are dropped.
pub fn layout(layout: &str, nonblocking: bool) -> Result<()> {
    let (comm, store, me, n) = parent()?;
    let s = comm.new_stream()?;
    all_reduce(&comm, &s, &[1.0])?;
    let before = fds();
    let (color, key) = call(layout, me, n);
    let cfg = CommConfig::new().blocking(!nonblocking);
    let child = comm.split(color, key, &cfg)?;
    let Some(child) = child else {
        println!("RESULT rank={me} crank=none leaked=0");
        return finish(&*store, me, 0..n);
    };
    if nonblocking {
        ready(&child)?;
    }
    let cs = child.new_stream()?;
    let mine: Vec<f64> = (1..=4).map(|i| f64::from((me + 1) * i)).collect();
    let sum = all_reduce(&child, &cs, &mine)?;
    let gathered = all_gather(&child, &cs, &[f64::from(me); 2])?;
    let order: Vec<String> = gathered.iter().step_by(2).map(|r| r.to_string()).collect();
    // A child splits too: every member in one grandchild, in reverse order of child rank.
    let grand = child
        .split(Some(7), child.size() - child.rank(), &CommConfig::new())?
        .ok_or_else(|| Error::Remote {
            detail: oxccl::core::text!("no grandchild"),
        })?;
    let gs = grand.new_stream()?;
    let gsum = all_reduce(&grand, &gs, &[1.0])?;
    println!(
        "RESULT rank={me} crank={} csize={} state={:?} sum={},{} order={} grank={} gsum={}",
        child.rank(),
        child.size(),
        child.state(),
        sum[0],
        sum[3],
        order.join("-"),
        grand.rank(),
        gsum[0],
    );
    drop((gs, grand, cs, child));
    // The children's segments and sockets go once every member dropped its part.
    let start = Instant::now();
    let mut now = fds();
    while (now.0 > before.0 || now.1 > before.1) && start.elapsed() < Duration::from_secs(12) {
        std::thread::sleep(Duration::from_millis(20));
        now = fds();
    }
    println!(
        "RESULT rank={me} leaked={}",
        now.0.saturating_sub(before.0) + now.1.saturating_sub(before.1)
    );
    finish(&*store, me, 0..n)
}

/// `abort`: one child of every rank; rank 1 aborts its part. The others' next op on the child
/// fails with `Remote` naming the abort; the parent still works for everyone.
pub fn abort() -> Result<()> {
    let (comm, store, me, n) = parent()?;
    let s = comm.new_stream()?;
    let child = comm
        .split(Some(0), me, &CommConfig::new())?
        .ok_or_else(|| Error::Remote {
            detail: oxccl::core::text!("no child"),
        })?;
    let cs = child.new_stream()?;
    all_reduce(&child, &cs, &[1.0])?;
    let mut split_err = "none";
    if me == 1 {
        child.abort("child aborted by the test");
        // A split of an aborted communicator is refused at once, joining nothing.
        split_err = child
            .split(Some(0), 0, &CommConfig::new())
            .err()
            .as_ref()
            .map_or("none", variant);
    }
    let r = all_reduce(&child, &cs, &[1.0]);
    let sum = all_reduce(&comm, &s, &[1.0])?;
    println!(
        "RESULT rank={me} child_err={} child_state={:?} parent_sum={} split_err={split_err}",
        r.as_ref().err().map_or("none", variant),
        child.state(),
        sum[0]
    );
    if let Err(e) = r {
        println!("DETAIL rank={me} {e}");
    }
    finish(&*store, me, 0..n)
}

/// `abandon`: a nonblocking split into one child; rank 1 drops its child before polling it.
/// The others' children become ready (rank 1's split still joins), then their op fails with
/// `Remote` naming why rank 1 left.
pub fn abandon() -> Result<()> {
    let (comm, store, me, n) = parent()?;
    let cfg = CommConfig::new().blocking(false);
    let child = comm
        .split(Some(0), me, &cfg)?
        .ok_or_else(|| Error::Remote {
            detail: oxccl::core::text!("no child"),
        })?;
    if me == 1 {
        drop(child);
        println!("RESULT rank={me} dropped=1");
        // Alive until the others are done: its split's thread joins the child, then aborts
        // its part there (an exit would end it sooner, with another reason).
        let keys: Vec<String> = (0..n)
            .filter(|r| *r != me)
            .map(|r| format!("done/{r}"))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        store.wait(&keys, Duration::from_secs(60))?;
        return finish(&*store, me, 0..n);
    }
    ready(&child)?;
    let cs = child.new_stream()?;
    let r = all_reduce(&child, &cs, &[1.0]);
    println!(
        "RESULT rank={me} err={}",
        r.as_ref().err().map_or("none", variant)
    );
    if let Err(e) = r {
        println!("DETAIL rank={me} {e}");
    }
    finish(&*store, me, 0..n)
}

/// `kill:<victim>:<early|late>`: the victim is SIGKILLed while the others split. `early`: it
/// dies before its call (the match fails); `late`: after its call, while the others are
/// still coming (they get their children, then wait in vain for it to join one).
pub fn kill(victim: u32, late: bool) -> Result<()> {
    let (comm, _store, me, n) = parent()?;
    let s = comm.new_stream()?;
    all_reduce(&comm, &s, &[1.0])?;
    if me == victim {
        let die = move || {
            // Long enough for a late victim's call to reach the host first, even on a busy
            // machine.
            std::thread::sleep(Duration::from_millis(600));
            println!("VICTIM rank={me}");
            // SAFETY: signals this process; the default action ends it.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        };
        if late {
            std::thread::spawn(die);
            let _ = comm.split(Some(0), me, &CommConfig::new());
        } else {
            die();
        }
        std::thread::sleep(Duration::from_secs(60));
        return Ok(());
    }
    if late {
        // The victim's call is in, and it is dead, before these calls come.
        std::thread::sleep(Duration::from_millis(1_200));
    }
    let start = Instant::now();
    let r = comm.split(Some(0), me, &CommConfig::new());
    let ms = start.elapsed().as_millis();
    println!(
        "RESULT rank={me} err={} ms={ms}",
        r.as_ref().err().map_or("none", variant)
    );
    if let Err(e) = r {
        println!("DETAIL rank={me} {e}");
    }
    // The store may be gone with the victim: no goodbye.
    let _ = n;
    Ok(())
}

//! One-sided operations of the process group across processes: a ring of puts, each with a
//! signal, from every rank into the next one's window, and signals alone, so that the puts go
//! from the host's process to another, between two other processes, and back into the
//! host's; each rank checks every put that reached its window, and that the rest is
//! untouched.

use oxccl::pg::PgBackend;
use oxccl::pg::{ProcessGroup, RegMode, SignalFrom};
use oxccl::Result;

/// Rounds of the ring.
pub const ROUNDS: usize = 6;
/// Floats per put.
const LEN: usize = 16;

/// What rank `from` puts in round `k`.
fn values(from: u32, k: usize) -> Vec<f32> {
    (0..LEN)
        .map(|i| (from as usize * 1000 + k * 100 + i) as f32)
        .collect()
}

/// The ring: in round `k` each rank puts into element `k * LEN` of the next rank's window and
/// waits for the previous rank's put; then each signals the next and waits for a signal from
/// the previous. Returns the rounds checked.
pub fn ring<B: PgBackend>(pg: &ProcessGroup<B>) -> Result<usize> {
    let (me, n) = (pg.global_rank(), pg.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    // One spare round's room at the end: it must stay zero.
    let mut win = pg.alloc_comm::<f32>(LEN * (ROUNDS + 1))?;
    pg.register_buffer(&win, RegMode::Window)?;
    let from = [SignalFrom {
        peer: prev,
        signal: 0,
        count: 1,
    }];
    for k in 0..ROUNDS {
        // A put's data lies in a window: made by every rank, in the same order.
        let src = pg.upload_comm(&values(me, k))?;
        pg.register_buffer(&src, RegMode::Window)?;
        pg.put_signal(&src, next, &win, k * LEN, 0)?.wait()?;
        pg.wait_signal(&from, &mut win)?.wait()?;
        let got = pg.download_any(&win)?;
        assert_eq!(
            &got[k * LEN..(k + 1) * LEN],
            &values(prev, k)[..],
            "rank {me} round {k}: the put of rank {prev}"
        );
    }
    pg.signal(next, 0)?.wait()?;
    pg.wait_signal(&from, &mut win)?.wait()?;
    let got = pg.download_any(&win)?;
    for k in 0..ROUNDS {
        assert_eq!(&got[k * LEN..(k + 1) * LEN], &values(prev, k)[..]);
    }
    assert!(
        got[ROUNDS * LEN..].iter().all(|x| *x == 0.0),
        "rank {me}: the spare room written"
    );
    Ok(ROUNDS)
}

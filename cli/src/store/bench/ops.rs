//! Small-value throughput: threads, each with its own `oxccl::store::TcpStore` client (the
//! library's public API, the same for both servers), set and get a key of their own for a
//! fixed time; and the check that the server stored each round's final count.

use super::error::BenchError;
use oxccl::store::{Store, TcpStore, TcpStoreOptions};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// How long the threads run.
const SPAN: Duration = Duration::from_secs(2);
/// The value set and read back.
const VALUE: &[u8] = b"01234567";

fn client(port: u16, timeout: Duration) -> Result<TcpStore, BenchError> {
    TcpStore::new(TcpStoreOptions {
        timeout,
        // The servers under test check no token.
        token: None,
        ..TcpStoreOptions::client("127.0.0.1", port)
    })
    .map_err(|e| BenchError::Run(format!("a store client: {e}")))
}

/// Set and get per second, over `threads` clients of the server on `port`.
pub fn ops_per_sec(port: u16, threads: usize, timeout: Duration) -> Result<f64, BenchError> {
    let stores = (0..threads)
        .map(|_| client(port, timeout))
        .collect::<Result<Vec<_>, _>>()?;
    // Every thread starts at once, after every client connected.
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || -> Result<u64, String> {
                let key = format!("ops/{i}");
                start.wait();
                let t0 = Instant::now();
                let mut ops = 0u64;
                while t0.elapsed() < SPAN {
                    store.set(&key, VALUE).map_err(|e| e.to_string())?;
                    let got = store.get(&key, timeout).map_err(|e| e.to_string())?;
                    if got != VALUE {
                        return Err(format!("get of {key} answered {} bytes", got.len()));
                    }
                    ops += 2;
                }
                Ok(ops)
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    let mut total = 0u64;
    for w in workers {
        match w.join() {
            Ok(Ok(n)) => total += n,
            Ok(Err(e)) => return Err(BenchError::Run(format!("ops/s: {e}"))),
            Err(_) => return Err(BenchError::Run("ops/s: a client thread panicked".into())),
        }
    }
    Ok(total as f64 / t0.elapsed().as_secs_f64())
}

/// Whether the server holds N at every round's counter of `run`, as the ranks' adds left it.
pub fn stored_counts(
    port: u16,
    run: &str,
    ranks: usize,
    rounds: usize,
    timeout: Duration,
) -> Result<(), BenchError> {
    let store = client(port, timeout)?;
    for r in 0..rounds {
        let key = format!("fanin/{run}/count/{r}");
        let v = store
            .get(&key, timeout)
            .map_err(|e| BenchError::Run(format!("reading {key} back: {e}")))?;
        if v != ranks.to_string().as_bytes() {
            return Err(BenchError::Wrong(format!(
                "the server holds {} at {key}, not {ranks}",
                oxccl::core::text::Escaped(&String::from_utf8_lossy(&v))
            )));
        }
    }
    Ok(())
}

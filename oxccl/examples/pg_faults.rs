//! Seed cases 15 and 30 as processes on whatever backend `OXCCL_BACKEND` picks (NCCL on a GPU
//! machine): a peer that dies mid-collective, and a rank stuck on a collective that times out
//! and dumps. `tests/safety_processes.rs` runs the same scenarios on the mock across processes
//! in CI; this runner is for real NCCL, one process per GPU.
//!
//! Start each rank with torchrun's variables but *not* under torchrun, whose agent ends the
//! surviving ranks as soon as one dies (`scripts/gpu-x2.sh` does this; rank 0 hosts the TCP
//! store):
//!
//! ```text
//! RANK=r LOCAL_RANK=r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=P \
//!     OXCCL_TIMEOUT_MS=3000 OXCCL_ASYNC_ERROR_HANDLING=2 OXCCL_DUMP_ON_TIMEOUT=1 \
//!     OXCCL_TRACE_DIR=DIR target/release/examples/pg_faults death:sigkill
//! ```
//!
//! Scenarios (every rank gets the same argument):
//! - `death:exit0|exit1|sigterm|sigkill` (case 15): after a first all_reduce, rank 1 issues the
//!   second one and dies while it is in flight; rank 0 issues it 300 ms later and waits under
//!   the group's timeout. Rank 0 prints `RESULT rank=0 err=<kind> ms=<waited> timeout_ms=<t>
//!   alloc_ok=<bool> dumped=auto|requested|no`: the error, how long it took, whether it could
//!   still allocate and copy on its GPU, and whether its flight recorder was dumped in
//!   `OXCCL_TRACE_DIR` by the watchdog (a timeout, with `OXCCL_DUMP_ON_TIMEOUT=1`) or, when
//!   the error was another (a peer seen gone), by this runner's request after it.
//!   Other ranks above 1 wait too and print `RESULT rank=r failed=<bool>`.
//! - `dump` (case 30): rank 1 is stuck on its second all_reduce (rank 0 never issues it); the
//!   group's timeout makes rank 1's watchdog dump, signal the others through the store and end
//!   the process (run it with the default error handling); rank 0 sees the signal, dumps too,
//!   and exits 0 after 4 s.

use oxccl::launch::{init_process_group, WithProcessGroup};
use oxccl::pg::PgBackend;
use oxccl::pg::ProcessGroup;
use oxccl::{Error, ReduceOp, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The scenario named on the command line.
struct Scenario(String);

/// The variant name of an operation's outcome, as the RESULT line prints it.
fn kind_of(r: &Result<()>) -> &'static str {
    match r {
        Ok(()) => "none",
        Err(Error::Remote { .. }) => "Remote",
        Err(Error::Timeout { .. }) => "Timeout",
        Err(Error::Aborted { .. }) => "Aborted",
        Err(_) => "Other",
    }
}

/// Whether `rank`'s JSON dump appears in the trace directory within `limit` (the watchdog
/// writes it at the same deadline the waiting thread sees, on its own thread).
fn dumped(rank: u32, limit: Duration) -> bool {
    let Some(dir) = std::env::var_os("OXCCL_TRACE_DIR").map(PathBuf::from) else {
        return false;
    };
    let file = dir.join(format!("rank_{rank}.json"));
    let began = Instant::now();
    while began.elapsed() < limit {
        if file.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    file.exists()
}

/// Ends this process the way `how` says, at once.
fn die(how: &str) {
    match how {
        "exit0" => std::process::exit(0),
        "exit1" => std::process::exit(1),
        // SAFETY: signals this process; the default action ends it.
        "sigterm" => unsafe { libc::kill(libc::getpid(), libc::SIGTERM) },
        // SAFETY: as above.
        _ => unsafe { libc::kill(libc::getpid(), libc::SIGKILL) },
    };
    std::thread::sleep(Duration::from_secs(60));
}

impl WithProcessGroup for Scenario {
    type Output = ();
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<()> {
        let me = pg.global_rank();
        let mut b = pg.upload(&[1.0f32; 1 << 20])?;
        pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
        println!("FIRST rank={me} ok");
        let timeout = pg.options().timeout;
        match self.0.split(':').collect::<Vec<_>>().as_slice() {
            ["death", how] => {
                if me == 1 {
                    // In flight: its peer has not issued the second all_reduce yet.
                    let _work = pg.all_reduce(&mut b, ReduceOp::Sum)?;
                    std::thread::sleep(Duration::from_millis(20));
                    die(how);
                }
                std::thread::sleep(Duration::from_millis(300));
                let began = Instant::now();
                let r = pg.all_reduce(&mut b, ReduceOp::Sum)?.wait();
                let ms = began.elapsed().as_millis();
                if let Err(e) = &r {
                    println!("rank {me}: the second all_reduce: {e}");
                }
                if me == 0 {
                    // The GPU is still usable after the abort (an error here is a `false`).
                    let alloc_ok = pg
                        .upload(&[7.0f32; 16])
                        .and_then(|f| pg.download(&f))
                        .is_ok_and(|v| v == vec![7.0; 16]);
                    // The watchdog dumps on a timeout by itself; an error the backend reports
                    // (a peer seen gone: Remote) is dumped here, as a user's handler would.
                    let dump = if dumped(0, Duration::from_secs(3)) {
                        "auto"
                    } else {
                        oxccl::watchdog::Watchdog::global().dump("the second all_reduce failed");
                        if dumped(0, Duration::from_secs(3)) {
                            "requested"
                        } else {
                            "no"
                        }
                    };
                    println!(
                        "RESULT rank=0 err={} ms={ms} timeout_ms={} alloc_ok={alloc_ok} dumped={dump}",
                        kind_of(&r),
                        timeout.as_millis(),
                    );
                } else {
                    println!("RESULT rank={me} failed={}", r.is_err());
                }
                Ok(())
            }
            ["dump"] => {
                if me == 1 {
                    let _stuck = pg.all_reduce(&mut b, ReduceOp::Sum)?;
                    std::thread::sleep(Duration::from_secs(30));
                    println!("RESULT rank=1 still alive");
                } else {
                    std::thread::sleep(Duration::from_secs(4));
                    println!(
                        "RESULT rank={me} done dumped={}",
                        dumped(me, Duration::ZERO)
                    );
                }
                Ok(())
            }
            _ => Err(Error::invalid(
                "scenario",
                format_args!(
                    "death:exit0|exit1|sigterm|sigkill or dump, got {:?}",
                    self.0
                ),
            )),
        }
    }
}

fn main() -> Result<()> {
    env_logger::init();
    let Some(scenario) = std::env::args().nth(1) else {
        eprintln!("usage: pg_faults death:exit0|exit1|sigterm|sigkill | dump (see the file's doc)");
        std::process::exit(2);
    };
    init_process_group(Scenario(scenario))
}

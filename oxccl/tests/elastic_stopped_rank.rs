//! A rank that stops answering, on the mock across processes, under a group timeout shorter
//! than any fixed wait the mock could hide: three processes of `examples/elastic_chaos` train
//! (rank 0's process hosts the mock's communicators), rank 2 is SIGSTOPped; the survivors
//! lose it and train again at epoch 1 within the timeout, the window and a margin; continued
//! afterwards, rank 2 learns it is out and ends with a typed error.

use oxccl_testkit::ranks;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// The group timeout, ms.
const TIMEOUT_MS: u64 = 2000;

struct World {
    store: Child,
    ranks: Vec<Child>,
    lines: Receiver<(u32, String)>,
    stop: std::path::PathBuf,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.stop, b"");
        for c in self
            .ranks
            .iter_mut()
            .chain(std::iter::once(&mut self.store))
        {
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.stop);
    }
}

fn start(n: u32) -> World {
    let exe = ranks::built_example(env!("CARGO_MANIFEST_DIR"), "elastic_chaos");
    let port = ranks::free_port();
    let store = Command::new(&exe)
        .env("CHAOS_STORE_PORT", port.to_string())
        .env_remove("RANK")
        .spawn()
        .unwrap();
    let began = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(began.elapsed() < Duration::from_secs(10), "no store host");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stop = std::env::temp_dir().join(format!("oxccl-stopped-rank-{}", std::process::id()));
    let (tx, lines) = channel();
    let ranks = (0..n)
        .map(|r| {
            let mut c = Command::new(&exe)
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("TORCHELASTIC_USE_AGENT_STORE", "True")
                .env("OXCCL_BACKEND", "mock")
                .env("OXCCL_TIMEOUT_MS", TIMEOUT_MS.to_string())
                .env("CHAOS_STOP", &stop)
                .env_remove("CHAOS_STORE_PORT")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let out = c.stdout.take().unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send((r, l));
                }
            });
            c
        })
        .collect();
    World {
        store,
        ranks,
        lines,
        stop,
    }
}

impl World {
    /// Waits (up to `bound`) until each of `ranks` printed a line that `want` accepts; every
    /// line read is kept in `seen` for a failure's message.
    fn expect(
        &self,
        ranks: &[u32],
        bound: Duration,
        seen: &mut Vec<String>,
        want: impl Fn(&str) -> bool,
    ) {
        let began = Instant::now();
        let mut left: Vec<u32> = ranks.to_vec();
        while !left.is_empty() {
            match self
                .lines
                .recv_timeout(bound.saturating_sub(began.elapsed()))
            {
                Ok((r, l)) => {
                    if want(&l) {
                        left.retain(|x| *x != r);
                    }
                    seen.push(format!("{r}: {l}"));
                }
                Err(_) => panic!(
                    "ranks {left:?}: nothing expected within {bound:?}; last lines:\n{}",
                    seen[seen.len().saturating_sub(30)..].join("\n")
                ),
            }
        }
    }
}

#[test]
fn survivors_of_a_stopped_rank_train_again_within_the_timeout_and_window() {
    let w = start(3);
    let mut seen = Vec::new();
    let boot = Duration::from_secs(20);
    w.expect(&[0, 1, 2], boot, &mut seen, |l| {
        l.starts_with("STEP ") && l.contains("step=5 ")
    });
    let victim = w.ranks[2].id();
    assert!(Command::new("kill")
        .args(["-STOP", &victim.to_string()])
        .status()
        .unwrap()
        .success());
    let stopped = Instant::now();
    // The timeout, the window (1 s), the decision and a new communicator; no fixed wait.
    let bound = Duration::from_millis(TIMEOUT_MS + 1000 + 2000);
    w.expect(&[0, 1], bound, &mut seen, |l| {
        l.starts_with("STEP ") && l.contains("epoch=1 ") && l.contains("members=0,1 ")
    });
    assert!(stopped.elapsed() < bound, "{:?}", stopped.elapsed());
    assert!(Command::new("kill")
        .args(["-CONT", &victim.to_string()])
        .status()
        .unwrap()
        .success());
    // Back late: refused for good, within its timeout and a margin.
    w.expect(
        &[2],
        Duration::from_millis(TIMEOUT_MS + 3000),
        &mut seen,
        |l| l.starts_with("END Aborted") && l.contains("rank 2"),
    );
}

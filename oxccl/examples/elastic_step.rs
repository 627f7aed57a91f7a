//! Data-parallel training that survives a lost rank: four ranks (a process each) train; rank 2
//! is SIGKILLed mid-step; the other three go on with the same weights; a replacement process
//! joins later as rank 2, gets the weights and the step by broadcast, and the four train on.
//!
//! Run it: `cargo run --example elastic_step`. Without `RANK` in its environment the program
//! is its own launcher: it starts four ranks of itself with `env://` variables (rank 0 serves
//! the store, so the rank killed is another), kills rank 2 once it is training, starts the
//! replacement, and checks what every rank printed: the weights equal on all, at most the step
//! in flight lost, how long the survivors took to train again and the replacement to train
//! with them. `OXCCL_BACKEND=mock|nccl|auto` picks the backend (NCCL on GPU `LOCAL_RANK` when
//! a GPU and NCCL are there; the mock spanning the processes otherwise).
//!
//! Under another launcher: any that leaves the survivors running when a rank dies works
//! (plain `env://` as here; `srun --kill-on-bad-exit=0`; `mpirun` with its fault tolerance
//! on). Set `OXCCL_ELASTIC=1` on every rank, and `ELASTIC_JOIN=1` on a replacement started
//! with the lost rank's `RANK`. torchrun's agent ends every worker of its node as soon as one
//! fails (with restarts left it then starts them all again, its own elasticity), so under
//! torchrun give each rank an agent of its own: `torchrun --nnodes 4 --node-rank R
//! --nproc-per-node 1 --max-restarts 0 --master-addr A --master-port P`. The lost rank's agent
//! fails and leaves; the others' workers train on in node 0's agent store; start the
//! replacement outside any agent (a new agent would make the others restart theirs). The
//! survivors' agents then wait in their exit barrier for the lost one (300 s) before they
//! end. `ELASTIC_TORCHRUN=/path/to/torchrun` makes this launcher do that.

use oxccl::launch::{with_backend, Bootstrap, WithBackend};
use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::env::EnvConfig;
use oxccl::{Error, ReduceOp, Result};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Steps every rank trains (the replacement: until the others' count).
const STEPS: u32 = 60;
/// The weights' length.
const WIDTH: usize = 8;
/// The step after which the launcher kills rank 2.
const KILL_AFTER: u32 = 10;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Rank `rank`'s gradient at `step`: different on every rank, the same on every run.
fn gradient(rank: u32, step: u32) -> Vec<f32> {
    (0..WIDTH)
        .map(|i| ((rank as usize + 1) * (step as usize + 3) + i) as f32 % 7.0 / 7.0)
        .collect()
}

/// Sends (group rank 0) or receives the training state, `[step, weights…]`, after an
/// admission. A loss meanwhile costs every side the same broadcast (none of them completes
/// it), so each runs it again on the smaller group.
fn share_state<B: PgBackend>(pg: &ProcessGroup<B>, step: &mut u32, w: &mut [f32]) -> Result<()> {
    loop {
        match share_state_once(pg, step, w) {
            Err(Error::MembersLost { lost, epoch, .. }) => {
                println!(
                    "rank {} lost ranks [{lost}] while sharing the state; epoch {epoch}",
                    pg.global_rank()
                );
            }
            done => return done,
        }
    }
}

/// One broadcast of the state from the group's first rank.
fn share_state_once<B: PgBackend>(
    pg: &ProcessGroup<B>,
    step: &mut u32,
    w: &mut [f32],
) -> Result<()> {
    let mut state = vec![*step as f32];
    state.extend_from_slice(w);
    let mut buf = pg.upload(&state)?;
    pg.broadcast(&mut buf, pg.ranks()[0])?.wait()?;
    let got = pg.download(&buf)?;
    *step = got[0] as u32;
    w.copy_from_slice(&got[1..]);
    Ok(())
}

/// The training loop: average the gradients, step the weights; a loss costs the step in
/// flight, which the smaller group runs again; at each step's end the members admit who
/// waits to join, and share the state with it.
fn train<B: PgBackend>(pg: &ProcessGroup<B>, mut step: u32, w: &mut [f32]) -> Result<u32> {
    let me = pg.global_rank();
    while step < STEPS {
        let mut g = pg.upload(&gradient(me, step))?;
        match pg.all_reduce(&mut g, ReduceOp::Avg)?.wait() {
            Ok(()) => {}
            Err(Error::MembersLost { lost, epoch, .. }) => {
                println!(
                    "rank {me} lost [{lost}] at step {step}; epoch {epoch}, {} ranks, at {}",
                    pg.size(),
                    now_ms()
                );
                continue;
            }
            Err(e) => return Err(e),
        }
        let g = pg.download(&g)?;
        for (w, g) in w.iter_mut().zip(&g) {
            *w -= 0.1 * g;
        }
        step += 1;
        println!("rank {me} step {step} size {} at {}", pg.size(), now_ms());
        if pg.admit()? > 0 {
            share_state(pg, &mut step, w)?;
            println!("rank {me} admitted at step {step}; size {}", pg.size());
        }
        // The model's own work between collectives.
        std::thread::sleep(Duration::from_millis(30));
    }
    Ok(step)
}

/// One rank of the launched job (or the replacement, under `ELASTIC_JOIN`).
struct Rank {
    boot: Bootstrap,
    opts: PgOptions,
    join: bool,
}

impl WithBackend for Rank {
    type Output = Result<()>;
    fn run<B: PgBackend>(self, backend: B) -> Result<()> {
        let Rank { boot, opts, join } = self;
        let mut w = vec![1.0f32; WIDTH];
        let (pg, step) = if join {
            let pg = ProcessGroup::join(
                backend,
                boot.group_store(),
                boot.rank,
                boot.world_size,
                opts,
            )?;
            println!(
                "rank {} joined: epoch {}, {} ranks, at {}",
                boot.rank,
                pg.epoch(),
                pg.size(),
                now_ms()
            );
            let mut step = 0;
            share_state(&pg, &mut step, &mut w)?;
            (pg, step)
        } else {
            let pg = ProcessGroup::new(
                backend,
                boot.group_store(),
                boot.rank,
                boot.world_size,
                opts,
            )?;
            (pg, 0)
        };
        let step = train(&pg, step, &mut w)?;
        let bits: Vec<String> = w.iter().map(|x| format!("{:08x}", x.to_bits())).collect();
        println!(
            "final rank {} step {step} size {} epoch {} weights {}",
            pg.global_rank(),
            pg.size(),
            pg.epoch(),
            bits.join(",")
        );
        pg.destroy();
        Ok(())
    }
}

fn rank_main() -> Result<()> {
    let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
    let env = EnvConfig::from_lookup(|k| vars.get(k).map(String::as_str))?;
    let boot = Bootstrap::from_env()?;
    let mut opts = PgOptions::from_config(&env, None);
    opts.device = boot.device;
    opts.elastic = true;
    let join = vars.get("ELASTIC_JOIN").is_some_and(|v| v == "1");
    println!("rank {} pid {}", boot.rank, std::process::id());
    with_backend(&env, Rank { boot, opts, join })?
}

/// Starts rank `rank` of `n` of this program, `env://` on `port`: directly, or under an agent
/// of its own of `torchrun` (the path given) whose node rank is the rank.
fn start(
    rank: u32,
    n: u32,
    port: u16,
    join: bool,
    torchrun: Option<&str>,
) -> std::io::Result<Child> {
    let exe = std::env::current_exe()?;
    let mut c = match torchrun {
        None => {
            let mut c = Command::new(exe);
            c.env("RANK", rank.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string());
            c
        }
        Some(torchrun) => {
            // One agent per rank (its node): an agent ends every worker of its node when one
            // fails, so only a node of one rank leaves the others running. Node 0's agent
            // serves the store the workers share.
            let mut c = Command::new(torchrun);
            c.args(["--nnodes", &n.to_string(), "--node-rank", &rank.to_string()])
                .args(["--nproc-per-node", "1", "--max-restarts", "0"])
                .args([
                    "--master-addr",
                    "127.0.0.1",
                    "--master-port",
                    &port.to_string(),
                ])
                .arg("--no-python")
                .arg(exe)
                .env("CUDA_VISIBLE_DEVICES", rank.to_string());
            c
        }
    };
    c.env("OXCCL_ELASTIC", "1").stdout(Stdio::piped());
    if join {
        c.env("ELASTIC_JOIN", "1");
    }
    c.spawn()
}

/// SIGKILLs rank 2 mid-step: the process itself, or under torchrun its worker (by the pid it
/// printed), which its agent then sees fail.
fn kill_rank_2(lines: &[Line], children: &mut [(u32, Child)]) -> std::result::Result<(), String> {
    let worker = lines
        .iter()
        .find(|l| l.text.starts_with("rank 2 pid "))
        .and_then(|l| after(&l.text, "pid"));
    match (worker, children.iter_mut().find(|(r, _)| *r == 2)) {
        (Some(pid), Some((_, c))) if u128::from(c.id()) != pid => {
            let st = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .map_err(|e| format!("killing rank 2's worker {pid}: {e}"))?;
            if !st.success() {
                return Err(format!("kill -KILL {pid} ended with {st}"));
            }
            Ok(())
        }
        (_, Some((_, c))) => {
            c.kill().map_err(|e| format!("killing rank 2: {e}"))?;
            let _ = c.wait();
            Ok(())
        }
        (_, None) => Err("no rank 2 to kill".into()),
    }
}

/// A line a rank printed, with when the launcher read it.
struct Line {
    rank: u32,
    text: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(29_511, |a| a.port())
}

/// Forwards `child`'s lines to `tx`, tagged with `rank`.
fn read_lines(rank: u32, child: &mut Child, tx: std::sync::mpsc::Sender<Line>) {
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for text in BufReader::new(out).lines().map_while(std::io::Result::ok) {
                println!("{text}");
                if tx.send(Line { rank, text }).is_err() {
                    return;
                }
            }
        });
    }
}

/// The number after `word` in `text`.
fn after(text: &str, word: &str) -> Option<u128> {
    let mut it = text.split_whitespace();
    it.find(|w| *w == word)?;
    it.next()?.parse().ok()
}

fn launcher() -> std::result::Result<(), String> {
    let n = 4;
    let port = free_port();
    let timeout_ms: u128 = std::env::var("OXCCL_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600_000);
    let torchrun = std::env::var("ELASTIC_TORCHRUN").ok();
    let torchrun = torchrun.as_deref();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut children: Vec<(u32, Child)> = Vec::new();
    for r in 0..n {
        let mut c =
            start(r, n, port, false, torchrun).map_err(|e| format!("starting rank {r}: {e}"))?;
        read_lines(r, &mut c, tx.clone());
        children.push((r, c));
    }
    let began = Instant::now();
    let limit = Duration::from_secs(300);
    let mut lines: Vec<Line> = Vec::new();
    let mut killed_at = None;
    let mut joined_started = None;
    while began.elapsed() < limit {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) else {
            let finals = lines
                .iter()
                .filter(|l| l.text.starts_with("final "))
                .count();
            if children
                .iter_mut()
                .all(|(_, c)| matches!(c.try_wait(), Ok(Some(_))))
                || (torchrun.is_some() && finals == 4)
            {
                break;
            }
            continue;
        };
        if killed_at.is_none()
            && line.rank == 2
            && line.text.starts_with(&format!("rank 2 step {KILL_AFTER} "))
        {
            // Mid-step: the others are in (or about to enter) the next collective.
            std::thread::sleep(Duration::from_millis(10));
            kill_rank_2(&lines, &mut children)?;
            killed_at = Some(now_ms());
            println!("launcher: killed rank 2 (SIGKILL) at {}", now_ms());
        }
        if let (Some(k), None) = (killed_at, joined_started) {
            let recovered = line.text.contains(" lost [2] ");
            if recovered && now_ms() > k + 500 {
                // Outside any agent: a new agent in the others' rendezvous would restart them.
                let mut c = start(2, n, port, true, None)
                    .map_err(|e| format!("starting the replacement: {e}"))?;
                read_lines(2, &mut c, tx.clone());
                children.push((2, c));
                joined_started = Some(now_ms());
                println!("launcher: started the replacement rank 2 at {}", now_ms());
            }
        }
        lines.push(line);
    }
    // Late lines of ranks that ended.
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
        lines.push(line);
    }
    for (i, (r, c)) in children.iter_mut().enumerate() {
        let agent = torchrun.is_some() && i < n as usize;
        if agent && matches!(c.try_wait(), Ok(None)) {
            // The survivors' agents wait in their exit barrier for the lost rank's agent,
            // which failed and left (torchrun's exit barrier: 300 s), then end.
            println!("launcher: rank {r}'s agent waits in its exit barrier; ended");
            let _ = c.kill();
            let _ = c.wait();
            continue;
        }
        match c.try_wait() {
            // Rank 2's first process: SIGKILLed, or its agent, which fails with its worker.
            Ok(Some(s)) if s.success() || (*r == 2 && (s.code().is_none() || agent)) => {}
            Ok(Some(s)) => return Err(format!("rank {r} ended with {s}")),
            _ => {
                let _ = c.kill();
                return Err(format!("rank {r} still running after {limit:?}"));
            }
        }
    }
    let killed_at = killed_at.ok_or("rank 2 never reached the step it is killed after")?;
    let joined_started = joined_started.ok_or("the survivors never went on without rank 2")?;
    // Every rank's final weights, equal; each rank's final step, the same.
    let finals: Vec<&Line> = lines
        .iter()
        .filter(|l| l.text.starts_with("final "))
        .collect();
    if finals.len() != 4 {
        return Err(format!("{} final lines, not 4", finals.len()));
    }
    let weights = |l: &Line| l.text.rsplit(' ').next().unwrap_or("").to_string();
    if finals.iter().any(|l| weights(l) != weights(finals[0])) {
        return Err("the ranks' final weights differ".into());
    }
    if finals
        .iter()
        .any(|l| !l.text.contains(&format!("step {STEPS} size 4 epoch 2")))
    {
        return Err("a rank did not end at the last step, four ranks, epoch 2".into());
    }
    // How long the survivors took to train again, and the replacement to train with them.
    let mut back = 0u128;
    for r in [0, 1, 3] {
        let first = lines
            .iter()
            .filter(|l| l.rank == r && l.text.contains(" size 3 at "))
            .filter_map(|l| after(&l.text, "at"))
            .find(|t| *t >= killed_at)
            .ok_or(format!("rank {r} never trained at 3"))?;
        back = back.max(first - killed_at);
    }
    let with_four = lines
        .iter()
        .filter(|l| l.rank == 2 && l.text.contains(" size 4 at "))
        .filter_map(|l| after(&l.text, "at"))
        .find(|t| *t >= joined_started)
        .ok_or("the replacement never trained with the others")?;
    let lost_steps = lines
        .iter()
        .filter(|l| l.text.contains(" lost [2] "))
        .count();
    println!(
        "elastic_step: weights equal on all 4 ranks after {STEPS} steps; survivors training again {back} ms after the kill (timeout {timeout_ms} ms); replacement training at 4 ranks {} ms after it started; {lost_steps} steps in flight lost (one per survivor)",
        with_four.saturating_sub(joined_started)
    );
    if lost_steps > 3 {
        return Err(format!("{lost_steps} steps lost, at most one per survivor"));
    }
    Ok(())
}

fn main() {
    env_logger::init();
    if std::env::var_os("RANK").is_some() {
        if let Err(e) = rank_main() {
            eprintln!("rank failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(e) = launcher() {
        eprintln!("elastic_step: {e}");
        std::process::exit(1);
    }
}

//! One process of the chaos run: a member that trains (`new`), a replacement (`join`), or a
//! process that asks for what it must not have (a join as a live member, a `new` on the
//! running world), as the driver says in `CHAOS_*` variables. It prints one line per event
//! the driver checks (see `report`), and ends with a line saying how and an exit code per
//! kind of end.

use oxccl::launch::{with_backend, Bootstrap, WithBackend};
use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::env::EnvConfig;
use oxccl::{Error, ReduceOp, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The weights' length.
const WIDTH: usize = 8;

/// Exit codes, read by the driver.
pub const EXIT_DONE: i32 = 0;
pub const EXIT_REFUSED: i32 = 3;
pub const EXIT_OUT: i32 = 4;
pub const EXIT_FAILED: i32 = 5;

/// Rank `rank`'s gradient at `step`: different on every rank, the same on every run.
fn gradient(rank: u32, step: u64) -> Vec<f32> {
    (0..WIDTH)
        .map(|i| ((rank as usize + 1) * (step as usize % 97 + 3) + i) as f32 % 7.0 / 7.0)
        .collect()
}

/// A fingerprint of the weights, equal on ranks whose weights are equal bit for bit.
fn hash(w: &[f32]) -> u64 {
    w.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
        (h ^ u64::from(x.to_bits())).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Sends (group rank 0) or receives the training state, `[step, weights…]`, after an
/// admission. A loss meanwhile costs every side the same broadcast (none of them completes
/// it), so each runs it again on the smaller group.
fn share_state<B: PgBackend>(pg: &ProcessGroup<B>, step: &mut u64, w: &mut [f32]) -> Result<()> {
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
    step: &mut u64,
    w: &mut [f32],
) -> Result<()> {
    let mut state = vec![*step as f32];
    state.extend_from_slice(w);
    let mut buf = pg.upload(&state)?;
    pg.broadcast(&mut buf, pg.ranks()[0])?.wait()?;
    let got = pg.download(&buf)?;
    *step = got[0] as u64;
    w.copy_from_slice(&got[1..]);
    Ok(())
}

/// One step's gradient average: through a coalescing block on even steps (two halves), one
/// all-reduce on odd ones, so both paths keep the rank in.
fn average<B: PgBackend>(pg: &ProcessGroup<B>, g: &[f32], step: u64) -> Result<Vec<f32>> {
    if step.is_multiple_of(2) {
        let (lo, hi) = g.split_at(WIDTH / 2);
        let (mut a, mut b) = (pg.upload(lo)?, pg.upload(hi)?);
        let mut block = pg.start_coalescing()?;
        block.all_reduce(&mut a, ReduceOp::Avg)?;
        block.all_reduce(&mut b, ReduceOp::Avg)?;
        block.end()?.wait()?;
        let mut out = pg.download(&a)?;
        out.extend(pg.download(&b)?);
        Ok(out)
    } else {
        let mut buf = pg.upload(g)?;
        pg.all_reduce(&mut buf, ReduceOp::Avg)?.wait()?;
        pg.download(&buf)
    }
}

/// Trains until the driver's stop file appears.
fn train<B: PgBackend>(
    pg: &ProcessGroup<B>,
    mut step: u64,
    w: &mut [f32],
    stop: &std::path::Path,
    slow: Duration,
) -> Result<u64> {
    let me = pg.global_rank();
    while !stop.exists() {
        let g = match average(pg, &gradient(me, step), step) {
            Ok(g) => g,
            Err(Error::MembersLost {
                lost, epoch, cause, ..
            }) => {
                // Whether a work of the watchdog's timed out (it dumps then), or an init.
                let work = cause.contains("WorkNCCL(");
                println!("LOST rank={me} epoch={epoch} lost=[{lost}] step={step} work={work}");
                continue;
            }
            Err(e) => return Err(e),
        };
        for (w, g) in w.iter_mut().zip(&g) {
            *w -= 0.1 * g;
        }
        step += 1;
        report(pg, step, w);
        if pg.admit()? > 0 {
            share_state(pg, &mut step, w)?;
            println!("ADMITTED rank={me} epoch={} size={}", pg.epoch(), pg.size());
        }
        std::thread::sleep(Duration::from_millis(20) + slow);
    }
    Ok(step)
}

/// `STEP` line: what every member must agree on after a step (epoch, members, weights).
fn report<B: PgBackend>(pg: &ProcessGroup<B>, step: u64, w: &[f32]) {
    let members: Vec<String> = pg.ranks().iter().map(u32::to_string).collect();
    println!(
        "STEP rank={} step={step} epoch={} members={} hash={:016x}",
        pg.global_rank(),
        pg.epoch(),
        members.join(","),
        hash(w)
    );
}

/// What this process is to do.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A member from the start.
    New,
    /// A replacement, or a hostile join.
    Join,
}

struct Process {
    boot: Bootstrap,
    opts: PgOptions,
    role: Role,
    stop: PathBuf,
    slow: Duration,
}

impl WithBackend for Process {
    type Output = Result<()>;
    fn run<B: PgBackend>(self, backend: B) -> Result<()> {
        let Process {
            boot,
            opts,
            role,
            stop,
            slow,
        } = self;
        let mut w = vec![1.0f32; WIDTH];
        let (pg, step) = match role {
            Role::Join => {
                let pg = ProcessGroup::join(
                    backend,
                    boot.group_store(),
                    boot.rank,
                    boot.world_size,
                    opts,
                )?;
                println!(
                    "JOINED rank={} epoch={} size={}",
                    boot.rank,
                    pg.epoch(),
                    pg.size()
                );
                let mut step = 0;
                share_state(&pg, &mut step, &mut w)?;
                (pg, step)
            }
            Role::New => {
                let pg = ProcessGroup::new(
                    backend,
                    boot.group_store(),
                    boot.rank,
                    boot.world_size,
                    opts,
                )?;
                println!("MADE rank={}", boot.rank);
                (pg, 0)
            }
        };
        let step = train(&pg, step, &mut w, &stop, slow)?;
        println!(
            "FINAL rank={} step={step} epoch={} hash={:016x}",
            pg.global_rank(),
            pg.epoch(),
            hash(&w)
        );
        pg.destroy();
        Ok(())
    }
}

/// The variant of an error, as the driver checks it.
fn variant(e: &Error) -> String {
    match e {
        Error::InvalidArgument { arg, .. } => format!("InvalidArgument:{arg}"),
        Error::Aborted { .. } => "Aborted".into(),
        Error::Timeout { .. } => "Timeout".into(),
        Error::Remote { .. } => "Remote".into(),
        Error::Backend { .. } => "Backend".into(),
        Error::InvalidState { .. } => "InvalidState".into(),
        Error::MembersLost { .. } => "MembersLost".into(),
        _ => "Other".into(),
    }
}

/// The process's main: runs its role and says how it ended (`END`), returning the exit code.
pub fn main() -> i32 {
    let _ = env_logger::try_init();
    let began = Instant::now();
    let var = |k: &str| std::env::var(k).ok();
    let role = match var("CHAOS_ROLE").as_deref() {
        Some("join") => Role::Join,
        _ => Role::New,
    };
    let stop = PathBuf::from(var("CHAOS_STOP").unwrap_or_default());
    let slow = Duration::from_millis(
        var("CHAOS_SLOW_MS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    let delay = var("CHAOS_DELAY_MS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // A late rank: the others wait for it at the world's first init.
    std::thread::sleep(Duration::from_millis(delay));
    let run = || -> Result<()> {
        let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
        let env = EnvConfig::from_lookup(|k| vars.get(k).map(String::as_str))?;
        let boot = Bootstrap::from_env()?;
        let mut opts = PgOptions::from_config(&env, None);
        opts.device = boot.device;
        opts.elastic = true;
        println!("PID rank={} pid={}", boot.rank, std::process::id());
        with_backend(
            &env,
            Process {
                boot,
                opts,
                role,
                stop,
                slow,
            },
        )?
    };
    let out = run();
    let ms = began.elapsed().as_millis();
    match out {
        Ok(()) => {
            println!("END ok ms={ms}");
            EXIT_DONE
        }
        Err(e) => {
            let v = variant(&e);
            println!("END {v} ms={ms} {}", e.to_string().replace('\n', " "));
            match &e {
                Error::InvalidArgument { .. } => EXIT_REFUSED,
                Error::Aborted { .. } => EXIT_OUT,
                _ => EXIT_FAILED,
            }
        }
    }
}

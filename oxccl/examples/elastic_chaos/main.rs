//! A chaos run of the elastic process group: a driver keeps a world of 4–8 processes
//! training on the mock (over a TCP store served by a process of its own) while it injects,
//! at random from a seed it prints, kills, stops and continues, duplicate and racing joins,
//! `new`s of a live rank, a frozen or killed store host, late and slow ranks, and checks all
//! along that no rank at work is left out, every member agrees on members, epoch and weights
//! after each step, every refused process gets its typed error, and nothing outlives its
//! bound. It prints a summary (events by kind, steps, recovery times) and its verdict; it
//! exits non-zero on any violation.
//!
//! Run it: `cargo run --release --example elastic_chaos -- [--seed S] [--secs D] [--ranks N]
//! [--timeout-ms T] [--log FILE]` (defaults: a seed from the clock, 60 s, 4 ranks, 3000 ms). A failing
//! seed replays the same choices (the processes' timing still varies).

mod checks;
mod driver;
mod rank;

use std::time::Duration;

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn main() {
    if let Some(port) = std::env::var("CHAOS_STORE_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
    {
        driver::serve_store(port);
    }
    if std::env::var_os("RANK").is_some() {
        std::process::exit(rank::main());
    }
    let args: Vec<String> = std::env::args().collect();
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let settings = driver::Settings {
        seed: arg(&args, "--seed").unwrap_or(clock),
        run_for: Duration::from_secs(arg(&args, "--secs").unwrap_or(60)),
        ranks: arg(&args, "--ranks").unwrap_or(4u32).clamp(3, 8),
        timeout: Duration::from_millis(arg(&args, "--timeout-ms").unwrap_or(3000)),
        log: arg(&args, "--log"),
    };
    let mut d = match driver::Driver::new(settings) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("elastic_chaos: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = d.run() {
        eprintln!("elastic_chaos: {e}");
        std::process::exit(2);
    }
    std::process::exit(i32::from(!d.violations.is_empty()));
}

//! `oxccl store bench`: a TCP store server under fan-in from N simulated ranks, for oxccl's
//! server, PyTorch's libuv server, or both in one run.
//!
//! Each server runs in a process of its own ([`server`]) so that its memory and CPU are
//! read from `/proc` ([`proc_stat`]); the ranks are light non-blocking connections spread
//! over client processes ([`light`], [`rank`]) that report to this one ([`messages`]).
//! [`fanin`] runs one fan-in and checks its counts, [`ops`] measures small-value
//! throughput, [`report`] prints the columns. A failed column says what was measured when
//! it failed ([`failure`]). No child outlives the run ([`procs`]).

mod args;
mod error;
mod failure;
mod fanin;
mod light;
mod messages;
mod ops;
mod proc_stat;
mod procs;
mod rank;
mod report;
mod server;

pub use args::BenchArgs;
pub use light::{run_client, ClientArgs};

use crate::exit;
use args::Plan;
use error::BenchError;
use failure::{Phase, Stop};
use report::{Column, Measured};
use server::ServerKind;
use std::process::ExitCode;

/// Runs the bench and prints its report; exit 1 when a server failed or miscounted.
pub fn run(a: &BenchArgs) -> ExitCode {
    let plan = match Plan::new(a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("oxccl store bench: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let mut cols = Vec::with_capacity(plan.servers.len());
    for &kind in &plan.servers {
        eprintln!(
            "oxccl store bench: the {} server, {} ranks, {} rounds",
            kind.name(),
            plan.ranks,
            plan.rounds
        );
        // A failed column's error is in the report.
        let result = measure(&plan, kind);
        cols.push(Column { kind, result });
    }
    if a.json {
        println!("{}", crate::shown::json(&report::json(&plan, &cols)));
    } else {
        print!("{}", report::text(&plan, &cols));
    }
    let failed = cols.iter().find_map(|c| match &c.result {
        Err(e) => Some(e.exit_code()),
        Ok(m) if !m.complete(&plan) => Some(exit::FAILED),
        Ok(_) => None,
    });
    failed.map_or(ExitCode::SUCCESS, ExitCode::from)
}

/// One server's column: started, fanned in on, read back, timed, killed.
fn measure(plan: &Plan, kind: ServerKind) -> Result<Measured, BenchError> {
    let mut server = server::start(kind, &plan.python, plan.timeout)?;
    // Fresh keys per server and run, so no run sees another's.
    let run = format!(
        "{}-{}-{}",
        std::process::id(),
        kind.name(),
        proc_stat::mono_ns()
    );
    let fanin = fanin::run(plan, &mut server, &run)?;
    // The store clients below connect from 127.0.0.1.
    let failed = |server: &mut server::Server, phase, began, e: BenchError| {
        let stop = Stop::new(phase, began, e.to_string());
        server.failed(stop, Some(std::net::Ipv4Addr::LOCALHOST))
    };
    let began = proc_stat::mono_ns();
    let stored_counts =
        match ops::stored_counts(server.port, &run, plan.ranks, plan.rounds, plan.timeout) {
            Ok(()) => true,
            Err(BenchError::Wrong(why)) => {
                eprintln!("oxccl store bench: the {} server: {why}", kind.name());
                false
            }
            Err(e) => return Err(failed(&mut server, Phase::Readback, began, e)),
        };
    let began = proc_stat::mono_ns();
    let ops_per_s = match plan.ops_clients {
        0 => None,
        n => match ops::ops_per_sec(server.port, n, plan.timeout) {
            Ok(v) => Some(v),
            Err(e) => return Err(failed(&mut server, Phase::Ops, began, e)),
        },
    };
    let pid = server.proc.pid();
    let peak_rss_kib = proc_stat::hwm_kib(pid)
        .ok_or_else(|| BenchError::Run(format!("cannot read /proc/{pid} of the server")))?;
    // Killed and reaped here, before the next server starts.
    drop(server);
    Ok(Measured {
        fanin,
        stored_counts,
        peak_rss_kib,
        ops_per_s,
    })
}

//! `oxccl perf`: reads the options, picks the backend, runs the sweep there and reports it
//! as a table, JSON or an SVG chart; exit 1 when a result is wrong.

use super::args::{LayerSel, PerfArgs};
use super::backend::choose;
use super::drive::Plan;
use super::{mock, modes, nccl, ping_pong, report, svg, tune};
use crate::exit;
use crate::ops;
use clap::ValueEnum;
use std::process::ExitCode;

/// Runs `oxccl perf`.
pub fn run(a: &PerfArgs) -> ExitCode {
    let (use_nccl, why) = match choose(a.backend, a.library.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("oxccl perf: {e}");
            return ExitCode::from(exit::ENV);
        }
    };
    if a.tune {
        return tune::main(a, use_nccl, &why);
    }
    if a.ping_pong {
        return ping_pong::main(a, use_nccl, &why);
    }
    match modes::pg_table(a.registration, a.tuned.as_deref()) {
        Ok(Some(t)) => modes::set_pg_table(t),
        Ok(None) => {}
        Err(e) => {
            eprintln!("oxccl perf: {e}");
            return ExitCode::from(exit::USAGE);
        }
    }
    let mock = !use_nccl;
    let layers: Vec<&'static str> = match (a.layer, mock) {
        (LayerSel::Pg | LayerSel::All, _) if mock => vec!["pg"],
        (_, true) => {
            eprintln!("oxccl perf: --layer {} needs NCCL and a GPU ({why}); use --layer pg on the mock world", a.layer.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default());
            return ExitCode::from(exit::ENV);
        }
        // -R on the process group runs CommBuf buffers in a group of that mode (with -G, in
        // graphs of that group).
        (LayerSel::All, false) => vec!["raw", "comm", "pg"],
        (LayerSel::Raw, false) => vec!["raw"],
        (LayerSel::Comm, false) => vec!["comm"],
        (LayerSel::Pg, false) => vec!["pg"],
    };
    let min = a.min_bytes.unwrap_or(8);
    let max = a
        .max_bytes
        .unwrap_or(if mock { 1 << 20 } else { 128 << 20 });
    // The mock keeps every rank's buffers in this process's memory: bounded so that a large
    // -e is an error, not an allocation failure.
    const MOCK_MAX: usize = 256 << 20;
    if mock && max > MOCK_MAX {
        eprintln!("oxccl perf: -e {max} on the mock world, which holds every rank's buffers in host memory: give -e 256M or less there");
        return ExitCode::from(exit::USAGE);
    }
    let sizes = ops::sweep(min, max, a.factor as usize, a.incr.unwrap_or(0));
    if sizes.is_empty() {
        eprintln!(
            "oxccl perf: -b {min} is above -e {max}: give a smallest size at most the largest"
        );
        return ExitCode::from(exit::USAGE);
    }
    let plan = Plan {
        colls: ops::expand(&a.colls),
        sizes,
        dtype: a.dtype,
        redop: a.redop,
        root: a.root,
        iters: a.iters.unwrap_or(if mock { 5 } else { 20 }) as usize,
        warmup: a.warmup.unwrap_or(if mock { 1 } else { 5 }) as usize,
        check: a.check == 1,
        layers,
    };
    let outcome = if mock {
        mock::run_mock(a, &plan, &why)
    } else {
        nccl::run(a, &plan)
    };
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("oxccl perf: {e}");
            return ExitCode::from(exit::ENV);
        }
    };
    let Some(merged) = outcome.merged else {
        return ExitCode::SUCCESS;
    };
    let rows = report::rows(&plan, &merged, outcome.n);
    if a.json {
        let v = report::to_json(&plan, &rows, outcome.head.clone());
        println!("{}", crate::shown::json(&v));
    } else {
        println!("# {}", crate::info::str_of(&outcome.head["first_line"]));
        print!("{}", report::table(&plan, &rows));
    }
    if let Some(path) = &a.json_out {
        let v = report::to_json(&plan, &rows, outcome.head.clone());
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&v).unwrap_or_default()) {
            eprintln!(
                "oxccl perf: cannot write --json-out {}: {e}",
                oxccl::escaped_path(path)
            );
            return ExitCode::from(exit::ENV);
        }
    }
    if let Some(path) = &a.svg {
        let title = format!(
            "oxccl perf on {} ({} ranks, {})",
            outcome.head["backend"].as_str().unwrap_or("?"),
            outcome.n,
            plan.dtype.name()
        );
        if let Err(e) = std::fs::write(path, svg::chart(&rows, &title)) {
            eprintln!(
                "oxccl perf: cannot write --svg {}: {e}",
                oxccl::escaped_path(path)
            );
            return ExitCode::from(exit::ENV);
        }
    }
    if report::wrong_total(&rows) > 0 {
        eprintln!(
            "oxccl perf: {} wrong elements: the results do not match the host reference",
            report::wrong_total(&rows)
        );
        return ExitCode::from(exit::FAILED);
    }
    ExitCode::SUCCESS
}

//! What a measurement runs, resolved once from its options: the sweep that `perf` and `tune`
//! share (collectives × sizes, iterations), `perf`'s whole plan (the backend, the layers and
//! how they are set up, where the report goes), and why a command stops instead.

use super::args::{CaseArgs, KernelsSel, LayerChoice, PerfArgs, SweepArgs};
use super::backend::Ground;
use super::layer::LayerKind;
use crate::exit;
use crate::ops::{self, Coll, Dtype, Redop};
use clap::ValueEnum;
use oxccl::core::peer_kernels::PeerPolicy;
use oxccl::pg::{RegMode, TuneTable};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Why a command stops: its exit code and one line saying what to change.
#[derive(Debug)]
pub struct Failure {
    /// The exit code (see [`crate::exit`]).
    pub code: u8,
    /// The line printed after the command's name.
    pub why: String,
}

impl Failure {
    /// A wrong command line.
    pub fn usage(why: impl Into<String>) -> Failure {
        Failure {
            code: exit::USAGE,
            why: why.into(),
        }
    }

    /// Something the environment lacks (a library, a GPU, a writable path).
    pub fn env(why: impl Into<String>) -> Failure {
        Failure {
            code: exit::ENV,
            why: why.into(),
        }
    }

    /// Says why on stderr, as `oxccl COMMAND: why`, and gives the exit code.
    pub fn exit(self, command: &str) -> ExitCode {
        eprintln!("oxccl {command}: {}", self.why);
        ExitCode::from(self.code)
    }
}

/// The mock keeps every rank's buffers in this process's memory: bounded so that a large -e
/// is an error, not an allocation failure.
const MOCK_MAX: usize = 256 << 20;

/// What every rank runs, the same on each: every collective at every size.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// Collectives in order.
    pub colls: Vec<Coll>,
    /// Sizes in bytes.
    pub sizes: Vec<usize>,
    /// Element type.
    pub dtype: Dtype,
    /// Reduce operator.
    pub redop: Redop,
    /// Root rank.
    pub root: u32,
    /// Timed iterations per measurement.
    pub iters: usize,
    /// Untimed iterations first.
    pub warmup: usize,
    /// Check the results (one more run, compared with the host reference).
    pub check: bool,
}

impl Sweep {
    /// The sweep of `case` over `sweep`'s sizes, with the defaults of NCCL or, smaller, of the
    /// mock world.
    pub fn of(case: &CaseArgs, sweep: &SweepArgs, mock: bool) -> Result<Sweep, Failure> {
        let min = sweep.min_bytes.unwrap_or(8);
        let max = sweep
            .max_bytes
            .unwrap_or(if mock { 1 << 20 } else { 128 << 20 });
        if mock && max > MOCK_MAX {
            return Err(Failure::usage(format!("-e {max} on the mock world, which holds every rank's buffers in host memory: give -e 256M or less there")));
        }
        Ok(Sweep {
            colls: ops::expand(&case.colls),
            sizes: sizes(sweep, min, max)?,
            dtype: case.dtype,
            redop: case.redop,
            root: case.root,
            iters: sweep.iters.unwrap_or(if mock { 5 } else { 20 }) as usize,
            warmup: sweep.warmup.unwrap_or(if mock { 1 } else { 5 }) as usize,
            check: case.check == 1,
        })
    }
}

/// One collective at one size of a sweep on the world's ranks: what its case moves, and how
/// its bandwidth counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SweepPoint {
    /// The collective.
    pub coll: Coll,
    /// The sweep's size, as asked for.
    pub size: usize,
    /// Elements of the whole array, rounded down so that every rank's part is whole.
    pub count: usize,
    /// Bytes of the whole array (nccl-tests' size column).
    pub bytes: usize,
    /// nccl-tests' bus-bandwidth factor on these ranks.
    pub bus_factor: f64,
}

impl Sweep {
    /// Every collective at every size on `n` ranks, collective by collective.
    pub fn points(&self, n: u32) -> Vec<SweepPoint> {
        let elem = self.dtype.size();
        let mut out = Vec::with_capacity(self.colls.len() * self.sizes.len());
        for coll in &self.colls {
            for size in &self.sizes {
                let count = coll.count_for(*size, elem, n);
                out.push(SweepPoint {
                    coll: *coll,
                    size: *size,
                    count,
                    bytes: count * elem,
                    bus_factor: coll.bus_factor(n),
                });
            }
        }
        out
    }
}

/// The sizes from `min` to `max` by -f (or -i); refused when there is none.
pub fn sizes(sweep: &SweepArgs, min: usize, max: usize) -> Result<Vec<usize>, Failure> {
    let sizes = ops::sweep(min, max, sweep.factor as usize, sweep.incr.unwrap_or(0));
    if sizes.is_empty() {
        return Err(Failure::usage(format!(
            "-b {min} is above -e {max}: give a smallest size at most the largest"
        )));
    }
    Ok(sizes)
}

/// How a rank's layers are set up.
#[derive(Clone, Default)]
pub struct LayerOpts {
    /// -R for the raw and comm layers: 0 plain, 1 registered, 2 symmetric windows.
    pub registration: u8,
    /// -G: graph launches (0: no graph).
    pub graphs: u32,
    /// The hidden --inject-error, on this rank.
    pub corrupt: bool,
    /// -z 0: the communicator is nonblocking.
    pub nonblocking: bool,
    /// The pg layer runs on `NcclBuf` (the memory the raw and comm layers take by default)
    /// instead of the backend's own buffers (see [`super::direct::library_memory`]).
    pub library_bufs: bool,
    /// The tune table the pg layer runs under (-R 1|2, --tuned): its buffers are then
    /// CommBuf buffers in a group of that table.
    pub pg_table: Option<Arc<TuneTable>>,
}

/// Where `oxccl perf` reports besides stdout, and in which form.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// One JSON object on stdout instead of the table.
    pub json: bool,
    /// The JSON report written to this file too.
    pub json_out: Option<PathBuf>,
    /// The SVG chart written to this file.
    pub svg: Option<PathBuf>,
    /// Seconds between progress lines on stderr where it is not a terminal (0: every size).
    pub progress_every: u64,
}

/// What `oxccl perf` runs, and where, resolved once from its options.
pub struct Plan {
    /// NCCL or the mock world.
    pub ground: Ground,
    /// -g: the ranks this process drives (`None`: every visible GPU, 2 on the mock).
    pub gpus: Option<u32>,
    /// The collectives and sizes every rank runs.
    pub sweep: Sweep,
    /// The layers timed side by side, in the order they are reported.
    pub layers: Vec<LayerKind>,
    /// How every rank sets them up; `corrupt` is the run's (rank 0's layers corrupt).
    pub opts: LayerOpts,
    /// -z: blocking communicators.
    pub blocking: bool,
    /// Who runs the comm and pg layers' collectives that oxccl's kernels have (`None`: as
    /// `OXCCL_PEER_KERNELS` says).
    pub kernels: Option<PeerPolicy>,
    /// Where the report goes.
    pub output: Output,
}

impl Plan {
    /// The plan `a` asks for on the backend found here.
    pub fn of(a: &PerfArgs) -> Result<Plan, Failure> {
        let ground =
            Ground::of(a.world.backend, a.world.library.as_deref()).map_err(Failure::env)?;
        // The pg layer's table: --tuned FILE, else -R 1|2 as a uniform table.
        let pg_table = match &a.tuned {
            Some(path) => Some(Arc::new(
                oxccl::pg::load_tune_file(path)
                    .map_err(|e| Failure::usage(format!("--tuned: {e}")))?,
            )),
            None => RegMode::ALL
                .into_iter()
                .find(|m| m.level() == a.registration && a.registration > 0)
                .map(|m| Arc::new(TuneTable::uniform(m))),
        };
        let layers = match (&ground, a.layer) {
            (Ground::Mock(_), LayerChoice::Pg | LayerChoice::All) => vec![LayerKind::Pg],
            (Ground::Mock(why), choice) => {
                let name = choice.to_possible_value().map(|v| v.get_name().to_owned());
                return Err(Failure::env(format!(
                    "--layer {} needs NCCL and a GPU ({why}); use --layer pg on the mock world",
                    name.unwrap_or_default()
                )));
            }
            (Ground::Nccl(_), LayerChoice::All) => LayerKind::ALL.to_vec(),
            (Ground::Nccl(_), LayerChoice::Raw) => vec![LayerKind::Raw],
            (Ground::Nccl(_), LayerChoice::Comm) => vec![LayerKind::Comm],
            (Ground::Nccl(_), LayerChoice::Pg) => vec![LayerKind::Pg],
        };
        let sweep = Sweep::of(&a.case, &a.sweep, ground.is_mock())?;
        for (what, path) in [("--json-out", &a.json_out), ("--svg", &a.svg)] {
            if let Some(p) = path {
                crate::output::check(what, p).map_err(Failure::usage)?;
            }
        }
        Ok(Plan {
            ground,
            gpus: a.world.gpus,
            sweep,
            layers,
            opts: LayerOpts {
                registration: a.registration,
                graphs: a.graphs,
                corrupt: a.inject_error,
                nonblocking: a.blocking == 0,
                library_bufs: false,
                pg_table,
            },
            blocking: a.blocking == 1,
            kernels: a.peer_kernels.map(KernelsSel::policy),
            output: Output {
                json: a.json,
                json_out: a.json_out.clone(),
                svg: a.svg.clone(),
                progress_every: a.progress_every,
            },
        })
    }
}

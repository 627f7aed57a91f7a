//! The environment and launcher parsers on arbitrary variables: `EnvConfig::from_lookup`,
//! `env::resolve` (PyTorch's names beside oxccl's), `LaunchInfo::resolve` (torchrun, Slurm,
//! Open MPI, PMI, explicit) and Slurm host lists.
//! They never panic; a refusal names a variable that is set (or the caller's `rank` /
//! `world_size`); an accepted launch has its rank below its size; a host list yields exactly
//! the hosts it counts, each non-empty and within the host-name bound; every refusal's
//! `Display` writes no control or bidi character raw, whatever the values hold.

use arbitrary::{Arbitrary, Unstructured};
use oxccl_core::Error;
use oxccl_rules::env::{resolve, EnvConfig, TORCH_VARIABLES, VARIABLES};
use oxccl_rules::launch::{HostList, LaunchInfo, HOST_CAPACITY};

/// The launchers' variables (the runtime's own come from `VARIABLES`).
const LAUNCH_VARS: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RUN_ID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_NODELIST",
];

/// Each launcher's variables: naming one that is unset is right when another is set.
const FAMILIES: &[&[&str]] = &[
    &[
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
    ],
    &[
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
        "SLURM_NODEID",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_TASKS_PER_NODE",
    ],
    &[
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ],
    &["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"],
];

/// Values the parsers care about, so the fuzzer reaches past the first check quickly.
const SEEDS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "8",
    "-1",
    "65535",
    "65536",
    "true",
    "false",
    "yes",
    "0x10",
    "18446744073709551616",
    "4294967296",
    "",
    " 1",
    "node[01-04,7]",
    "a,b",
    "n[1-3]x[2-3]",
    "[",
    "n[3-1]",
    "127.0.0.1",
    "2(x3)",
    "4,2(x2)",
];

#[derive(Debug, Arbitrary)]
struct Input {
    vars: Vec<(u8, Value)>,
    rank: Option<u32>,
    world_size: Option<u32>,
    hostlist: String,
}

#[derive(Debug, Arbitrary)]
enum Value {
    Seed(u8),
    Any(String),
}

fn names() -> impl Iterator<Item = &'static str> {
    VARIABLES
        .iter()
        .map(|v| v.0)
        .chain(LAUNCH_VARS.iter().copied())
        .chain(TORCH_VARIABLES.iter().map(|v| v.name))
        .chain(["TORCH_NCCL_NOT_A_SETTING"])
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let all: Vec<&str> = names().collect();
    let mut env: Vec<(&str, String)> = Vec::new();
    for (i, v) in &input.vars {
        let name = all[usize::from(*i) % all.len()];
        let value = match v {
            Value::Seed(s) => SEEDS[usize::from(*s) % SEEDS.len()].to_string(),
            Value::Any(s) => s.clone(),
        };
        env.retain(|(n, _)| *n != name);
        env.push((name, value));
    }
    let lookup = |name: &str| {
        env.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    };
    let is_set = |name: &str| lookup(name).is_some();

    // Whatever the values hold, a refusal shows them escaped.
    let refusals = [
        EnvConfig::from_lookup(lookup).err(),
        LaunchInfo::resolve(lookup, input.rank, input.world_size).err(),
        HostList::parse("SLURM_NODELIST", &input.hostlist).err(),
    ];
    for e in refusals.iter().flatten() {
        super::text::assert_shows_safely(e);
    }

    match EnvConfig::from_lookup(lookup) {
        Ok(cfg) => {
            let _ = format!("{cfg:?}");
        }
        Err(Error::InvalidArgument { arg, .. }) => assert!(is_set(arg), "{arg} is not set"),
        Err(e) => panic!("from_lookup refused with {e:?}"),
    }

    // PyTorch's names beside oxccl's: a refusal names a variable that is set, every note
    // shows safely, and without any PyTorch name that sets a twin the decision is
    // `from_lookup`'s.
    let settings = resolve(env.iter().map(|(n, v)| (*n, v.as_str())));
    match &settings.config {
        Ok(_) => {}
        Err(Error::InvalidArgument { arg, .. }) => assert!(is_set(arg), "{arg} is not set"),
        Err(e) => panic!("resolve refused with {e:?}"),
    }
    for note in &settings.notes {
        super::text::assert_shows_safely(note);
        assert!(is_set(&note.name), "{} noted but not set", note.name);
    }
    let twins_set = TORCH_VARIABLES
        .iter()
        .any(|v| v.twin().is_some() && is_set(v.name));
    if !twins_set {
        assert_eq!(settings.config, EnvConfig::from_lookup(lookup));
    }

    match LaunchInfo::resolve(lookup, input.rank, input.world_size) {
        Ok(info) => {
            assert!(info.rank < info.world_size, "{info:?}");
            if let Some(r) = input.rank {
                assert_eq!(info.rank, r);
            }
            if let Some(w) = input.world_size {
                assert_eq!(info.world_size, w);
            }
        }
        Err(e) => {
            let named = match &e {
                Error::InvalidArgument { arg, .. } => *arg,
                Error::InvalidState { attempted, .. } => attempted,
                other => panic!("resolve refused with {other:?}"),
            };
            // With no launcher's variables at all, torchrun's RANK is named as the one to set.
            let no_launcher = ["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"]
                .iter()
                .all(|v| !is_set(v));
            // A missing partner is named when one of its launcher's variables is set.
            let family_set = FAMILIES
                .iter()
                .any(|f| f.contains(&named) && f.iter().any(|v| is_set(v)));
            assert!(
                is_set(named)
                    || family_set
                    || named == "rank"
                    || named == "world_size"
                    || (named == "RANK" && no_launcher),
                "{named} named but not set: {e}"
            );
        }
    }

    match HostList::parse("SLURM_NODELIST", &input.hostlist) {
        Ok(list) => {
            assert!(!list.is_empty());
            let mut n: u64 = 0;
            for host in list.iter().take(512) {
                assert!(!host.is_empty() && host.len() <= HOST_CAPACITY);
                n += 1;
            }
            assert_eq!(n, list.len().min(512));
            assert_eq!(Some(list.first()), list.iter().next());
        }
        Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "SLURM_NODELIST"),
        Err(e) => panic!("hostlist refused with {e:?}"),
    }
}

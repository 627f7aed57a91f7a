use super::*;

fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
    move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

fn host(s: &str) -> HostName {
    let mut h = HostName::new();
    h.push_str(s).unwrap();
    h
}

/// The argument an error names, and its expectation text.
fn invalid(e: Error) -> (&'static str, Text) {
    match e {
        Error::InvalidArgument { arg, expected } => (arg, expected),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

use oxccl_core::text::Text;

fn detect_err(pairs: &[(&str, &str)]) -> (&'static str, Text) {
    invalid(LaunchInfo::detect(env(pairs)).unwrap_err())
}

#[test]
fn torchrun() {
    let pairs = [
        ("RANK", "3"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_USE_AGENT_STORE", "True"),
    ];
    let info = LaunchInfo::detect(env(&pairs)).unwrap();
    assert_eq!(
        info,
        LaunchInfo {
            launcher: Launcher::Torchrun,
            rank: 3,
            world_size: 8,
            local_rank: Some(1),
            local_world_size: Some(2),
            master_addr: Some(host("10.0.0.1")),
            master_port: Some(29500),
            derived_port: None,
            use_agent_store: true,
        }
    );
    let bare = [("RANK", "0"), ("WORLD_SIZE", "1")];
    let info = LaunchInfo::detect(env(&bare)).unwrap();
    assert_eq!((info.rank, info.world_size), (0, 1));
    assert_eq!((info.local_rank, info.local_world_size), (None, None));
    assert_eq!((info.master_addr, info.master_port), (None, None));
    assert!(!info.use_agent_store);
}

#[test]
fn slurm() {
    let pairs = [
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "7"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "2"),
        ("SLURM_TASKS_PER_NODE", "2(x3),1"),
        ("SLURM_STEP_NODELIST", "gpu[07-09],cpu1"),
        ("SLURM_NODELIST", "other"),
        ("MASTER_PORT", "1234"),
    ];
    let info = LaunchInfo::detect(env(&pairs)).unwrap();
    assert_eq!(
        info,
        LaunchInfo {
            launcher: Launcher::Slurm,
            rank: 5,
            world_size: 7,
            local_rank: Some(1),
            local_world_size: Some(2),
            master_addr: Some(host("gpu07")),
            master_port: Some(1234),
            derived_port: None,
            use_agent_store: false,
        }
    );
}

#[test]
fn slurm_without_master_port_derives_it_from_the_job_step() {
    let srun = [
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_ID", "123456"),
        ("SLURM_STEP_ID", "7"),
        ("SLURM_STEP_NODELIST", "gpu[07-08]"),
    ];
    let info = LaunchInfo::detect(env(&srun)).unwrap();
    let step = SlurmStep {
        job_id: 123456,
        step_id: 7,
    };
    assert_eq!(info.master_port, Some(slurm_port(123456, 7)));
    assert_eq!(info.derived_port, Some(step));
    assert_eq!(info.store_port(), Ok(28135));
    assert_eq!(info.master_addr, Some(host("gpu07")));
    // An explicit MASTER_PORT wins, and the ids are then not read at all.
    let mut explicit: heapless::Vec<(&str, &str), 8> = srun.iter().copied().collect();
    explicit.push(("MASTER_PORT", "29511")).unwrap();
    explicit[2] = ("SLURM_JOB_ID", "not-a-number");
    let info = LaunchInfo::detect(env(&explicit)).unwrap();
    assert_eq!((info.master_port, info.derived_port), (Some(29511), None));
    // Another step of the job: another port.
    let mut next = srun;
    next[3] = ("SLURM_STEP_ID", "8");
    let other = LaunchInfo::detect(env(&next)).unwrap().master_port;
    assert_ne!(other, Some(28135));
    // No step id: the batch step's.
    let info = LaunchInfo::detect(env(&srun[..3])).unwrap();
    assert_eq!(
        info.derived_port,
        Some(SlurmStep {
            job_id: 123456,
            step_id: SLURM_BATCH_STEP
        })
    );
}

#[test]
fn the_slurm_port_only_for_srun_and_only_when_the_ids_are_usable() {
    // mpirun inside an allocation: its ranks may see different steps, so nothing is derived.
    let mpi = [
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("SLURM_JOB_ID", "5"),
        ("SLURM_STEP_ID", "0"),
    ];
    let info = LaunchInfo::detect(env(&mpi)).unwrap();
    assert_eq!((info.master_port, info.derived_port), (None, None));
    let (arg, text) = invalid(info.store_port().unwrap_err());
    assert_eq!(arg, "MASTER_PORT");
    assert!(!text.contains("SLURM"), "{text}");
    // srun without a job id: the error names every variable that could have given the port.
    let bare = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")];
    let info = LaunchInfo::detect(env(&bare)).unwrap();
    assert_eq!(info.master_port, None);
    let (arg, text) = invalid(info.store_port().unwrap_err());
    assert_eq!(arg, "MASTER_PORT");
    assert!(
        text.contains("SLURM_JOB_ID") && text.contains("SLURM_STEP_ID"),
        "{text}"
    );
    // Ids that are not Slurm's: an error naming the variable.
    for (var, bad) in [("SLURM_JOB_ID", "12x"), ("SLURM_STEP_ID", "-1")] {
        let mut pairs: heapless::Vec<(&str, &str), 8> = bare.iter().copied().collect();
        pairs.push(("SLURM_JOB_ID", "9")).unwrap();
        pairs.push((var, bad)).unwrap();
        if var == "SLURM_JOB_ID" {
            pairs.remove(2);
        }
        assert_eq!(detect_err(&pairs).0, var, "{pairs:?}");
    }
}

#[test]
fn slurm_local_size_and_master_sources() {
    let base = [
        ("SLURM_PROCID", "6"),
        ("SLURM_NTASKS", "7"),
        ("SLURM_LOCALID", "0"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v: heapless::Vec<(&str, &str), 12> = heapless::Vec::new();
        for p in base.iter().chain(extra) {
            v.push(*p).unwrap();
        }
        LaunchInfo::detect(env(&v))
    };
    // The last node has one task; a per-node count wins over the list.
    let i = with(&[("SLURM_NODEID", "3"), ("SLURM_TASKS_PER_NODE", "2(x3),1")]).unwrap();
    assert_eq!(i.local_world_size, Some(1));
    let i = with(&[
        ("SLURM_NTASKS_PER_NODE", "4"),
        ("SLURM_TASKS_PER_NODE", "2(x3),1"),
    ])
    .unwrap();
    assert_eq!(i.local_world_size, Some(4));
    // Uniform counts need no node id; mixed counts without one are unknown.
    let i = with(&[("SLURM_TASKS_PER_NODE", "4(x2)")]).unwrap();
    assert_eq!(i.local_world_size, Some(4));
    let i = with(&[("SLURM_TASKS_PER_NODE", "2(x3),1")]).unwrap();
    assert_eq!(i.local_world_size, None);
    // Node list fallback, and MASTER_ADDR first.
    let i = with(&[("SLURM_NODELIST", "node[01-04]")]).unwrap();
    assert_eq!(i.master_addr, Some(host("node01")));
    let i = with(&[("SLURM_NODELIST", "node[01-04]"), ("MASTER_ADDR", "head")]).unwrap();
    assert_eq!(i.master_addr, Some(host("head")));
    // Malformed Slurm details name their variable.
    for (var, value) in [
        ("SLURM_TASKS_PER_NODE", "2(x3"),
        ("SLURM_TASKS_PER_NODE", "0"),
        ("SLURM_TASKS_PER_NODE", ""),
        ("SLURM_TASKS_PER_NODE", "2(x0)"),
        ("SLURM_NTASKS_PER_NODE", "two"),
        ("SLURM_NODELIST", "node[01-"),
    ] {
        let (arg, _) = invalid(with(&[(var, value)]).unwrap_err());
        assert_eq!(arg, var, "{var}={value}");
    }
    let (arg, _) =
        invalid(with(&[("SLURM_NODEID", "9"), ("SLURM_TASKS_PER_NODE", "2(x3),1")]).unwrap_err());
    assert_eq!(arg, "SLURM_NODEID");
    // Local id not below the local size.
    let pairs = [
        ("SLURM_PROCID", "6"),
        ("SLURM_NTASKS", "7"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NTASKS_PER_NODE", "1"),
    ];
    assert_eq!(detect_err(&pairs).0, "SLURM_LOCALID");
}

#[test]
fn open_mpi() {
    let pairs = [
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ("MASTER_ADDR", "h"),
    ];
    let info = LaunchInfo::detect(env(&pairs)).unwrap();
    assert_eq!(info.launcher, Launcher::OpenMpi);
    assert_eq!((info.rank, info.world_size), (2, 4));
    assert_eq!((info.local_rank, info.local_world_size), (Some(0), Some(2)));
    assert_eq!(info.master_addr, Some(host("h")));
}

#[test]
fn mpich() {
    let pairs = [
        ("PMI_RANK", "1"),
        ("PMI_SIZE", "2"),
        ("MPI_LOCALRANKID", "1"),
        ("MPI_LOCALNRANKS", "2"),
    ];
    let info = LaunchInfo::detect(env(&pairs)).unwrap();
    assert_eq!(info.launcher, Launcher::Mpich);
    assert_eq!((info.rank, info.world_size), (1, 2));
    assert_eq!((info.local_rank, info.local_world_size), (Some(1), Some(2)));
}

#[test]
fn hand_set_rank_conflicting_with_a_launcher_is_an_error() {
    let (arg, text) = detect_err(&[
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("SLURM_PROCID", "2"),
        ("SLURM_NTASKS", "4"),
    ]);
    assert_eq!(arg, "RANK");
    assert_eq!(text.as_str(), "RANK=1 to agree with SLURM_PROCID=2");
    let (arg, text) = detect_err(&[
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
    ]);
    assert_eq!(arg, "WORLD_SIZE");
    assert_eq!(
        text.as_str(),
        "WORLD_SIZE=4 to agree with OMPI_COMM_WORLD_SIZE=8"
    );
    let (arg, _) = detect_err(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("PMI_RANK", "1"),
        ("PMI_SIZE", "2"),
    ]);
    assert_eq!(arg, "RANK");
    // Agreeing values are fine; torchrun wins.
    let pairs = [
        ("RANK", "2"),
        ("WORLD_SIZE", "4"),
        ("SLURM_PROCID", "2"),
        ("SLURM_NTASKS", "4"),
    ];
    assert_eq!(
        LaunchInfo::detect(env(&pairs)).unwrap().launcher,
        Launcher::Torchrun
    );
}

#[test]
fn torchrun_agent_ignores_the_outer_launcher() {
    // `srun torchrun`: Slurm numbers the agents (nodes), torchrun the workers.
    let pairs = [
        ("RANK", "5"),
        ("WORLD_SIZE", "8"),
        ("TORCHELASTIC_RUN_ID", "none"),
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
    ];
    let info = LaunchInfo::detect(env(&pairs)).unwrap();
    assert_eq!(
        (info.launcher, info.rank, info.world_size),
        (Launcher::Torchrun, 5, 8)
    );
}

#[test]
fn mpi_wins_over_slurm_and_mpis_must_agree() {
    // mpirun inside an allocation inherits the batch step's SLURM_PROCID=0.
    let pairs = [
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
    ];
    let info = LaunchInfo::detect(env(&pairs)).unwrap();
    assert_eq!((info.launcher, info.rank), (Launcher::OpenMpi, 3));
    // A partial Slurm set does not matter when MPI decides.
    let pairs = [("PMI_RANK", "1"), ("PMI_SIZE", "2"), ("SLURM_PROCID", "0")];
    assert_eq!(
        LaunchInfo::detect(env(&pairs)).unwrap().launcher,
        Launcher::Mpich
    );
    let (arg, text) = detect_err(&[
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("PMI_RANK", "2"),
        ("PMI_SIZE", "4"),
    ]);
    assert_eq!(arg, "OMPI_COMM_WORLD_RANK");
    assert_eq!(
        text.as_str(),
        "OMPI_COMM_WORLD_RANK=3 to agree with PMI_RANK=2"
    );
}

#[test]
fn partial_and_invalid_sets_name_their_variables() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("RANK", "0")], "WORLD_SIZE"),
        (&[("WORLD_SIZE", "2")], "RANK"),
        (&[("RANK", "2"), ("WORLD_SIZE", "2")], "RANK"),
        (&[("RANK", "0"), ("WORLD_SIZE", "0")], "WORLD_SIZE"),
        (&[("RANK", "x"), ("WORLD_SIZE", "2")], "RANK"),
        (&[("RANK", "-1"), ("WORLD_SIZE", "2")], "RANK"),
        (&[("RANK", "0"), ("WORLD_SIZE", "4294967296")], "WORLD_SIZE"),
        (&[("RANK", ""), ("WORLD_SIZE", "2")], "RANK"),
        (
            &[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "y")],
            "LOCAL_RANK",
        ),
        (
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_RANK", "2"),
                ("LOCAL_WORLD_SIZE", "2"),
            ],
            "LOCAL_RANK",
        ),
        (
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_WORLD_SIZE", "0"),
            ],
            "LOCAL_WORLD_SIZE",
        ),
        (
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_WORLD_SIZE", "3"),
            ],
            "LOCAL_WORLD_SIZE",
        ),
        (
            &[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "2")],
            "LOCAL_RANK",
        ),
        (
            &[
                ("OMPI_COMM_WORLD_RANK", "0"),
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "3"),
            ],
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ),
        (&[("SLURM_PROCID", "0")], "SLURM_NTASKS"),
        (
            &[("SLURM_PROCID", "4"), ("SLURM_NTASKS", "4")],
            "SLURM_PROCID",
        ),
        (&[("OMPI_COMM_WORLD_SIZE", "4")], "OMPI_COMM_WORLD_RANK"),
        (&[("PMI_RANK", "0"), ("PMI_SIZE", "zero")], "PMI_SIZE"),
        (&[], "RANK"),
        (
            &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "0")],
            "MASTER_PORT",
        ),
        (
            &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "65536")],
            "MASTER_PORT",
        ),
        (
            &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "http")],
            "MASTER_PORT",
        ),
        (
            &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "")],
            "MASTER_ADDR",
        ),
        (
            &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "a b")],
            "MASTER_ADDR",
        ),
        (
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "1"),
                ("TORCHELASTIC_USE_AGENT_STORE", "yes"),
            ],
            "TORCHELASTIC_USE_AGENT_STORE",
        ),
    ];
    for (pairs, want) in cases {
        let (arg, _) = detect_err(pairs);
        assert_eq!(arg, *want, "{pairs:?}");
    }
    let (_, text) = detect_err(&[("RANK", "2"), ("WORLD_SIZE", "2")]);
    assert_eq!(text.as_str(), "a rank below WORLD_SIZE=2, got 2");
    let long = [b'h'; 256];
    let long = core::str::from_utf8(&long).unwrap();
    let (arg, _) = detect_err(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", long)]);
    assert_eq!(arg, "MASTER_ADDR");
}

#[test]
fn explicit_arguments_win() {
    let pairs = [("RANK", "1"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1")];
    let info = LaunchInfo::resolve(env(&pairs), Some(0), Some(2)).unwrap();
    assert_eq!(info.launcher, Launcher::Explicit);
    assert_eq!(
        (info.rank, info.world_size, info.local_rank),
        (0, 2, Some(1))
    );
    // Nothing in the environment at all.
    let info = LaunchInfo::resolve(|_| None, Some(1), Some(3)).unwrap();
    assert_eq!(
        (info.launcher, info.rank, info.world_size, info.local_rank),
        (Launcher::Explicit, 1, 3, None)
    );
    // Half explicit: the other half from the launcher.
    let info = LaunchInfo::resolve(env(&pairs), Some(3), None).unwrap();
    assert_eq!(
        (info.launcher, info.rank, info.world_size),
        (Launcher::Torchrun, 3, 4)
    );
    let (arg, _) = invalid(LaunchInfo::resolve(env(&pairs), Some(4), None).unwrap_err());
    assert_eq!(arg, "rank");
    let (arg, _) = invalid(LaunchInfo::resolve(env(&pairs), Some(0), Some(1)).unwrap_err());
    assert_eq!(arg, "LOCAL_RANK");
    let (arg, _) = invalid(LaunchInfo::resolve(|_| None, Some(0), Some(0)).unwrap_err());
    assert_eq!(arg, "world_size");
    let (arg, text) = invalid(LaunchInfo::resolve(env(&pairs), None, Some(1)).unwrap_err());
    assert_eq!(
        (arg, text.as_str()),
        ("RANK", "a rank below world_size=1, got 1")
    );
}

#[test]
fn agent_store_flag() {
    for (v, want) in [("True", true), ("False", false), ("1", true), ("0", false)] {
        let pairs = [
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("TORCHELASTIC_USE_AGENT_STORE", v),
        ];
        assert_eq!(
            LaunchInfo::detect(env(&pairs)).unwrap().use_agent_store,
            want
        );
    }
}

fn expand(list: &str) -> heapless::Vec<HostName, 16> {
    HostList::parse("L", list)
        .unwrap()
        .iter()
        .take(16)
        .collect()
}

fn names(list: &[&str]) -> heapless::Vec<HostName, 16> {
    list.iter().map(|s| host(s)).collect()
}

#[test]
fn hostlist_forms() {
    assert_eq!(
        expand("node[01-04,07],gpu-[1-2]"),
        names(&["node01", "node02", "node03", "node04", "node07", "gpu-1", "gpu-2"])
    );
    assert_eq!(expand("a,b"), names(&["a", "b"]));
    assert_eq!(expand("host"), names(&["host"]));
    assert_eq!(expand("n[8-10]"), names(&["n8", "n9", "n10"]));
    assert_eq!(
        expand("n[098-101]"),
        names(&["n098", "n099", "n100", "n101"])
    );
    assert_eq!(expand("[1-2]"), names(&["1", "2"]));
    assert_eq!(expand("n[1-2]-ib"), names(&["n1-ib", "n2-ib"]));
    assert_eq!(
        expand("r[1-2]n[1-2]"),
        names(&["r1n1", "r1n2", "r2n1", "r2n2"])
    );
    assert_eq!(expand("x[3]"), names(&["x3"]));
    let l = HostList::parse("L", "node[01-04,07],gpu-[1-2]").unwrap();
    assert_eq!(l.len(), 7);
    assert!(!l.is_empty());
    assert_eq!(l.first(), host("node01"));
    assert_eq!((&l).into_iter().count(), 7);
    // A huge list is validated and its first host found without expanding it.
    let big = HostList::parse("L", "n[0-999999999999999999]").unwrap();
    assert_eq!(big.len(), 1_000_000_000_000_000_000);
    assert_eq!(big.first(), host("n0"));
}

#[test]
fn hostlist_errors_name_the_variable() {
    let long = [b'h'; 256];
    let long = core::str::from_utf8(&long).unwrap();
    for bad in [
        "",
        "a,,b",
        "a,",
        ",a",
        "n[",
        "n]",
        "n[1-]",
        "n[-1]",
        "n[2-1]",
        "n[]",
        "n[a]",
        "n[1,]",
        "n[[1]]",
        "a b",
        "n[1-2:2]",
        "n[0000000000000000001]",
        "a[0-999999999999999999]b[0-999999999999999999]",
        long,
    ] {
        let e = HostList::parse("SLURM_NODELIST", bad).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    arg: "SLURM_NODELIST",
                    ..
                }
            ),
            "{bad:?}"
        );
    }
    let (_, text) = invalid(HostList::parse("V", "n[2-1]").unwrap_err());
    assert_eq!(
        text.as_str(),
        "a host list like node[01-04,7]: a range whose end is below its start, got \"n[2-1]\""
    );
}

/// No launcher's variables and no rank given: the error names `RANK`, lists what a launcher
/// sets, and carries the fix a newcomer needs (a launcher, or ranks as threads).
#[test]
fn no_launcher_is_refused_with_the_fix() {
    let e = LaunchInfo::resolve(|_| None, None, None).unwrap_err();
    let (arg, expected) = invalid(e.clone());
    assert_eq!(arg, "RANK");
    assert!(expected.contains("RANK+WORLD_SIZE") && expected.contains("none is set"));
    assert_eq!(e.fix(), Some(oxccl_core::Fix::StartRanks));
    assert!(alloc::format!("{e:?}").contains("oxccl::launch::spawn"));
}

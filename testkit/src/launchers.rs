//! The variables launchers give each process they start, for tests that start ranks as
//! child processes the way torchrun, Slurm's srun, Open MPI's mpirun and MPICH's Hydra do
//! (their master's port: [`free_port`](crate::ranks::free_port)).

/// `(name, value)` pairs as owned strings.
pub fn vars(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// torchrun's variables for rank `r` of `n` on one node, the master at 127.0.0.1:`port`.
pub fn torchrun(r: u32, n: u32, port: u16) -> Vec<(String, String)> {
    vars(&[
        ("RANK", r.to_string()),
        ("WORLD_SIZE", n.to_string()),
        ("LOCAL_RANK", r.to_string()),
        ("LOCAL_WORLD_SIZE", n.to_string()),
        ("MASTER_ADDR", "127.0.0.1".into()),
        ("MASTER_PORT", port.to_string()),
    ])
}

/// srun's variables for task `r` of `n` on one node; the master is the first host of the
/// step's node list (127.0.0.1), on `port`.
pub fn slurm(r: u32, n: u32, port: u16) -> Vec<(String, String)> {
    vars(&[
        ("SLURM_PROCID", r.to_string()),
        ("SLURM_NTASKS", n.to_string()),
        ("SLURM_LOCALID", r.to_string()),
        ("SLURM_NODEID", "0".into()),
        ("SLURM_TASKS_PER_NODE", n.to_string()),
        ("SLURM_STEP_NODELIST", "127.0.0.[1-3]".into()),
        ("MASTER_PORT", port.to_string()),
    ])
}

/// srun's variables for task `r` of `n` of job `job`'s step `step` on one node, without
/// `MASTER_PORT`: the master is the first host of the step's node list (127.0.0.1), on the port
/// the job and step give (`oxccl::rules::launch::slurm_port`).
pub fn slurm_step(r: u32, n: u32, job: u32, step: u32) -> Vec<(String, String)> {
    let mut v = slurm(r, n, 0);
    v.retain(|(k, _)| k != "MASTER_PORT");
    v.push(("SLURM_JOB_ID".into(), job.to_string()));
    v.push(("SLURM_STEP_ID".into(), step.to_string()));
    v
}

/// The rank variables of every launcher: cleared from a child's environment so that only
/// those a test gives it are seen.
pub const LAUNCH_VARS: [&str; 20] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
];

//! The port of rank 0's store under `srun` when `MASTER_PORT` is unset: derived from the job and
//! step ids, which every task of a step sees alike, so the ranks meet without a wrapper script.
//!
//! The rule ([`SLURM_PORT_RULE`]):
//!
//! ```text
//! port = 20000 + (5063 × SLURM_JOB_ID + SLURM_STEP_ID) mod 8192
//! ```
//!
//! - The range 20000..=28191 lies above the well-known and most registered service ports
//!   (below 1024, and the common ones under 20000), below torchrun's defaults (29400, 29500),
//!   and below the Linux ephemeral range (32768 up), where the kernel picks the local ports of
//!   outgoing connections, so a derived port is not taken by a passing connection.
//! - Two steps of one job whose step ids differ by less than 8192 get different ports: the
//!   step id is added, not hashed. Slurm's special step ids are numbers near 2³² (the batch
//!   step 4294967294, the extern step 4294967295, the interactive step 4294967290); since 2³²
//!   is a multiple of 8192 they count as −2, −1 and −6, so they never meet the job's steps
//!   0 … 8185. A missing step id (a process of the batch script itself) counts as the batch
//!   step. `SLURM_STEPID`, the older name, is read when `SLURM_STEP_ID` is unset.
//! - Jobs are spread by 5063, an odd number near 8192 divided by the golden ratio: jobs
//!   submitted one after another (consecutive ids) land far apart in the range, so two jobs
//!   sharing a node rarely meet. Nothing can promise that for every pair of jobs: an explicit
//!   `MASTER_PORT` always wins.

use crate::env::parse_u64;
use oxccl_core::error::{Error, Result};

/// The first port the Slurm rule gives.
pub const SLURM_PORT_BASE: u16 = 20_000;

/// How many ports the Slurm rule uses, from [`SLURM_PORT_BASE`] on. A power of two dividing
/// 2³², so the step ids Slurm reserves near 2³² act as small negative numbers.
pub const SLURM_PORT_SPAN: u16 = 8_192;

// Above the well-known ports, below torchrun's defaults and the Linux ephemeral range.
const _: () =
    assert!(SLURM_PORT_BASE > 1_024 && SLURM_PORT_BASE as u32 + SLURM_PORT_SPAN as u32 <= 29_400);

/// What the job id is multiplied by (see the module's text).
const JOB_STRIDE: u64 = 5_063;

/// The rule, as the log and `oxccl info` state it.
pub const SLURM_PORT_RULE: &str = "20000 + (5063 × SLURM_JOB_ID + SLURM_STEP_ID) mod 8192";

/// Slurm's step id of the batch script (`SLURM_BATCH_SCRIPT`), used when no step id is set.
pub const SLURM_BATCH_STEP: u32 = 0xffff_fffe;

/// The Slurm job step a port was derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlurmStep {
    /// `SLURM_JOB_ID`.
    pub job_id: u32,
    /// `SLURM_STEP_ID` (or `SLURM_STEPID`), [`SLURM_BATCH_STEP`] when neither is set.
    pub step_id: u32,
}

impl SlurmStep {
    /// The port of rank 0's store for this step: [`slurm_port`].
    pub fn port(self) -> u16 {
        slurm_port(self.job_id, self.step_id)
    }
}

/// The port [`SLURM_PORT_RULE`] gives job `job_id`'s step `step_id`: in
/// `SLURM_PORT_BASE..SLURM_PORT_BASE + SLURM_PORT_SPAN`, the same for every task of the step.
pub const fn slurm_port(job_id: u32, step_id: u32) -> u16 {
    let span = SLURM_PORT_SPAN as u64;
    let offset = ((job_id as u64 % span) * JOB_STRIDE + step_id as u64) % span;
    // `offset < SLURM_PORT_SPAN`, so the sum stays below 28192 and the cast is exact.
    SLURM_PORT_BASE + offset as u16
}

/// The job step the launcher's variables name: `SLURM_JOB_ID`, and `SLURM_STEP_ID` (else
/// `SLURM_STEPID`, else the batch step). `Ok(None)` when `SLURM_JOB_ID` is unset; a value that
/// is not a number Slurm could give is an error naming its variable.
pub fn slurm_step<'a>(lookup: impl Fn(&str) -> Option<&'a str>) -> Result<Option<SlurmStep>> {
    let Some(job) = lookup("SLURM_JOB_ID") else {
        return Ok(None);
    };
    let job_id = id("SLURM_JOB_ID", job)?;
    let step_id = match (lookup("SLURM_STEP_ID"), lookup("SLURM_STEPID")) {
        (Some(v), _) => id("SLURM_STEP_ID", v)?,
        (None, Some(v)) => id("SLURM_STEPID", v)?,
        (None, None) => SLURM_BATCH_STEP,
    };
    Ok(Some(SlurmStep { job_id, step_id }))
}

/// A Slurm id: a 32-bit unsigned number.
fn id(var: &'static str, v: &str) -> Result<u32> {
    let n = parse_u64(var, v, 0, u64::from(u32::MAX))?;
    // The range checked above makes the conversion exact.
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The error of an `env://` launch that has no port for rank 0's store: `MASTER_PORT` unset
/// and, under `srun` (`slurm`), no `SLURM_JOB_ID` to derive one from.
pub fn missing_port(slurm: bool) -> Error {
    if slurm {
        Error::invalid(
            "MASTER_PORT",
            format_args!(
                "the port of rank 0's store for env://, or SLURM_JOB_ID (with SLURM_STEP_ID) to \
                 derive it by {SLURM_PORT_RULE}; neither is set"
            ),
        )
    } else {
        Error::invalid(
            "MASTER_PORT",
            format_args!("the port of rank 0's store for env://, but it is unset"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    const LAST: u16 = SLURM_PORT_BASE + SLURM_PORT_SPAN - 1;

    #[test]
    fn the_rule_as_documented() {
        assert_eq!(slurm_port(0, 0), 20_000);
        assert_eq!(slurm_port(0, 1), 20_001);
        assert_eq!(slurm_port(1, 0), 20_000 + 5_063);
        // (5063 × 123456 + 7) mod 8192 = 8135.
        assert_eq!(slurm_port(123_456, 7), 20_000 + 8_135);
        assert_eq!(
            u64::from(slurm_port(123_456, 7)),
            20_000 + (5_063 * 123_456 + 7) % 8_192
        );
        // Deterministic: the same ids, the same port, in every task.
        assert_eq!(slurm_port(987_654, 3), slurm_port(987_654, 3));
        assert_eq!(
            SlurmStep {
                job_id: 9,
                step_id: 2
            }
            .port(),
            slurm_port(9, 2)
        );
    }

    #[test]
    fn always_inside_the_range_below_the_ephemeral_ports() {
        for job in [
            0,
            1,
            2,
            4_095,
            8_191,
            8_192,
            1 << 20,
            u32::MAX - 1,
            u32::MAX,
        ] {
            for step in [0, 1, 8_191, 8_192, SLURM_BATCH_STEP, u32::MAX, 0xffff_fffa] {
                let p = slurm_port(job, step);
                assert!((SLURM_PORT_BASE..=LAST).contains(&p), "{job} {step}: {p}");
            }
        }
    }

    #[test]
    fn steps_of_one_job_never_share_a_port() {
        for job in [0, 1, 77, 4_194_303, u32::MAX] {
            let mut seen = [false; SLURM_PORT_SPAN as usize];
            // The special steps (interactive, batch, extern), then the ordinary ones.
            let special = [0xffff_fffa, SLURM_BATCH_STEP, u32::MAX];
            let steps = special.into_iter().chain(0..SLURM_PORT_SPAN as u32 - 6);
            for step in steps {
                let i = usize::from(slurm_port(job, step) - SLURM_PORT_BASE);
                assert!(
                    !seen[i],
                    "job {job}: step {step} shares port {}",
                    i + 20_000
                );
                seen[i] = true;
            }
        }
        // Any two steps closer than the span.
        assert_ne!(slurm_port(5, 100), slurm_port(5, 100 + 8_191));
        assert_eq!(slurm_port(5, 100), slurm_port(5, 100 + 8_192));
    }

    #[test]
    fn consecutive_jobs_land_far_apart() {
        for j in 0..64u32 {
            let a = i32::from(slurm_port(1_000 + j, 0));
            let b = i32::from(slurm_port(1_001 + j, 0));
            let d = (a - b).rem_euclid(8_192).min((b - a).rem_euclid(8_192));
            assert!(d > 1_000, "jobs {} and {}: {d}", 1_000 + j, 1_001 + j);
        }
    }

    #[test]
    fn the_ids_from_the_environment() {
        let s = |pairs: &[(&str, &str)]| slurm_step(env(pairs));
        assert_eq!(s(&[]).unwrap(), None);
        assert_eq!(s(&[("SLURM_STEP_ID", "3")]).unwrap(), None);
        let step = |job, step_id| {
            Some(SlurmStep {
                job_id: job,
                step_id,
            })
        };
        assert_eq!(
            s(&[("SLURM_JOB_ID", "42"), ("SLURM_STEP_ID", "3")]).unwrap(),
            step(42, 3)
        );
        // The older name, and the batch step when neither is set.
        assert_eq!(
            s(&[("SLURM_JOB_ID", "42"), ("SLURM_STEPID", "5")]).unwrap(),
            step(42, 5)
        );
        assert_eq!(
            s(&[
                ("SLURM_JOB_ID", "42"),
                ("SLURM_STEP_ID", "6"),
                ("SLURM_STEPID", "5")
            ])
            .unwrap(),
            step(42, 6)
        );
        assert_eq!(
            s(&[("SLURM_JOB_ID", "42")]).unwrap(),
            step(42, SLURM_BATCH_STEP)
        );
        assert_eq!(
            s(&[("SLURM_JOB_ID", "42"), ("SLURM_STEP_ID", "4294967294")]).unwrap(),
            step(42, SLURM_BATCH_STEP)
        );
        assert_eq!(
            s(&[
                ("SLURM_JOB_ID", "4294967295"),
                ("SLURM_STEP_ID", "4294967295")
            ])
            .unwrap(),
            step(u32::MAX, u32::MAX)
        );
        // The batch step and step 0 of one job differ.
        assert_ne!(slurm_port(42, SLURM_BATCH_STEP), slurm_port(42, 0));
    }

    #[test]
    fn bad_ids_name_their_variable() {
        for (pairs, var) in [
            (&[("SLURM_JOB_ID", "")][..], "SLURM_JOB_ID"),
            (&[("SLURM_JOB_ID", "12a")], "SLURM_JOB_ID"),
            (&[("SLURM_JOB_ID", "-1")], "SLURM_JOB_ID"),
            (&[("SLURM_JOB_ID", "4294967296")], "SLURM_JOB_ID"),
            (
                &[("SLURM_JOB_ID", "1"), ("SLURM_STEP_ID", "x")],
                "SLURM_STEP_ID",
            ),
            (
                &[("SLURM_JOB_ID", "1"), ("SLURM_STEP_ID", "4294967296")],
                "SLURM_STEP_ID",
            ),
            (
                &[("SLURM_JOB_ID", "1"), ("SLURM_STEPID", " 1")],
                "SLURM_STEPID",
            ),
        ] {
            match slurm_step(env(pairs)) {
                Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, var, "{pairs:?}"),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_missing_port_names_the_variables() {
        match missing_port(true) {
            Error::InvalidArgument { arg, expected } => {
                assert_eq!(arg, "MASTER_PORT");
                assert!(expected.contains("SLURM_JOB_ID"), "{expected}");
                assert!(expected.contains("SLURM_STEP_ID"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
        match missing_port(false) {
            Error::InvalidArgument { arg, expected } => {
                assert_eq!(arg, "MASTER_PORT");
                assert!(!expected.contains("SLURM"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
    }
}

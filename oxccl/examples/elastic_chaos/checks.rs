//! The invariants the chaos run holds its world to, read from what the processes print:
//! members agree on the weights after every step and on who the members are at every epoch;
//! no process ends in a way its part did not allow; nothing outlives its bound.

use std::collections::HashMap;

/// A `key=value` field of a line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// What every member printed after its steps, by world (one per store the run started).
#[derive(Default)]
pub struct Agreement {
    /// (world, step) → the weights' fingerprint and who printed it first.
    weights: HashMap<(u32, u64), (String, u32)>,
    /// (world, epoch) → the members and who printed them first.
    members: HashMap<(u32, u64), (String, u32)>,
    /// Steps seen, all worlds.
    pub steps: u64,
}

impl Agreement {
    /// Takes a `STEP` line of rank `rank` in world `world`; a disagreement, if any.
    pub fn step(&mut self, world: u32, line: &str) -> Option<String> {
        let rank: u32 = field(line, "rank")?.parse().ok()?;
        let step: u64 = field(line, "step")?.parse().ok()?;
        let epoch: u64 = field(line, "epoch")?.parse().ok()?;
        let members = field(line, "members")?.to_string();
        let hash = field(line, "hash")?.to_string();
        self.steps += 1;
        let mut out = None;
        let w = self
            .weights
            .entry((world, step))
            .or_insert((hash.clone(), rank));
        if w.0 != hash {
            out = Some(format!(
                "world {world} step {step}: rank {rank}'s weights {hash} differ from rank {}'s {}",
                w.1, w.0
            ));
        }
        let m = self
            .members
            .entry((world, epoch))
            .or_insert((members.clone(), rank));
        if m.0 != members {
            out = Some(format!(
                "world {world} epoch {epoch}: rank {rank} has members {members}, rank {} has {}",
                m.1, m.0
            ));
        }
        out
    }
}

/// How a process may end, given its part and what was done to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// Trains until told to stop: any other end is a violation.
    Train,
    /// Killed, or stopped past the timeout, or its store lost: any end, but within the bound.
    AnyEnd,
    /// Refused with `InvalidArgument` naming this argument.
    Refused(&'static str),
    /// A replacement before it joined: it trains once admitted (then [`Allowed::Train`]);
    /// before, it may be refused naming `rank` (another process took the rank, or the members
    /// did not decide the rank lost within its timeout) or time out waiting for an admission
    /// (the members were still recovering): typed ends within its timeout, which a launcher
    /// meets by starting another.
    Replacement,
}

/// Whether a process of part `allowed` may end with exit `code` and `END` line `end` (after
/// the driver asked every process to stop when `stopping`).
pub fn end_allowed(
    allowed: Allowed,
    code: Option<i32>,
    end: &str,
    stopping: bool,
) -> Result<(), String> {
    let variant = end.split_whitespace().nth(1).unwrap_or("none");
    let ok = match allowed {
        Allowed::AnyEnd => true,
        Allowed::Train => stopping && variant == "ok",
        Allowed::Refused(arg) => variant == format!("InvalidArgument:{arg}"),
        Allowed::Replacement => {
            (stopping && variant == "ok")
                || variant == "InvalidArgument:rank"
                || variant == "Timeout"
        }
    };
    match ok {
        true => Ok(()),
        false => Err(format!(
            "ended with code {code:?} and `{end}`, allowed {allowed:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disagreements_are_found() {
        let mut a = Agreement::default();
        assert!(a
            .step(0, "STEP rank=0 step=3 epoch=0 members=0,1 hash=aa")
            .is_none());
        assert!(a
            .step(0, "STEP rank=1 step=3 epoch=0 members=0,1 hash=aa")
            .is_none());
        assert!(a
            .step(0, "STEP rank=1 step=4 epoch=0 members=0,1 hash=bb")
            .is_none());
        assert!(a
            .step(0, "STEP rank=0 step=4 epoch=0 members=0,1 hash=cc")
            .is_some());
        assert!(a
            .step(0, "STEP rank=0 step=5 epoch=0 members=0 hash=dd")
            .is_some());
        assert!(a
            .step(1, "STEP rank=0 step=3 epoch=0 members=0 hash=ee")
            .is_none());
    }

    #[test]
    fn ends_are_judged_by_part() {
        assert!(end_allowed(Allowed::Train, Some(0), "END ok ms=3", true).is_ok());
        assert!(end_allowed(Allowed::Train, Some(4), "END Aborted ms=3 x", false).is_err());
        assert!(end_allowed(
            Allowed::Refused("store"),
            Some(3),
            "END InvalidArgument:store ms=1",
            false
        )
        .is_ok());
        assert!(end_allowed(Allowed::Refused("rank"), Some(0), "END ok ms=1", true).is_err());
        assert!(end_allowed(
            Allowed::Replacement,
            Some(3),
            "END InvalidArgument:rank ms=1",
            false
        )
        .is_ok());
    }
}

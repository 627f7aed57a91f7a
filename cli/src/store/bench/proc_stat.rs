//! What the bench reads about a server process from `/proc` (memory, CPU time, open
//! descriptors), and the one clock every process of a run shares.

use std::path::PathBuf;

/// CLOCK_MONOTONIC in nanoseconds: one clock for the whole machine, so timestamps taken in the
/// client processes compare with the parent's.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

/// Seconds between two [`mono_ns`] readings (0 when `to` is not after `from`).
pub fn secs_between(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1e9
}

fn proc_file(pid: u32, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{name}"))
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(proc_file(pid, "status")).ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The resident set now, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS")
}

/// The largest resident set so far, in KiB.
pub fn hwm_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM")
}

/// User plus system CPU time of all the process's threads so far, in seconds.
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(proc_file(pid, "stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15; `after` starts at field 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) as f64 / ticks as f64)
}

/// How many descriptors the process has open.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(proc_file(pid, "fd")).ok()?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_as_a_server_would() {
        let me = std::process::id();
        assert!(rss_kib(me).unwrap() > 0);
        assert!(hwm_kib(me).unwrap() >= rss_kib(me).unwrap() / 2);
        assert!(cpu_secs(me).unwrap() >= 0.0);
        assert!(open_fds(me).unwrap() >= 3);
        let a = mono_ns();
        assert!(mono_ns() >= a);
    }
}

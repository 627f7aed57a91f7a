//! Split of the mock world across processes, and the bound on its init: ranks as child
//! processes of this test binary (see `oxccl_testkit::ranks`), each printing what it saw.
//!
//! A child is this binary run with `--exact child` and `OXCCL_MPS_CHILD` naming its scenario;
//! without that variable the `child` test does nothing.

#[path = "mock_processes/ops.rs"]
mod ops;
#[path = "mock_processes_split/child.rs"]
mod split_child;

use oxccl::launch::{init_process_group, WithProcessGroup};
use oxccl::mock::MockBackend;
use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::{Device, Error, ReduceOp, Result};
use oxccl_testkit::ranks::{field, free_port, rank_command, wait_all, Ran};
use split_child::{members, LIMIT_MS};
use std::time::{Duration, Instant};

const CHILD: &str = "OXCCL_MPS_CHILD";
/// How long a test waits for its children before killing them (a hang fails, never blocks CI).
const DEADLINE: Duration = Duration::from_secs(90);

#[test]
fn child() {
    let Ok(scenario) = std::env::var(CHILD) else {
        return;
    };
    let _ = env_logger::try_init();
    let parts: Vec<&str> = scenario.split(':').collect();
    let r = match parts.as_slice() {
        ["layout", l, mode] => split_child::layout(l, *mode == "nb"),
        ["abort"] => split_child::abort(),
        ["abandon"] => split_child::abandon(),
        ["kill", victim, when] => split_child::kill(victim.parse().unwrap(), *when == "late"),
        ["pg"] => pg_subgroups(),
        ["missing"] => init_process_group(Missing),
        ["missing_split"] => missing_split(),
        other => panic!("unknown scenario {other:?}"),
    };
    if let Err(e) = r {
        println!("CHILD ERROR {e}");
        std::process::exit(3);
    }
}

/// Subgroups of a process group whose ranks are bound to devices: made by split at once
/// (non-members take part with no color), as in one process; every op on a subgroup of all.
fn pg_subgroups() -> Result<()> {
    let boot = oxccl::launch::Bootstrap::from_env()?;
    let mut opts = PgOptions::from_env(None)?;
    opts.bound_device = Some(Device(boot.rank));
    let pg = ProcessGroup::new(
        MockBackend::for_processes(),
        boot.store,
        boot.rank,
        boot.world_size,
        opts,
    )?;
    let me = pg.global_rank();
    let (mine, _all) = pg.new_subgroups(2)?;
    let mut b = mine.upload(&[me as f32; 8])?;
    mine.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
    let sub = mine.download(&b)?[0];
    let everyone: Vec<u32> = (0..pg.size()).collect();
    let whole = pg.new_group(&everyone, None)?;
    let mut checked = ops::all_ops::<f32, _>(&whole)?;
    checked += ops::all_ops::<i64, _>(&whole)?;
    println!(
        "RESULT rank={me} sub={sub} checked={checked} splits={}",
        pg.split_count()
    );
    pg_finish(&pg, None)
}

/// `missing_split`: ranks bound to devices make their communicator, then every rank but the
/// last makes a subgroup of all (split at once, collective over the parent); the last never
/// calls it. The others' `new_group` fails once the group's timeout passed, naming it.
fn missing_split() -> Result<()> {
    let boot = oxccl::launch::Bootstrap::from_env()?;
    let mut opts = PgOptions::from_env(None)?;
    opts.bound_device = Some(Device(boot.rank));
    let pg = ProcessGroup::new(
        MockBackend::for_processes(),
        boot.store,
        boot.rank,
        boot.world_size,
        opts,
    )?;
    let me = pg.global_rank();
    if me == pg.size() - 1 {
        println!("RESULT rank={me} absent=1");
        return pg_finish(&pg, None);
    }
    let everyone: Vec<u32> = (0..pg.size()).collect();
    let start = Instant::now();
    let r = pg.new_group(&everyone, None);
    let ms = start.elapsed().as_millis();
    let err = match &r {
        Ok(_) => "none",
        Err(Error::Timeout { .. }) => "Timeout",
        Err(_) => "Other",
    };
    println!("RESULT rank={me} err={err} ms={ms}");
    if let Err(e) = r {
        println!("DETAIL rank={me} {e}");
    }
    pg_finish(&pg, None)
}

/// Every rank but `skip` says it is done; rank 0 (which hosts the store, and here the mock
/// communicator too) waits for them.
fn pg_finish<B: PgBackend>(pg: &ProcessGroup<B>, skip: Option<u32>) -> Result<()> {
    let me = pg.global_rank();
    match pg.store().set(&format!("done/{me}"), b"1") {
        Err(Error::Remote { .. }) if me != 0 => return Ok(()),
        other => other?,
    }
    if me == 0 {
        let keys: Vec<String> = (0..pg.size())
            .filter(|r| Some(*r) != skip)
            .map(|r| format!("done/{r}"))
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        pg.store().wait(&keys, Duration::from_secs(60))?;
    }
    Ok(())
}

/// `missing`: the last rank never makes the communicator; the others' first op fails once the
/// group's timeout (OXCCL_TIMEOUT_MS) passed, naming it.
struct Missing;

impl WithProcessGroup for Missing {
    type Output = ();
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<()> {
        let me = pg.global_rank();
        if me == pg.size() - 1 {
            println!("RESULT rank={me} absent=1");
            return Ok(());
        }
        let mut b = pg.upload(&[1.0f32; 4])?;
        let start = Instant::now();
        let r = pg.all_reduce(&mut b, ReduceOp::Sum).and_then(|w| w.wait());
        let ms = start.elapsed().as_millis();
        let err = match &r {
            Ok(()) => "none",
            Err(Error::Timeout { .. }) => "Timeout",
            Err(_) => "Other",
        };
        println!("RESULT rank={me} err={err} ms={ms}");
        if let Err(e) = r {
            println!("DETAIL rank={me} {e}");
        }
        // Rank 0's process hosts the others' answers: it leaves after they have theirs.
        pg_finish(&pg, Some(pg.size() - 1))
    }
}

/// Runs `n` ranks of `scenario` (group timeout `timeout_ms`); then checks that nothing leaked:
/// no socket of the children's mock hosts (abstract names `@oxccl-mock-<pid>-…`) is left.
fn run(n: u32, scenario: &str, timeout_ms: u64) -> Vec<Ran> {
    let port = free_port();
    let kids = (0..n)
        .map(|r| {
            let mut cmd = rank_command(CHILD, scenario, r, n, port);
            cmd.env("OXCCL_TIMEOUT_MS", timeout_ms.to_string())
                .env("OXCCL_ASYNC_ERROR_HANDLING", "0");
            cmd.spawn().unwrap()
        })
        .collect();
    let ran = wait_all(
        kids,
        DEADLINE,
        &format!("{scenario} on {n} processes"),
        None,
    );
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    for r in &ran {
        let name = format!("@oxccl-mock-{}-", r.pid);
        assert!(!unix.contains(&name), "socket {name}… left behind");
    }
    ran
}

fn check_layout(n: u32, layout: &str, mode: &str) {
    for r in run(n, &format!("layout:{layout}:{mode}"), 15_000) {
        let what = format!("rank {} of {n}, {layout} ({mode}):\n{}", r.rank, r.out);
        assert_eq!(r.code, Some(0), "{what}");
        assert_eq!(field(&r.out, "leaked"), Some("0"), "{what}");
        let m = members(layout, r.rank, n);
        if m.is_empty() {
            assert_eq!(field(&r.out, "crank"), Some("none"), "{what}");
            continue;
        }
        let me = m.iter().position(|p| *p == r.rank).unwrap();
        // Element i of parent rank p is (p + 1)(i + 1): the first and last of the sum.
        let s: u32 = m.iter().map(|p| p + 1).sum();
        let order: Vec<String> = m.iter().map(u32::to_string).collect();
        let want = [
            ("crank", me.to_string()),
            ("csize", m.len().to_string()),
            ("state", "Ready".into()),
            ("sum", format!("{},{}", s, 4 * s)),
            ("order", order.join("-")),
            ("grank", (m.len() - 1 - me).to_string()),
            ("gsum", m.len().to_string()),
        ];
        for (k, v) in want {
            assert_eq!(field(&r.out, k), Some(v.as_str()), "{k} of {what}");
        }
    }
}

#[test]
fn split_into_halves_on_two_three_and_four_processes() {
    for n in [2, 3, 4] {
        check_layout(n, "halves", "b");
    }
}

#[test]
fn split_odd_even_orders_children_by_key_then_parent_rank() {
    check_layout(4, "oddeven", "b");
    check_layout(3, "oddeven", "nb");
}

#[test]
fn a_rank_with_no_color_gets_no_child_and_the_others_one() {
    check_layout(3, "nocolor", "b");
    check_layout(4, "nocolor", "nb");
}

/// A child aborted by one rank: its peers' op on the child fails with `Remote` naming the
/// abort; the aborted rank's own op and split are refused (`Aborted`); the parent still reduces
/// on every rank.
#[test]
fn a_child_aborted_fails_its_peers_and_spares_the_parent() {
    for r in run(3, "abort", 15_000) {
        let what = format!("rank {}:\n{}", r.rank, r.out);
        assert_eq!(r.code, Some(0), "{what}");
        assert_eq!(field(&r.out, "parent_sum"), Some("3"), "{what}");
        if r.rank == 1 {
            assert_eq!(field(&r.out, "child_state"), Some("Aborted"), "{what}");
            assert_ne!(field(&r.out, "child_err"), Some("none"), "{what}");
            assert_eq!(field(&r.out, "split_err"), Some("Aborted"), "{what}");
        } else {
            assert_eq!(field(&r.out, "child_err"), Some("Remote"), "{what}");
            assert!(r.out.contains("child aborted by the test"), "{what}");
        }
    }
}

/// A nonblocking split's child dropped before it was polled: the split still completes for
/// the others, and their first op on the child fails with `Remote` saying why.
#[test]
fn a_pending_child_dropped_fails_its_peers_ops_not_their_split() {
    for r in run(3, "abandon", 15_000) {
        let what = format!("rank {}:\n{}", r.rank, r.out);
        assert_eq!(r.code, Some(0), "{what}");
        if r.rank == 1 {
            continue;
        }
        assert_eq!(field(&r.out, "err"), Some("Remote"), "{what}");
        assert!(
            r.out
                .contains("destroyed before its nonblocking split completed"),
            "{what}"
        );
    }
}

/// A rank SIGKILLed during a split: the survivors' split ends with `Remote` (the death is seen
/// at once) or `Timeout` (a child they wait in vain for it to join), within the limit.
fn killed(n: u32, victim: u32, when: &str) -> Vec<Ran> {
    let ran = run(n, &format!("kill:{victim}:{when}"), 15_000);
    for r in &ran {
        let what = format!("rank {} ({when}, victim {victim}):\n{}", r.rank, r.out);
        if r.rank == victim {
            assert_eq!(r.signal, Some(libc::SIGKILL), "{what}");
            continue;
        }
        assert_eq!(r.code, Some(0), "{what}");
        assert!(
            matches!(field(&r.out, "err"), Some("Remote" | "Timeout")),
            "{what}"
        );
        let ms: u64 = field(&r.out, "ms").unwrap().parse().unwrap();
        assert!(ms < LIMIT_MS + 2_000, "survivor waited {ms} ms: {what}");
    }
    ran
}

#[test]
fn a_rank_killed_before_its_split_call_gives_survivors_remote() {
    for victim in [0, 2] {
        for r in killed(3, victim, "early")
            .iter()
            .filter(|r| r.rank != victim)
        {
            assert_eq!(field(&r.out, "err"), Some("Remote"), "{}", r.out);
        }
    }
}

#[test]
fn a_rank_killed_after_its_split_call_gives_survivors_timeout_naming_it() {
    for r in killed(3, 2, "late").iter().filter(|r| r.rank != 2) {
        assert_eq!(field(&r.out, "err"), Some("Timeout"), "{}", r.out);
        assert!(r.out.contains("rank(s) 2 of 3"), "{}", r.out);
    }
}

/// A process group whose ranks are bound to devices makes its subgroups across processes by
/// split (as in one process), and they compute right.
#[test]
fn process_group_subgroups_across_processes_are_split() {
    for r in run(4, "pg", 15_000) {
        let what = format!("rank {}:\n{}", r.rank, r.out);
        assert_eq!(r.code, Some(0), "{what}");
        let want = if r.rank < 2 { "1" } else { "5" };
        assert_eq!(field(&r.out, "sub"), Some(want), "{what}");
        // Two subgroups and the whole: one split each.
        assert_eq!(field(&r.out, "splits"), Some("3"), "{what}");
        let checked: usize = field(&r.out, "checked").unwrap().parse().unwrap();
        assert!(checked >= 2 * 12, "{what}");
    }
}

/// Runs `case` on 3 ranks of which rank 2 never arrives: every other rank exits cleanly with
/// a timeout whose text says `named` (the store's arrival marks name the missing rank), after
/// the group's timeout and at most `slack_ms` more.
fn assert_missing_rank_named(case: &str, named: &str, slack_ms: u64) {
    let timeout_ms = 1_500;
    for r in run(3, case, timeout_ms) {
        let what = format!("rank {}:\n{}", r.rank, r.out);
        assert_eq!(r.code, Some(0), "{what}");
        if r.rank == 2 {
            continue;
        }
        assert_eq!(field(&r.out, "err"), Some("Timeout"), "{what}");
        assert!(r.out.contains(named), "{what}");
        let ms: u64 = field(&r.out, "ms").unwrap().parse().unwrap();
        assert!(
            (timeout_ms - 100..timeout_ms + slack_ms).contains(&ms),
            "waited {ms} ms: {what}"
        );
    }
}

/// A rank that never calls a split its parent's members must all call: the others' split
/// fails once the group's timeout passed, naming it (the store's arrival marks), and nobody
/// is left waiting inside the backend.
#[test]
fn a_member_missing_from_a_split_is_named_within_the_group_timeout() {
    assert_missing_rank_named(
        "missing_split",
        "ranks [2] never arrived at split #0 of group 0 (default_pg)",
        2_000,
    );
}

/// A rank that never makes the communicator: the others' init fails once the group's timeout
/// passed (not the backend's 60 s), with an error naming the missing rank (named by the
/// process group from the store's arrival marks, whatever the backend).
#[test]
fn a_missing_rank_fails_init_within_the_group_timeout_naming_it() {
    assert_missing_rank_named(
        "missing",
        "ranks [2] never arrived at the init of group 0 (default_pg)",
        2_500,
    );
}

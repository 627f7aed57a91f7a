//! The failure report's text and measurements, from given readings.

use super::*;

fn words(c: &[(&str, usize)]) -> Vec<(String, usize)> {
    c.iter().map(|(w, n)| (w.to_string(), *n)).collect()
}

/// A join that failed: the clients refused, the server running with a full accept queue.
fn join_failure() -> Failure {
    Failure {
        server: "torch",
        phase: Phase::Join,
        after_s: 1.25,
        what: "client process 0: rank 3: connect: Connection refused (os error 111)".into(),
        clients: Some(ClientCounts {
            ranks: 100,
            joined: 60,
            uncounted: 0,
            failed: words(&[("refused", 30)]),
            unfinished: words(&[("connecting", 10)]),
            processes: words(&[("stopped on failed ranks", 1), ("stopped when told", 1)]),
            first_failure_s: Some(0.5),
            first: "client process 0: rank 3: connect: Connection refused (os error 111)".into(),
            errors: vec![],
        }),
        state: "still running".into(),
        stderr_tail: vec![],
        open_fds: Some(70),
        nofile: Some((Some(1024), Some(4096))),
        listening: Some(Listening {
            port: 29500,
            sockets: 1,
            queued: 129,
        }),
        somaxconn: Some(4096),
        listen_rise: Some((12, 13)),
        lookup: None,
    }
}

#[test]
fn a_failed_join_is_said_as_measured() {
    assert_eq!(
        join_failure().render(),
        "the torch server failed during the join, 1.250 s after it began: client process \
         0: rank 3: connect: Connection refused (os error 111)\n  clients: 60 of 100 ranks \
         joined; failed ranks: 30 refused; unfinished ranks, by step: 10 connecting; first \
         failure 0.500 s into the phase; client processes: 1 stopped on failed ranks, 1 \
         stopped when told\n  the server process: still running; 70 open descriptors; \
         RLIMIT_NOFILE 1024 soft, 4096 hard; 129 connections wait in the accept queue of \
         port 29500\n  this machine: net.core.somaxconn 4096; TcpExt ListenOverflows +12, \
         ListenDrops +13 since the server started"
    );
}

#[test]
fn no_lookup_is_spoken_of_unless_one_was_timed() {
    let mut f = join_failure();
    let said = f.render().to_lowercase();
    for word in ["dns", "lookup", "resolv", "getnameinfo", "host name"] {
        assert!(!said.contains(word), "{word}: {said}");
    }
    assert!(f.json()["reverse_lookup"].is_null());
    f.lookup = Some(Lookup {
        addr: Ipv4Addr::new(127, 0, 0, 2),
        asked: 64,
        secs: vec![0.0051; 64],
        answer: Err("no name (Name or service not known)".into()),
    });
    assert!(f.render().ends_with(
        "\n  64 reverse lookups (getnameinfo) of 127.0.0.2 at once from the bench: 64 answered \
         within 5 s (median 5.1 ms, slowest 5.1 ms); the first: no name (Name or service not known)"
    ));
    f.lookup = Some(Lookup {
        addr: Ipv4Addr::new(127, 0, 0, 2),
        asked: 64,
        secs: vec![0.001, 0.002, 2.5],
        answer: Ok("node7".into()),
    });
    assert!(f.render().ends_with(
        "of 127.0.0.2 at once from the bench: 3 answered within 5 s (median 2.0 ms, slowest \
         2500.0 ms); the first: answered node7"
    ));
    assert_eq!(f.json()["reverse_lookup"]["name"], "node7");
}

#[test]
fn a_dead_server_is_said_by_its_exit_and_stderr() {
    let f = Failure {
        server: "torch",
        phase: Phase::Rounds,
        after_s: 0.002,
        what: "client process 1: the server closed rank 9 (Adding(0))".into(),
        clients: Some(ClientCounts {
            ranks: 4,
            joined: 2,
            uncounted: 2,
            failed: words(&[("closed", 2)]),
            processes: words(&[
                ("stopped on failed ranks", 1),
                ("ended without a report", 1),
            ]),
            first_failure_s: Some(0.001),
            first: "client process 1: the server closed rank 9 (Adding(0))".into(),
            errors: vec!["client process 0 exited (signal: 9) without a report".into()],
            ..ClientCounts::default()
        }),
        state: "exited (signal: 6 (SIGABRT))".into(),
        stderr_tail: vec!["terminate called".into(), "\x1b[31mAborted".into()],
        open_fds: None,
        nofile: None,
        listening: Some(Listening {
            port: 5,
            sockets: 0,
            queued: 0,
        }),
        somaxconn: None,
        listen_rise: None,
        lookup: None,
    };
    assert_eq!(
        f.render(),
        "the torch server failed during the rounds, 0.002 s after it began: client process \
         1: the server closed rank 9 (Adding(0))\n  clients: 2 of 4 ranks joined (2 ranks \
         uncounted); failed ranks: 2 closed; first failure 0.001 s into the phase; client \
         processes: 1 stopped on failed ranks, 1 ended without a report\n  client process 0 \
         exited (signal: 9) without a report\n  the server process: exited (signal: 6 \
         (SIGABRT)); no socket listens on port 5 (/proc/net/tcp, tcp6)\n  its stderr ended \
         with:\n    terminate called\n    \\e[31mAborted"
    );
    let j = f.json();
    assert_eq!(j["phase"], "rounds");
    assert_eq!(j["clients"]["failed"]["closed"], 2);
    assert_eq!(j["server"]["listening"]["sockets"], 0);
    assert!(j["server"]["open_fds"].is_null());
}

#[test]
fn descriptors_at_the_soft_limit_are_said_so() {
    let mut f = join_failure();
    f.open_fds = Some(1024);
    assert!(f.render().contains(
        "1024 open descriptors; RLIMIT_NOFILE 1024 soft, 4096 hard (its open descriptors \
         are at the soft limit)"
    ));
    f.nofile = Some((None, None));
    assert!(f
        .render()
        .contains("RLIMIT_NOFILE unlimited soft, unlimited hard;"));
}

#[test]
fn the_clients_reports_sum_over_processes() {
    let t = |why, at, joined, failed: &[(&str, usize)], unfinished: &[(&str, usize)]| {
        Heard::Stopped(Tally {
            why: Some(why),
            first_failure_at: at,
            ranks: 10,
            joined,
            failed: words(failed),
            unfinished: words(unfinished),
            first: at.map_or_else(String::new, |a| format!("rank {a}: refused")),
        })
    };
    let heard = [
        t(StopReason::Failed, Some(1_900), 4, &[("refused", 6)], &[]),
        t(
            StopReason::Failed,
            Some(1_500),
            0,
            &[("refused", 7), ("reset", 1)],
            &[("connecting", 2)],
        ),
        t(StopReason::Told, None, 10, &[], &[("joined", 10)]),
        Heard::Joined,
        Heard::Ended("exited (exit status: 1)".into()),
        Heard::Nothing,
    ];
    let c = ClientCounts::sum(&[10, 10, 10, 10, 10, 10], &heard, 1_000);
    assert_eq!(c.ranks, 60);
    assert_eq!(c.joined, 24);
    assert_eq!(c.uncounted, 20);
    assert_eq!(c.failed, words(&[("refused", 13), ("reset", 1)]));
    assert_eq!(c.unfinished, words(&[("connecting", 2), ("joined", 10)]));
    assert_eq!(
        c.processes,
        words(&[
            ("stopped on failed ranks", 2),
            ("stopped when told", 1),
            ("had joined every rank and reported nothing since", 1),
            ("ended without a report", 1),
            ("had not reported", 1),
        ])
    );
    assert_eq!(c.first, "client process 1: rank 1500: refused");
    assert!((c.first_failure_s.unwrap() - 5e-7).abs() < 1e-12);
    assert_eq!(
        c.errors,
        ["client process 4 exited (exit status: 1) without a report"]
    );
}

#[test]
fn proc_tables_read_as_the_kernel_writes_them() {
    let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   \
               uid  timeout inode\n   \
               0: 0100007F:7530 00000000:0000 0A 00000000:00000081 00:00000000 00000000  \
               1000        0 1 1 0 100 0 0 10 0\n   \
               1: 0100007F:7530 0200007F:9C40 01 00000000:00000000 00:00000000 00000000  \
               1000        0 2 1 0 20 4 30 10 -1\n";
    assert_eq!(parse_listeners(tcp).collect::<Vec<_>>(), [(30000, 129)]);
    let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                  Max open files            1024                 unlimited            files\n";
    assert_eq!(parse_nofile(limits), Some((Some(1024), None)));
    let netstat = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\n\
                   TcpExt: 0 17 19\n\
                   IpExt: InNoRoutes\nIpExt: 0\n";
    assert_eq!(parse_listen_counters(netstat), Some((17, 19)));
}

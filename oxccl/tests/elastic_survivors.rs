//! The survivors' decision through a store, ranks as threads: all arrive (everyone goes on,
//! same ranks), one never arrives (the others go on renumbered after the window, all with the
//! same members), one arrives after the decision (left out), proposals racing (one stands),
//! and bad arguments refused before the store is touched.

use oxccl::pg::elastic::{Outcome, Survivors, Verdict};
use oxccl::store::{MemStore, Store};
use oxccl::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `present` decide at view `view` of `members`, each on its own thread, after its delay.
fn decide_all(
    store: &Arc<dyn Store>,
    prefix: &str,
    members: &[u32],
    present: &[(u32, Duration)],
    window: Duration,
) -> Vec<(u32, Outcome)> {
    std::thread::scope(|s| {
        let hs: Vec<_> = present
            .iter()
            .map(|&(me, delay)| {
                let store = store.clone();
                s.spawn(move || {
                    std::thread::sleep(delay);
                    let v = Survivors {
                        prefix,
                        view: 3,
                        members,
                        me,
                        window,
                    };
                    (me, v.decide(store.as_ref()).expect("decide"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank")).collect()
    })
}

#[test]
fn everyone_arrives_and_goes_on_unchanged() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let members = [10, 11, 12, 13];
    let present: Vec<_> = members.iter().map(|&m| (m, Duration::ZERO)).collect();
    let t = Instant::now();
    let outs = decide_all(&store, "all", &members, &present, Duration::from_secs(30));
    // Nobody waited for the window.
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    for (me, o) in outs {
        assert_eq!(o.members, members);
        let rank = members.iter().position(|&m| m == me).unwrap() as u32;
        assert_eq!(o.verdict, Verdict::Member { rank, size: 4 });
    }
}

#[test]
fn a_rank_that_never_arrives_is_left_out_and_the_rest_renumbered() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let members = [10, 11, 12, 13];
    // 11 died: it never arrives.
    let present = [
        (10, Duration::ZERO),
        (12, Duration::from_millis(30)),
        (13, Duration::from_millis(60)),
    ];
    let window = Duration::from_millis(300);
    let t = Instant::now();
    let outs = decide_all(&store, "lost", &members, &present, window);
    assert!(
        t.elapsed() >= window,
        "decided before the window: {:?}",
        t.elapsed()
    );
    for (me, o) in &outs {
        assert_eq!(o.members, [10, 12, 13], "rank {me}");
    }
    let verdicts: Vec<_> = outs.iter().map(|(me, o)| (*me, o.verdict)).collect();
    assert!(verdicts.contains(&(10, Verdict::Member { rank: 0, size: 3 })));
    assert!(verdicts.contains(&(12, Verdict::Member { rank: 1, size: 3 })));
    assert!(verdicts.contains(&(13, Verdict::Member { rank: 2, size: 3 })));
    // 11 comes back late: the decision stands and leaves it out.
    let late = Survivors {
        prefix: "lost",
        view: 3,
        members: &members,
        me: 11,
        window,
    }
    .decide(store.as_ref())
    .expect("decide");
    assert_eq!(late.verdict, Verdict::LeftOut);
    assert_eq!(late.members, [10, 12, 13]);
}

#[test]
fn racing_proposals_leave_one_decision() {
    for round in 0..20u64 {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let members = [0, 1, 2, 3, 4];
        // Rank 4 never arrives; a zero window makes every arriving rank propose at once.
        let present: Vec<_> = (0..4)
            .map(|m| {
                (
                    m,
                    Duration::from_micros((round * 37 + u64::from(m) * 11) % 50),
                )
            })
            .collect();
        let outs = decide_all(&store, "race", &members, &present, Duration::ZERO);
        let first = &outs[0].1.members;
        for (me, o) in &outs {
            assert_eq!(&o.members, first, "round {round}, rank {me}");
            assert!(!o.members.contains(&4), "a rank that never arrived");
            // Whoever is in the decision is told its place; whoever is not, LeftOut.
            let want = match o.members.iter().position(|m| m == me) {
                Some(i) => Verdict::Member {
                    rank: i as u32,
                    size: o.members.len() as u32,
                },
                None => Verdict::LeftOut,
            };
            assert_eq!(o.verdict, want, "round {round}, rank {me}");
        }
        // The proposal that stood came from a rank that had arrived, which it names.
        assert!(!first.is_empty());
    }
}

#[test]
fn bad_arguments_are_refused_before_the_store() {
    let store = MemStore::new();
    let refused = |members: &[u32], me: u32, arg: &str| {
        let e = Survivors {
            prefix: "bad",
            view: 0,
            members,
            me,
            window: Duration::ZERO,
        }
        .decide(&store)
        .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { arg: a, .. } if *a == arg),
            "{e}"
        );
    };
    refused(&[1, 2], 3, "me");
    refused(&[1, 2, 1], 1, "members");
    assert_eq!(store.num_keys().unwrap(), 0, "nothing was written");
}

//! A store that outlives a process group never hands the next one its keys (src/pg/keys.rs):
//! two default groups made one after the other on one store (threads), and torchrun's agent
//! store across a restart of the workers (child processes through env://, the mock across
//! processes): after a restart in which a rank died before making its group (one agent:
//! scoped by the restart count), and after a restart that only one of two agents counted
//! (the restart counts differ: the incarnation count alone keeps them apart). With torch
//! installed, a torch program of the same launch still meets this one's keys in the agent
//! store.

mod torch_env;

use oxccl::launch::{init_process_group, Bootstrap, EnvVars, InitMethod, WithProcessGroup};
use oxccl::mock::MockBackend;
use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store, TcpStore, TcpStoreOptions};
use oxccl::{Device, ReduceOp, Result};
use oxccl_testkit::ranks::{field, rank_command, wait_all, Ran};
use std::sync::Arc;
use std::time::Duration;

const CHILD: &str = "OXCCL_INC_CHILD";
const T: Duration = Duration::from_secs(20);

/// All-reduces `[base * (rank + 1); 4]` on `pg`: every member gets `base * n(n+1)/2`.
fn reduce<B: PgBackend>(pg: &ProcessGroup<B>, base: f32) -> Result<Vec<f32>> {
    let me = pg.global_rank();
    let mut b = pg.upload(&[base * (me + 1) as f32; 4])?;
    pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
    pg.download(&b)
}

#[test]
fn two_default_groups_one_after_the_other_on_one_store() {
    let raw: Arc<dyn Store> = Arc::new(MemStore::new());
    let backend = MockBackend::new();
    for (k, base) in [(0u64, 1.0f32), (1, 10.0)] {
        let got: Vec<Vec<f32>> = (0..2u32)
            .map(|r| {
                let (b, s) = (backend.clone(), raw.clone());
                std::thread::spawn(move || {
                    // Rank 0 writes the unique id: late, the second time, so that rank 1
                    // would find the first group's, were it in reach.
                    if r == 0 && k == 1 {
                        std::thread::sleep(Duration::from_millis(300));
                    }
                    let opts = PgOptions {
                        timeout: T,
                        device: Device(r),
                        ..PgOptions::default()
                    };
                    let pg = ProcessGroup::new(b, s, r, 2, opts).unwrap();
                    let out = reduce(&pg, base).unwrap();
                    pg.destroy();
                    out
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        assert_eq!(got, vec![vec![3.0 * base; 4]; 2], "incarnation {k}");
    }
    // Each incarnation's unique id in its own namespace; the first one's is still there.
    let ids: Vec<Vec<u8>> = (0..2)
        .map(|k| {
            let id = format!("oxccl/world/2/{k}/oxccl/pg/0/unique_id/0");
            assert!(raw.check(&[&id]).unwrap(), "{id}");
            raw.get(&id, T).unwrap()
        })
        .collect();
    assert_ne!(ids[0], ids[1], "each incarnation made its own id");
    assert_eq!(raw.add("oxccl/world/2/incarnations", 0).unwrap(), 4);
}

/// A child's work: `reduce` with the base its scenario names, then a barrier through the
/// group's store so that no rank leaves the mock world while another still reads from it.
struct Scenario(f32);

impl WithProcessGroup for Scenario {
    type Output = ();
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<()> {
        let me = pg.global_rank();
        let got = reduce(&pg, self.0)?;
        println!("RESULT rank={me} sum={}", got[0]);
        let s = pg.store();
        s.set(&format!("done/{me}"), b"1")?;
        let keys: Vec<String> = (0..pg.size()).map(|r| format!("done/{r}")).collect();
        s.wait(&keys.iter().map(String::as_str).collect::<Vec<_>>(), T)
    }
}

#[test]
fn child() {
    let Ok(base) = std::env::var(CHILD) else {
        return;
    };
    let _ = env_logger::try_init();
    if let Err(e) = init_process_group(Scenario(base.parse().unwrap())) {
        println!("CHILD ERROR {e}");
        std::process::exit(3);
    }
}

/// Rank `rank` of 2 as torchrun starts it on the agent store at `port`: restart `restart`,
/// `agents` agents, all-reducing with `base`; the group's timeout `timeout_ms`.
fn worker(rank: u32, port: u16, restart: u32, agents: u32, base: f32, timeout_ms: u64) -> Ran {
    let mut cmd = rank_command(CHILD, &base.to_string(), rank, 2, port);
    cmd.env("TORCHELASTIC_USE_AGENT_STORE", "True")
        .env("TORCHELASTIC_RUN_ID", "incarnations")
        .env("TORCHELASTIC_RESTART_COUNT", restart.to_string())
        .env("GROUP_WORLD_SIZE", agents.to_string())
        .env("OXCCL_TIMEOUT_MS", timeout_ms.to_string())
        .env("OXCCL_ASYNC_ERROR_HANDLING", "0");
    let kid = cmd.spawn().unwrap();
    let mut ran = wait_all(vec![kid], Duration::from_secs(60), "worker", None);
    let mut r = ran.remove(0);
    r.rank = rank;
    r
}

/// Both ranks of a restart, rank 0 (which writes the unique id) 500 ms after rank 1, so
/// that rank 1 would read an earlier id were one in reach; `restarts`: the restart count
/// each rank's agent says.
fn both(port: u16, restarts: [u32; 2], agents: u32, base: f32) -> Vec<Ran> {
    let hs: Vec<_> = (0..2u32)
        .map(|r| {
            let n = restarts[r as usize];
            std::thread::spawn(move || {
                if r == 0 {
                    std::thread::sleep(Duration::from_millis(500));
                }
                worker(r, port, n, agents, base, 20_000)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

fn assert_sums(ran: &[Ran], want: f32, what: &str) {
    for r in ran {
        assert_eq!(
            r.code,
            Some(0),
            "{what}: rank {} failed:\n{}",
            r.rank,
            r.out
        );
        let sum = field(&r.out, "sum").map(|s| s.parse::<f32>().unwrap());
        assert_eq!(sum, Some(want), "{what}: rank {}:\n{}", r.rank, r.out);
    }
}

/// The agent's store, as torchrun's agent hosts it (it outlives every worker).
fn agent() -> (TcpStore, u16) {
    let agent = TcpStore::new(TcpStoreOptions::server("127.0.0.1", 0)).unwrap();
    let port = agent.port();
    (agent, port)
}

#[test]
fn one_agent_restart_after_a_rank_died_before_its_group_reads_nothing_stale() {
    let (agent, port) = agent();
    // Restart 0: rank 1 dies before making its group; rank 0 counts itself into incarnation
    // 0, writes its unique id and gives up waiting for rank 1.
    let first = worker(0, port, 0, 1, 1.0, 1500);
    assert_eq!(first.code, Some(3), "{}", first.out);
    assert!(
        first.out.contains("ranks [1] never arrived"),
        "{}",
        first.out
    );
    let stale = "oxccl/restart/0/oxccl/world/2/0/oxccl/pg/0/unique_id/0";
    assert!(agent.check(&[stale]).unwrap(), "restart 0 left its id");
    // Restart 1: both ranks, in a namespace of their own (the count of restart 0 is short
    // by one: counted there, rank 1 would land in another incarnation than rank 0).
    let second = both(port, [1, 1], 1, 10.0);
    assert_sums(&second, 30.0, "restart 1");
    let fresh = "oxccl/restart/1/oxccl/world/2/0/oxccl/pg/0/unique_id/0";
    assert_ne!(agent.get(fresh, T).unwrap(), agent.get(stale, T).unwrap());
    assert_eq!(
        agent
            .add("oxccl/restart/1/oxccl/world/2/incarnations", 0)
            .unwrap(),
        2
    );
}

#[test]
fn two_agents_restart_counted_by_one_of_them_reads_nothing_stale() {
    let (agent, port) = agent();
    let first = both(port, [0, 0], 2, 1.0);
    assert_sums(&first, 3.0, "restart 0");
    // Node 0's agent counted the failure (restart 1), node 1's restarted its workers because
    // node 0 came back (still 0): a scope by restart count would split the ranks.
    let second = both(port, [1, 0], 2, 10.0);
    assert_sums(&second, 30.0, "restart 1 as node 0 counts it");
    let ids: Vec<Vec<u8>> = (0..2)
        .map(|k| {
            agent
                .get(&format!("oxccl/world/2/{k}/oxccl/pg/0/unique_id/0"), T)
                .unwrap()
        })
        .collect();
    assert_ne!(ids[0], ids[1]);
    assert_eq!(agent.add("oxccl/world/2/incarnations", 0).unwrap(), 4);
}

/// A torch program of the same launch (torch's own `env://` store for torchrun's agent store,
/// restart 1 on one agent) and this one's `Bootstrap` meet in the agent store: the launch's
/// own store is not prefixed (PyTorch since 2.5 does not prefix it either), only the
/// process groups' keys are scoped.
#[test]
fn a_torch_program_of_the_same_restart_meets_this_ones_keys() {
    let Some(py) = torch_env::python() else {
        return;
    };
    let (agent, port) = agent();
    let env = EnvVars::from_pairs([
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", &port.to_string()),
        ("TORCHELASTIC_RUN_ID", "incarnations"),
        ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ("TORCHELASTIC_RESTART_COUNT", "1"),
        ("GROUP_WORLD_SIZE", "1"),
    ]);
    let boot = Bootstrap::with_env(&InitMethod::Env, None, None, T, &env).unwrap();
    assert_eq!(boot.group_scope.as_deref(), Some("oxccl/restart/1"));
    boot.store.set("from_oxccl", b"rust").unwrap();
    let script = "import os, sys, datetime\n\
        import torch.distributed as dist\n\
        store, rank, size = next(dist.rendezvous('env://', timeout=datetime.timedelta(seconds=20)))\n\
        store.set('from_torch', 'py')\n\
        print('torch', store.get('from_oxccl').decode(), rank, size)\n";
    let out = std::process::Command::new(py)
        .args(["-W", "ignore", "-c", script])
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("TORCHELASTIC_USE_AGENT_STORE", "True")
        .env("TORCHELASTIC_RESTART_COUNT", "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "torch failed (a torch before 2.5 prefixes the agent store with /worker/attempt_1):\n{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(said.trim(), "torch rust 0 2");
    assert_eq!(boot.store.get("from_torch", T).unwrap(), b"py");
    assert_eq!(agent.get("from_torch", T).unwrap(), b"py");
    // The group store is the scoped view; the launch's own is the agent's store as it is.
    boot.group_store().set("scoped", b"1").unwrap();
    assert!(agent.check(&["oxccl/restart/1/scoped"]).unwrap());
}

"""A torch TCPStore server for tests/store_interop.rs (oxccl's client against torch's server).

Usage: torch_server.py USE_LIBUV(0|1)

Sets a few keys, prints "PORT LIBUV" on one line, then follows commands from stdin:
  late  -> sets "py_late" after 0.2 s (releases a Rust get blocked on it)
  done  -> asserts what the Rust client set, prints "ok", exits 0
Exits 3 with "unavailable: ..." when this torch has no such backend.
"""
import datetime
import sys
import time

import torch.distributed as dist

use_libuv = sys.argv[1] == "1"
try:
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        use_libuv=use_libuv,
        timeout=datetime.timedelta(seconds=30),
        wait_for_workers=False,
    )
except Exception as e:  # a torch built without this backend
    print(f"unavailable: {e}", flush=True)
    sys.exit(3)

store.set("from_py", "py-value")
store.set("to_delete", "x")
print(store.port, int(store.libuvBackend), flush=True)

for line in sys.stdin:
    cmd = line.strip()
    if cmd == "late":
        time.sleep(0.2)
        store.set("py_late", "late-value")
    elif cmd == "done":
        assert store.get("from_rust") == b"rust-value", store.get("from_rust")
        assert store.get("counter") == b"7", store.get("counter")
        assert store.add("counter", 1) == 8
        assert store.get("cas") == b"b"
        assert store.get("ap") == b"xy"
        assert store.multi_get(["m1", "m2"]) == [b"one", b"two"]
        assert not store.check(["to_delete"])
        assert store.check(["from_rust", "py_late"])
        # from_py, from_rust, counter, cas, ap, m1, m2, py_late
        assert store.num_keys() == 8, store.num_keys()
        print("ok", flush=True)
        sys.exit(0)
    else:
        print(f"unknown command {cmd!r}", flush=True)
        sys.exit(2)
sys.exit(4)

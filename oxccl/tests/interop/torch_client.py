"""A torch TCPStore client for tests/store_interop.rs (torch's client against oxccl's server).

Usage: torch_client.py PORT

Runs every TCPStore operation against the server, asserting each answer, and meets the Rust
side twice: its "py_ready" set releases a Rust get, and a Rust set of "rust_release" releases
its wait. Prints "ok" and exits 0 when everything held.
"""
import datetime
import sys
import time

import torch.distributed as dist

port = int(sys.argv[1])
second = datetime.timedelta(seconds=1)
store = dist.TCPStore(
    "127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=20)
)

# What Rust set before we started.
assert store.get("from_rust") == b"hello", store.get("from_rust")

store.set("py_key", "py_value")
assert store.get("py_key") == b"py_value"
assert store.add("py_counter", 5) == 5
assert store.add("py_counter", 2) == 7

assert store.compare_set("py_cas", "", "first") == b"first"
assert store.compare_set("py_cas", "first", "second") == b"second"
assert store.compare_set("py_cas", "wrong", "third") == b"second"
assert store.compare_set("py_absent", "exp", "d") == b"exp"
assert not store.check(["py_absent"])

assert store.check(["py_key", "from_rust"])
assert not store.check(["py_key", "nope"])
store.wait(["py_key", "from_rust"], second)

n = store.num_keys()
store.set("py_tmp", "t")
assert store.num_keys() == n + 1
assert store.delete_key("py_tmp")
assert not store.delete_key("py_tmp")
assert store.num_keys() == n

store.append("py_append", "ab")
store.append("py_append", "cd")
assert store.get("py_append") == b"abcd"
store.multi_set(["py_m1", "py_m2"], ["v1", "v2"])
assert store.multi_get(["py_m2", "py_m1"]) == [b"v2", b"v1"]

# A wait that runs out: torch cancels it on the wire, and the connection stays usable.
start = time.monotonic()
try:
    store.wait(["never"], datetime.timedelta(milliseconds=200))
    raise AssertionError("wait on a missing key returned")
except dist.DistStoreError:
    pass
assert 0.15 < time.monotonic() - start < 5
assert store.get("py_key") == b"py_value"

if hasattr(store, "queue_push"):
    store.queue_push("py_q", "e1")
    store.queue_push("py_q", "e2")
    assert store.queue_len("py_q") == 2
    assert store.queue_pop("py_q") == b"e1"
    assert store.queue_pop("py_q", block=False) == b"e2"
    assert store.queue_len("py_q") == 0
if hasattr(store, "list_keys"):
    keys = set(store.list_keys())
    assert {"py_key", "from_rust", "py_counter"} <= keys, keys
if hasattr(store, "barrier"):
    store.barrier("py_barrier", 1, second)

# Release the Rust get blocked on "py_ready", then wait for Rust's answer.
store.set("py_ready", "1")
start = time.monotonic()
store.wait(["rust_release"], datetime.timedelta(seconds=10))
waited = time.monotonic() - start
assert waited > 0.1, waited
assert store.get("rust_release") == b"go"

print("ok", flush=True)

"""A torch TCPStore server for tests/store_interop.rs (oxccl's client against torch's server).

Usage: torch_server.py USE_LIBUV(0|1)

Sets a few keys, prints "PORT LIBUV" on one line, then follows commands from stdin:
  late  -> sets "py_late" after 0.2 s (releases a Rust get blocked on it)
  signal -> sets "py_signal" (the key the Rust client watches)
  done  -> asserts what the Rust client set, prints "ok", exits 0
Exits 3 with "unavailable: ..." only when this torch is seen to lack the backend asked for: its
TCPStore takes no `use_libuv` (a TypeError naming it), refuses the choice in words about it, or
builds the other backend instead. Any other failure is an error: its traceback goes to stderr
and the exit code is 1.
"""
import datetime
import sys
import time
import traceback

import torch
import torch.distributed as dist

use_libuv = sys.argv[1] == "1"
wanted = "libuv" if use_libuv else "legacy"


def unavailable(why):
    print(f"unavailable: torch {torch.__version__} has no {wanted} TCPStore server: {why}", flush=True)
    sys.exit(3)


def refuses_the_choice(e):
    """An error about the backend choice itself, not about the server failing to start."""
    text = str(e).lower()
    about = "use_libuv" in text or "libuv" in text or "legacy" in text
    refusal = any(
        w in text for w in ("not supported", "unsupported", "removed", "no longer", "deprecated")
    )
    return about and refusal


try:
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        use_libuv=use_libuv,
        timeout=datetime.timedelta(seconds=30),
        wait_for_workers=False,
    )
except TypeError as e:
    if "use_libuv" in str(e):
        unavailable(f"TCPStore takes no use_libuv ({e})")
    traceback.print_exc()
    print(f"error: {e!r}", flush=True)
    sys.exit(1)
except Exception as e:
    if refuses_the_choice(e):
        unavailable(f"TCPStore refused use_libuv={use_libuv} ({e})")
    traceback.print_exc()
    print(f"error: {e!r}", flush=True)
    sys.exit(1)

made = getattr(store, "libuvBackend", None)
if made is None:
    # A torch from before the libuv backend: its only server is the legacy one.
    if use_libuv:
        unavailable("TCPStore has no libuvBackend attribute (a torch before the libuv backend)")
    made = False
if bool(made) != use_libuv:
    unavailable(f"asked for use_libuv={use_libuv}, TCPStore made the other backend")

store.set("from_py", "py-value")
store.set("to_delete", "x")
print(store.port, int(made), flush=True)

for line in sys.stdin:
    cmd = line.strip()
    if cmd == "late":
        time.sleep(0.2)
        store.set("py_late", "late-value")
    elif cmd == "signal":
        store.set("py_signal", "1")
    elif cmd == "done":
        assert store.get("from_rust") == b"rust-value", store.get("from_rust")
        assert store.get("counter") == b"7", store.get("counter")
        assert store.add("counter", 1) == 8
        assert store.get("cas") == b"b"
        assert store.get("ap") == b"xy"
        assert store.multi_get(["m1", "m2"]) == [b"one", b"two"]
        assert not store.check(["to_delete"])
        assert store.check(["from_rust", "py_late"])
        # from_py, from_rust, counter, cas, ap, m1, m2, py_late, py_signal
        assert store.num_keys() == 9, store.num_keys()
        print("ok", flush=True)
        sys.exit(0)
    else:
        print(f"unknown command {cmd!r}", flush=True)
        sys.exit(2)
sys.exit(4)

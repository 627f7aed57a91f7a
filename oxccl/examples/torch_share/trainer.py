"""The PyTorch side of examples/torch_share.rs: a trainer that shares one NCCL communicator with
a Rust inference server and broadcasts its weights to it every step.

Rank 0 of a 2-rank communicator on GPU --gpu (0). It makes the NCCL unique id, hosts a
torch.distributed.TCPStore and sets, under oxccl/torch_share/ (docs/guide/pytorch.md):
  config     "world=2 steps=S elems=E"
  nccl       "version X.Y.Z\\ntorch V\\npath /.../libnccl.so.2"  (the library torch loaded)
  unique_id  the id's 128 raw bytes (set last)
then waits for the server's "server" key ("joining", or "fail: why"), inits its rank, fills
the weights with known values and broadcasts them each step (root 0 = this rank), all-reduces
a checksum tensor to which it adds
zeros (so it reads the server's checksum, mismatch count and step count), reads the server's
"ack" key and prints a RESULT line. Exit status 0 on success, 1 otherwise.

NCCL's calls go through ctypes to the libnccl torch itself loaded (the same library, so the
same release as torch.distributed's): torch.cuda.nccl.init_rank is not usable on every torch
(torch 2.11 under Python 3.12 refuses its own argument format), and ProcessGroupNCCL never
hands out its communicator. Each call is issued on torch's current stream.

--dry-store: no GPU and no communicator; only the store handshake: the server must answer
"dry-ok id=<hex>" with the id's bytes unchanged (tests/torch_share_handshake.rs).

Every wait is bounded by --timeout (default 120 s): the store's, the init's (run on a thread:
NCCL's blocking init cannot be interrupted) and each step's (a CUDA event polled). A wait that
runs out prints a RESULT FAIL line and leaves with os._exit(1), as the GPU may still be inside
an NCCL kernel that waits for a peer which is gone.
"""
import argparse
import ctypes
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

PREFIX = "oxccl/torch_share/"
KEY_CONFIG = PREFIX + "config"
KEY_NCCL = PREFIX + "nccl"
KEY_ID = PREFIX + "unique_id"
KEY_SERVER = PREFIX + "server"
KEY_ACK = PREFIX + "ack"


def result(ok, what):
    print(f"RESULT torch_share trainer: {'OK' if ok else 'FAIL'} ({what})", flush=True)


def give_up(what):
    result(False, what)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def loaded_nccl_path():
    """The libnccl file mapped into this process (the one torch uses), or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and "/libnccl" in parts[5] and ".so" in parts[5]:
                    return parts[5].strip()
    except OSError:
        pass
    return None


def nccl_version_text():
    v = torch.cuda.nccl.version()
    return ".".join(str(x) for x in v[:3])


def wait_key(store, key, timeout_s):
    try:
        store.wait([key], datetime.timedelta(seconds=timeout_s))
    except Exception as e:  # torch raises DistStoreError (a RuntimeError) on a timeout
        give_up(f"the server never set {key} within {timeout_s} s ({type(e).__name__}: {e})")
    return store.get(key).decode("utf-8", "replace")


def wait_stream(what, timeout_s):
    """Waits for the current stream's work so far, at most timeout_s."""
    ev = torch.cuda.Event()
    ev.record()
    deadline = time.monotonic() + timeout_s
    while not ev.query():
        if time.monotonic() > deadline:
            give_up(f"{what} did not complete within {timeout_s} s (the server gone?)")
        time.sleep(0.0005)


class UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 bytes, passed by value."""

    _fields_ = [("internal", ctypes.c_char * 128)]


NCCL_FLOAT32, NCCL_FLOAT64, NCCL_SUM = 7, 8, 0  # nccl.h's ncclFloat32, ncclFloat64, ncclSum
DTYPES = {torch.float32: NCCL_FLOAT32, torch.float64: NCCL_FLOAT64}


class Nccl:
    """The few NCCL calls the trainer makes, on the libnccl torch loaded (ctypes releases the
    GIL during each call)."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)  # already loaded by torch: the same handle
        p = ctypes.c_void_p
        lib.ncclCommInitRank.argtypes = [ctypes.POINTER(p), ctypes.c_int, UniqueId, ctypes.c_int]
        for f in (lib.ncclBroadcast, lib.ncclAllReduce):
            f.argtypes = [p, p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, p, p]
        lib.ncclCommDestroy.argtypes = [p]
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        self.lib = lib

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: {self.lib.ncclGetErrorString(rc).decode()} ({rc})")

    def init_rank(self, nranks, uid, rank):
        comm, u = ctypes.c_void_p(), UniqueId()
        ctypes.memmove(ctypes.byref(u), uid, 128)
        self.check(self.lib.ncclCommInitRank(ctypes.byref(comm), nranks, u, rank), "ncclCommInitRank")
        return comm

    def broadcast(self, t, root, comm):
        """In place on `t`, on torch's current stream."""
        ptr, s = ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.lib.ncclBroadcast(ptr, ptr, t.numel(), DTYPES[t.dtype], root, comm, s), "ncclBroadcast")

    def all_reduce(self, t, comm):
        """Sum, in place on `t`, on torch's current stream."""
        ptr, s = ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.lib.ncclAllReduce(ptr, ptr, t.numel(), DTYPES[t.dtype], NCCL_SUM, comm, s), "ncclAllReduce")

    def destroy(self, comm):
        rc = self.lib.ncclCommDestroy(comm)
        if rc != 0:
            print(f"note: ncclCommDestroy returned {rc}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=29533)
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--elems", type=int, default=1 << 20)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--dry-store", action="store_true")
    a = p.parse_args()

    if not a.dry_store:
        if not torch.cuda.is_available() or torch.cuda.device_count() <= a.gpu:
            give_up(f"no GPU {a.gpu} here (torch.cuda.device_count() = {torch.cuda.device_count()})")
        torch.cuda.set_device(a.gpu)  # NCCL's init uses the current device
        torch.cuda.init()
    try:
        uid = torch.cuda.nccl.unique_id()  # 128 bytes; needs no GPU
    except Exception as e:
        if not a.dry_store:
            give_up(f"torch.cuda.nccl.unique_id(): {e}")
        uid = os.urandom(128)
        print(f"note: torch.cuda.nccl.unique_id() failed ({e}); random bytes for the dry run")
    version = nccl_version_text()
    path = loaded_nccl_path()
    print(f"torch {torch.__version__}, NCCL {version} from {path or '?'}", flush=True)

    store = dist.TCPStore(
        a.host,
        a.port,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=a.timeout),
    )
    print(f"TCPStore on {a.host}:{store.port}", flush=True)
    store.set(KEY_CONFIG, f"world=2 steps={a.steps} elems={a.elems}")
    store.set(KEY_NCCL, f"version {version}\ntorch {torch.__version__}\npath {path or ''}")
    store.set(KEY_ID, uid)  # last: its presence means the others are there

    answer = wait_key(store, KEY_SERVER, a.timeout)
    if a.dry_store:
        if answer == "dry-ok id=" + uid.hex():
            result(True, "dry-store: the server read the 128-byte id unchanged")
            return 0
        give_up(f"dry-store: the server answered {answer[:200]!r}")
    if answer != "joining":
        give_up(f"the server did not join: {answer}")
    if path is None:
        give_up("torch's libnccl is not in /proc/self/maps: no library to call")
    nccl = Nccl(path)

    # NCCL's blocking init cannot be interrupted: run it on a thread (it releases the GIL).
    made = {}

    def init():
        try:
            torch.cuda.set_device(a.gpu)
            made["comm"] = nccl.init_rank(2, uid, 0)
        except Exception as e:
            made["error"] = e

    t0 = time.monotonic()
    th = threading.Thread(target=init, daemon=True)
    th.start()
    th.join(a.timeout)
    if th.is_alive():
        give_up(f"init_rank did not complete within {a.timeout} s (the server never joined)")
    if "error" in made:
        give_up(f"init_rank: {made['error']}")
    comm = made["comm"]
    print(f"rank 0 of 2 on GPU {a.gpu}: communicator made in {(time.monotonic() - t0) * 1e3:.0f} ms", flush=True)

    idx = torch.arange(a.elems, device="cuda", dtype=torch.int64)
    w = torch.empty(a.elems, device="cuda", dtype=torch.float32)
    expected = 0.0
    for step in range(a.steps):
        # "Training": this step's weights, known to the server: (step + 1) + (i % 1024) / 4.
        w.copy_((idx % 1024).to(torch.float32) * 0.25 + (step + 1))
        expected += w.double().sum().item()
        t = time.monotonic()
        # One tensor, one communicator: root 0 is this rank. Issued on torch's current
        # stream, after the kernels that wrote w.
        nccl.broadcast(w, 0, comm)
        wait_stream(f"step {step}'s broadcast", a.timeout)
        print(f"step {step}: broadcast {a.elems} f32 in {(time.monotonic() - t) * 1e3:.2f} ms", flush=True)

    back = torch.zeros(3, device="cuda", dtype=torch.float64)
    nccl.all_reduce(back, comm)  # sum; this side adds zeros
    wait_stream("the checksum's all_reduce", a.timeout)
    checksum, mismatches, steps = back.tolist()
    ack = wait_key(store, KEY_ACK, a.timeout)
    nccl.destroy(comm)
    ok = checksum == expected and mismatches == 0 and int(steps) == a.steps and ack.startswith("ok ")
    result(
        ok,
        f"{a.steps} steps of {a.elems} f32 broadcast; server's checksum {checksum} "
        f"(expected {expected}), {int(mismatches)} mismatched, ack {ack!r}",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

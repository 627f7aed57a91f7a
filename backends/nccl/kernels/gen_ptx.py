#!/usr/bin/env python3
"""Regenerates kernels/peer_reduce.ptx and peer_reduce_sm90.ptx from peer_reduce.cu with NVRTC
(no GPU, no toolkit).

NVRTC and the CUDA headers come from NVIDIA's PyPI wheels of CUDA 12.1, cached under
.cache/cuda-rtc: PTX ISA 8.1 for compute_80 (A100 and newer) and for compute_90 (H100 and
newer: the kernels also wait for the kernel ahead of them, so they may be launched before it
ends), which drivers from CUDA 12.1 (530) on load and compile for the GPU at hand.

    python3 backends/nccl/kernels/gen_ptx.py [--check]

--check compares instead of writing (exit 1 when the shipped PTX is stale).

    python3 backends/nccl/kernels/gen_ptx.py --define PHASE_TIMES --out OUT.ptx

writes a diagnostic build instead (compute_90, the macro defined; never shipped): with
PHASE_TIMES the kernels note when each call reaches each of its phases, which the probe prints
with PROBE_PHASES=1 (see probe.cu); with HOST_MARK each call that waited for the kernel ahead
stores that one's end into host memory (word 8 of the status block: the probe's is 64 bytes, the
library's 16, so only the probe runs it), what a stream-ordered end mark written by the kernels
themselves costs a call.
"""
import ctypes, os, subprocess, sys, zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CACHE = os.path.join(os.environ.get("OXCCL_CACHE", os.path.join(ROOT, ".cache")), "cuda-rtc")
WHEELS = ["nvidia-cuda-nvrtc-cu12==12.1.105", "nvidia-cuda-runtime-cu12==12.1.105"]
SRC = os.path.join(HERE, "peer_reduce.cu")
OUTS = {
    "compute_80": os.path.join(HERE, "peer_reduce.ptx"),
    "compute_90": os.path.join(HERE, "peer_reduce_sm90.ptx"),
}


def fetch():
    lib = os.path.join(CACHE, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12")
    if not os.path.exists(lib):
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", CACHE] + WHEELS, check=True)
        for w in os.listdir(CACHE):
            if w.endswith(".whl"):
                zipfile.ZipFile(os.path.join(CACHE, w)).extractall(CACHE)
    return lib, os.path.join(CACHE, "nvidia", "cuda_runtime", "include")


def compile_ptx(arch, defines=()):
    lib_path, include = fetch()
    lib = ctypes.CDLL(lib_path)
    prog = ctypes.c_void_p()
    src = open(SRC).read()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"peer_reduce.cu", 0, None, None) != 0:
        sys.exit("nvrtcCreateProgram failed")
    opts = [b"--gpu-architecture=" + arch.encode(), b"-std=c++17", b"-I" + include.encode()]
    opts += [b"-D" + d.encode() for d in defines]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    if log.value.strip():
        print(log.value.decode(), file=sys.stderr)
    if rc != 0:
        sys.exit("peer_reduce.cu did not compile")
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    ptx = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetPTX(prog, ptx)
    return ptx.value.decode()


def main():
    args = sys.argv[1:]
    if "--out" in args:
        out = args[args.index("--out") + 1]
        defines = [args[i + 1] for i, a in enumerate(args) if a == "--define"]
        with open(out, "w") as f:
            f.write(compile_ptx("compute_90", defines))
        print(f"wrote {out} (compute_90, {' '.join(defines) or 'no defines'})")
        return
    for arch, out in OUTS.items():
        ptx = compile_ptx(arch)
        name = os.path.basename(out)
        if "--check" in sys.argv[1:]:
            if not os.path.exists(out) or open(out).read() != ptx:
                sys.exit(f"src/peer/{name} is stale: run backends/nccl/kernels/gen_ptx.py")
            print(f"{name} is current")
            continue
        with open(out, "w") as f:
            f.write(ptx)
        print(f"wrote {os.path.relpath(out, ROOT)} ({len(ptx)} bytes)")


if __name__ == "__main__":
    main()

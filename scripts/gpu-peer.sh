#!/usr/bin/env bash
# The GPU run of oxccl's all-reduce kernels (issue 28): the kernels' probe (values, the floor,
# kernels beside ncclAllReduce), the GPU tests (values through Comm, eager and in graphs; the
# waits that give up), the GPU suite with the kernels on, and oxccl perf with them on and off.
#
#   here:   bash scripts/gpu-peer.sh stage        # release tool and tests into .gpu/peer/
#   there:  bash scripts/gpu-peer.sh run OUTDIR [PART...]
#           PART: probe, tests, suite, ncclbuild, perf, graphs, procs, torch, variants, between,
#                 gathers (the all-gather and reduce-scatter kernels beside NCCL, after ncclbuild),
#                 elastic (issue 29: revoke, shrink, the elastic group, oxccl/examples/elastic_step),
#                 elastic232 (the same and the 2.29+ features on NCCL 2.32.3 in NCCL_232)
#           (default: all but variants)
#
# Every part runs under its own time limit and says PASS/FAIL in OUTDIR/summary.txt; its log
# (<part>.log) and its tables and JSON go into OUTDIR/results.tar.gz. It uses every GPU it sees
# (N = 2 and, with 4 or more, N = 3 and 4 too).
set -u
cmd=${1:-}; shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin=.gpu/peer

if [ "$cmd" = stage ]; then
    set -eo pipefail
    tests=(gpu_peer_kernels gpu gpu_elastic)
    json=$(cargo build --release --bin oxccl $(printf -- '--test %s ' "${tests[@]}") \
        --example elastic_step --message-format=json-render-diagnostics)
    rm -rf "$bin" && mkdir -p "$bin"
    echo "$json" | python3 scripts/cargo_exe.py --into "$bin" oxccl elastic_step "${tests[@]}"
    strip "$bin"/* 2>/dev/null || true
    # nccl-tests' source, built there (no network on the GPU machine).
    src=${NCCL_TESTS_GIT:-/work/.mirror/NVIDIA+nccl-tests/repo}
    mkdir -p "$bin/nccl-tests"
    git --git-dir="$src" archive HEAD | tar -x -C "$bin/nccl-tests"
    du -sh "$bin"
    exit 0
fi

[ "$cmd" = run ] || { echo "usage: $0 stage | run OUTDIR [PART...]" >&2; exit 2; }
final=${1:?OUTDIR}; shift || true
parts=${*:-probe tests suite ncclbuild perf graphs procs torch}
# The GPU machine sends back only a few files: the work happens in a folder of its own, and
# OUTDIR gets summary.txt and results.tar.gz (every log, table and JSON).
out=${GPU_PEER_WORK:-/tmp/gpu-peer-work}
mkdir -p "$out" "$final"
export NCCL_NVLS_ENABLE=0
nccl_lib=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
nccl_home=${nccl_lib%/lib}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
sizes="2"; [ "$gpus" -ge 4 ] && sizes="2 4"
perf_sizes="2"; [ "$gpus" -ge 4 ] && perf_sizes="2 3 4"
nt=$out/nccl-tests-build
nvidia-smi topo -m > "$out/topo.txt" 2>&1
note() { echo "$1" | tee -a "$final/summary.txt"; }

part_probe() {
    bash backends/nccl/kernels/gen.sh "$out/probe-bin" || return 1
    local rc=0
    for n in $sizes; do
        PROBE_PDL=1 LD_LIBRARY_PATH=$nccl_lib timeout 120 "$out/probe-bin/probe" "$out/probe-bin/peer_reduce_sm90.ptx" "$n" || rc=1
    done
    rm -rf "$out/probe-bin"
    return $rc
}
# The kernels' grid: the probe with blocks of 512 threads (at most 32), 256 (at most 64: the
# library's MAX_THREADS and MAX_BLOCKS) and 128 (at most 128), values checked, N = 4 then 2;
# then the library's shape with an event recorded after each eager call (a work's end).
part_variants() {
    bash backends/nccl/kernels/gen.sh "$out/probe-bin" || return 1
    local rc=0
    for n in $(echo $sizes | tr ' ' '\n' | sort -rn); do
        for cfg in 512:32 256:64 128:128; do
            echo "== blocks of ${cfg%%:*} threads, at most ${cfg##*:}, N=$n"
            PROBE_PDL=1 PROBE_THREADS=${cfg%%:*} PROBE_BLOCKS=${cfg##*:} LD_LIBRARY_PATH=$nccl_lib timeout 90 \
                "$out/probe-bin/probe" "$out/probe-bin/peer_reduce_sm90.ptx" "$n" 1000 | grep -v '^  ok' || rc=1
        done
        echo "== blocks of 256, an event recorded after each eager call, N=$n"
        PROBE_PDL=1 PROBE_EVENT=1 PROBE_QUICK=1 LD_LIBRARY_PATH=$nccl_lib timeout 90 \
            "$out/probe-bin/probe" "$out/probe-bin/peer_reduce_sm90.ptx" "$n" 1000 | grep -v '^  ok' || rc=1
    done
    return $rc
}
# A user's kernel between every two calls (PROBE_BETWEEN=1), so no call can follow the one
# before: the calls numbered as the library numbers them against none numbered, alternated twice.
part_between() {
    bash backends/nccl/kernels/gen.sh "$out/probe-bin" || return 1
    local rc=0
    for n in $sizes; do
        for round in 1 2; do
            for number in 1 0; do
                echo "== N=$n round $round, PROBE_NUMBER=$number"
                PROBE_PDL=1 PROBE_BETWEEN=1 PROBE_NUMBER=$number PROBE_QUICK=1 LD_LIBRARY_PATH=$nccl_lib \
                    timeout 90 "$out/probe-bin/probe" "$out/probe-bin/peer_reduce_sm90.ptx" "$n" 1000 || rc=1
            done
        done
    done
    return $rc
}
# torch's symmetric-memory one-shot and two-shot kernels (anchors; multicast off).
part_torch() {
    local rc=0
    for n in $sizes; do
        echo "== torch, N=$n"
        TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 150 \
            /opt/torch/.venv/bin/torchrun --nproc-per-node "$n" scripts/torch_symm.py || rc=1
    done
    return $rc
}
part_tests() {
    local rc=0
    for n in $sizes; do
        echo "== OXCCL_TEST_GPUS=$n"
        CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1))) OXCCL_TEST_GPUS=$n RUST_LOG=info \
            timeout 300 $bin/gpu_peer_kernels --test-threads=1 --nocapture || rc=1
    done
    return $rc
}
part_suite() { OXCCL_TEST_GPUS=$gpus timeout 200 $bin/gpu --test-threads=1; }
part_ncclbuild() {
    make -C $bin/nccl-tests -j"$(nproc)" MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME="$nccl_home" \
        NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$nt" > "$out/make.log" 2>&1
    local rc=$?; tail -3 "$out/make.log"; return $rc
}
# oxccl perf (torch's NCCL) with the kernels on and off, and nccl-tests with plain memory and
# with symmetric windows (its best small-message path), in the same run: `sweep TAG ARGS...`
# (ARGS: what oxccl perf and nccl-tests both take beyond sizes).
sweep() {
    local tag=$1 rc=0; shift
    for n in $perf_sizes; do
        for policy in auto nccl; do
            echo "== N=$n OXCCL_PEER_KERNELS=$policy $*"
            OXCCL_PEER_KERNELS=$policy timeout 100 $bin/oxccl perf all_reduce -g "$n" -b 8 -e 1M \
                "$@" --layer all --library "$nccl_lib/libnccl.so.2" \
                --json-out "$out/$tag-$n-$policy.json" || rc=1
        done
        for r in 0 2; do
            echo "== nccl-tests -t $n -g 1 -R $r $*"
            LD_LIBRARY_PATH=$nccl_lib timeout 60 "$nt/all_reduce_perf" -t "$n" -g 1 -b 8 -e 1M -f 2 \
                "$@" -R $r || rc=1
        done
    done
    return $rc
}
part_perf() { sweep perf -n 500 -w 50; }
# The all-gather and reduce-scatter kernels (forced) against NCCL through the same tool, and
# nccl-tests with plain memory and with windows, in the same run (sizes: the whole output of
# an all-gather, the whole input of a reduce-scatter, as nccl-tests counts them).
part_gathers() {
    local rc=0
    for coll in all_gather reduce_scatter; do
        for n in $perf_sizes; do
            for policy in ${coll/_/-} nccl; do
                echo "== $coll N=$n OXCCL_PEER_KERNELS=$policy"
                OXCCL_PEER_KERNELS=$policy timeout 100 $bin/oxccl perf $coll -g "$n" -b 64 -e 1M \
                    -n 500 -w 50 --layer all --library "$nccl_lib/libnccl.so.2" \
                    --json-out "$out/gathers-$coll-$n-$policy.json" || rc=1
            done
            for r in 0 2; do
                echo "== nccl-tests ${coll}_perf -t $n -g 1 -R $r"
                LD_LIBRARY_PATH=$nccl_lib timeout 60 "$nt/${coll}_perf" -t "$n" -g 1 -b 64 -e 1M -f 2 \
                    -n 500 -w 50 -R $r || rc=1
            done
        done
    done
    return $rc
}
# A process per GPU (torchrun --no-python): the kernels on and off.
part_procs() {
    local rc=0
    for n in $sizes; do
        for policy in auto nccl; do
            echo "== $n processes, OXCCL_PEER_KERNELS=$policy"
            OXCCL_PEER_KERNELS=$policy timeout 120 /opt/torch/.venv/bin/torchrun --nproc-per-node "$n" \
                --no-python $bin/oxccl perf all_reduce -b 8 -e 1M -n 500 -w 50 --layer all \
                --library "$nccl_lib/libnccl.so.2" --json-out "$out/procs-$n-$policy.json" || rc=1
        done
    done
    return $rc
}
part_graphs() { sweep graph -n 20 -w 5 -G 20; }
# The 2.29+ features (grow, suspend/resume, memory statistics) and the elastic example's
# join by grow, on NCCL 2.32.3 brought in parts (NCCL_232: the folder with its libnccl.so.2).
part_elastic232() {
    local lib=${NCCL_232:-/tmp/n232} rc=0
    [ -f "$lib/libnccl.so.2" ] || { echo "no libnccl.so.2 in $lib"; return 1; }
    OXCCL_TEST_GPUS=$gpus LD_LIBRARY_PATH=$lib RUST_LOG=warn \
        timeout 150 $bin/gpu_elastic --test-threads=1 --nocapture || rc=1
    # Puts of 32 KiB and more need the copy engines where GDRCopy is absent (NCCL reads the
    # variable once per process: the test runs alone with it).
    echo "== large puts, NCCL_P2P_USE_CUDA_MEMCPY=1"
    NCCL_P2P_USE_CUDA_MEMCPY=1 OXCCL_TEST_GPUS=$gpus LD_LIBRARY_PATH=$lib RUST_LOG=warn \
        timeout 60 $bin/gpu_elastic --nocapture gpu_comm_large || rc=1
    echo "== oxccl ping-pong, NCCL 2.32.3, NCCL_P2P_USE_CUDA_MEMCPY=1"
    NCCL_P2P_USE_CUDA_MEMCPY=1 CUDA_VISIBLE_DEVICES=0,1 timeout 100 $bin/oxccl ping-pong \
        -g 2 -b 8 -e 1M --library "$lib/libnccl.so.2" || rc=1
    if [ "$gpus" -ge 4 ]; then
        echo "== elastic_step, NCCL 2.32.3"
        CUDA_VISIBLE_DEVICES=0,1,2,3 OXCCL_BACKEND=nccl OXCCL_TIMEOUT_MS=10000 LD_LIBRARY_PATH=$lib \
            RUST_LOG=info timeout 200 $bin/elastic_step 2>&1 | grep -v ' step [0-9]* size ' || rc=1
    fi
    return $rc
}
# Revoke and shrink, the elastic group (threads), and the elastic example: 4 processes on
# 4 GPUs, rank 2 SIGKILLed mid-step, a replacement joining (NCCL 2.28.9, torch's).
part_elastic() {
    local rc=0
    OXCCL_TEST_GPUS=$gpus LD_LIBRARY_PATH=$nccl_lib RUST_LOG=warn \
        timeout 120 $bin/gpu_elastic --test-threads=1 --nocapture || rc=1
    if [ "$gpus" -ge 4 ]; then
        for policy in auto nccl; do
            echo "== elastic_step, OXCCL_PEER_KERNELS=$policy"
            CUDA_VISIBLE_DEVICES=0,1,2,3 OXCCL_BACKEND=nccl OXCCL_TIMEOUT_MS=10000 OXCCL_PEER_KERNELS=$policy \
                LD_LIBRARY_PATH=$nccl_lib RUST_LOG=warn timeout 200 $bin/elastic_step || rc=1
        done
    fi
    return $rc
}

for p in $parts; do
    start=$(date +%s)
    if "part_$p" > "$out/$p.log" 2>&1; then r=PASS; else r=FAIL; fi
    note "$p: $r ($(( $(date +%s) - start )) s)"
    # Few files come back from the GPU machine: everything but the summary goes in one archive.
    tar -czf "$final/results.tar.gz" -C "$out" --exclude=nccl-tests-build --exclude=probe-bin .
done

#!/usr/bin/env bash
# The GPU check of buffer modes (issue 9: -R on the pg layer, oxccl tune, NcclBuf / windows).
#
#   here:   bash scripts/gpu-tune.sh stage          # .gpu/tune/{oxccl,comm_buffers} (release)
#   there:  bash scripts/gpu-tune.sh run OUTDIR [NGPUS]
#
# `run` writes OUTDIR/log (everything), OUTDIR/tune.txt (the table oxccl tune wrote) and exits
# non-zero if any step failed. NGPUS defaults to 1 (single-rank communicators).
set -u
cmd=${1:-}; shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "$cmd" = stage ]; then
    set -e
    cargo build --release --bin oxccl --example comm_buffers
    mkdir -p .gpu/tune
    cp target/release/oxccl target/release/examples/comm_buffers .gpu/tune/
    strip .gpu/tune/* 2>/dev/null || true
    du -sh .gpu/tune
    exit 0
fi
[ "$cmd" = run ] || { echo "usage: $0 stage | run OUTDIR [NGPUS]" >&2; exit 2; }

out=${1:-/tmp/oxccl-tune}; n=${2:-1}
mkdir -p "$out"
nccl_home=${NCCL_HOME:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
export OXCCL_NCCL_LIBRARY=${OXCCL_NCCL_LIBRARY:-$nccl_home/lib/libnccl.so.2}
bin=.gpu/tune
fails=0
step() {
    echo "== $*" | tee -a "$out/log"
    "$@" 2>&1 | tee -a "$out/log"
    rc=${PIPESTATUS[0]}
    echo "exit $rc" | tee -a "$out/log"
    [ "$rc" = 0 ] || fails=$((fails + 1))
}
step $bin/oxccl info
# NcclBuf in each mode through the process group, values checked, drops while in flight;
# graphs on registered buffers, batches of sends and receives, release_windows.
step $bin/comm_buffers "$n"
# -R on the pg layer (checked results), beside raw and comm in the same mode.
step $bin/oxccl perf all_reduce all_gather reduce_scatter -g "$n" -b 8 -e 128M -n 20 -w 5 -R 1
step $bin/oxccl perf all_reduce all_gather reduce_scatter -g "$n" -b 8 -e 128M -n 20 -w 5 -R 2
# -R with CUDA graphs on every layer (the pg layer's buffers put in their mode before each
# capture), checked.
step $bin/oxccl perf all_reduce all_gather -g "$n" -b 8 -e 16M -f 8 -n 20 -w 5 -G 10 -R 2 --layer all
# The tune table of this machine, then the pg layer reading it back.
step $bin/oxccl tune all -g "$n" -b 8 -e 128M -n 40 -w 5 --rounds 5 --out "$out/tune.txt"
# The goal: the pg layer under the table against the pg layer in each mode alone.
for r in 0 1 2; do
    step $bin/oxccl perf all_reduce all_gather reduce_scatter --layer pg -g "$n" -b 8 -e 128M -n 20 -w 5 -R $r --json-out "$out/pg-R$r.json"
done
step $bin/oxccl perf all_reduce all_gather reduce_scatter --layer pg -g "$n" -b 8 -e 128M -n 20 -w 5 --tuned "$out/tune.txt" --json-out "$out/pg-tuned.json"
# Where the pg layer under the table stands against the best single mode, per point.
py=$(command -v python3 || echo /opt/torch/.venv/bin/python3)
"$py" - "$out" <<'PY' 2>&1 | tee -a "$out/log"
import json, sys
out = sys.argv[1]
runs = {k: json.load(open(f"{out}/pg-{k}.json"))["results"] for k in ["R0", "R1", "R2", "tuned"]}
def t(r):
    x = r["in_place"] or r["out_of_place"]
    return x["time_us"] if x else None
within, total, worst = 0, 0, (0.0, "")
for i, r in enumerate(runs["R0"]):
    ts = [t(runs[k][i]) for k in ["R0", "R1", "R2", "tuned"]]
    if None in ts:
        continue
    ratio = ts[3] / min(ts[:3])
    total += 1
    within += ratio <= 1.05
    if ratio > worst[0]:
        worst = (ratio, f"{r['collective']} {r['size']} B: R0/R1/R2 {ts[0]:.2f}/{ts[1]:.2f}/{ts[2]:.2f} us, tuned {ts[3]:.2f} us")
print(f"tuned within 5% of the best of -R 0/1/2 at {within} of {total} points; worst {worst[0]:.2f}x: {worst[1]}")
PY
# oxccl tune under a launcher (a process per GPU, medians merged through the group), when
# torchrun is there.
torchrun=$(command -v torchrun || echo /opt/torch/.venv/bin/torchrun)
if [ -x "$torchrun" ]; then
    step "$torchrun" --standalone --nproc-per-node "$n" --no-python $bin/oxccl tune all_reduce all_gather -b 8 -e 16M -n 10 --out "$out/tune-launched.txt"
fi
echo "== failed steps: $fails" | tee -a "$out/log"
[ "$fails" = 0 ]

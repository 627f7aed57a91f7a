#!/usr/bin/env bash
# The torch_share example on 2 GPUs (docs/guide/pytorch.md): the PyTorch trainer
# (oxccl/examples/torch_share/trainer.py, rank 0, GPU 0) and the Rust inference server
# (oxccl/examples/torch_share.rs, rank 1, GPU 1) share one NCCL communicator.
#
#   here:   bash scripts/gpu-torch-share.sh stage
#           builds the example and copies it, stripped, to .gpu/torch_share/torch_share (carry it)
#   there:  bash scripts/gpu-torch-share.sh .gpu/torch_share/torch_share [server flags...]
#
# Environment: PYTHON (default /opt/torch/.venv/bin/python, else python3), PORT (29533),
# STEPS (5), ELEMS (1048576), LIMIT (180: seconds for the whole run; each side's own waits get
# LIMIT - 30), OUT (when set: trainer.log, server.log, env.txt, summary.txt go there).
# The server loads the libnccl the trainer reports torch has loaded (its /proc/self/maps),
# unless OXCCL_NCCL_LIBRARY or --nccl says otherwise. Both sides run under `timeout`, in their own
# process groups; on a timeout or a failure of either, both groups are killed. Exit status 0
# only when both print RESULT ... OK and exit 0.
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "${1:-}" = stage ]; then
    set -eo pipefail
    cargo build --release --example torch_share
    mkdir -p .gpu/torch_share
    cp "${CARGO_TARGET_DIR:-target}/release/examples/torch_share" .gpu/torch_share/
    strip .gpu/torch_share/torch_share 2>/dev/null || true
    ls -l .gpu/torch_share/torch_share
    exit 0
fi

bin=${1:?usage: gpu-torch-share.sh stage | gpu-torch-share.sh SERVER_BINARY [server flags...]}
shift
[ -x "$bin" ] || { echo "no executable server binary at $bin" >&2; exit 2; }
py=${PYTHON:-/opt/torch/.venv/bin/python}
[ -x "$py" ] || py=python3
port=${PORT:-29533}
limit=${LIMIT:-180}
inner=$(( limit > 60 ? limit - 30 : limit / 2 ))
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

{
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(hostname)"
    nvidia-smi -L 2>&1 || echo "nvidia-smi: absent"
    "$py" -W ignore -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())' 2>&1
    env | grep -E '^(NCCL_|OXCCL_|CUDA_VISIBLE)' | sort
    echo "server: $bin $*"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

# setsid: each side leads its own process group, so a kill reaches whatever it started.
setsid -w timeout --kill-after=10 "$limit" "$py" -u -W ignore oxccl/examples/torch_share/trainer.py \
    --port "$port" --gpu 0 --steps "${STEPS:-5}" --elems "${ELEMS:-1048576}" --timeout "$inner" \
    > "$out/trainer.log" 2>&1 &
tpid=$!
setsid -w timeout --kill-after=10 "$limit" "$bin" --store "127.0.0.1:$port" --gpu 1 \
    --timeout "$inner" "$@" > "$out/server.log" 2>&1 &
spid=$!

kill_both() {
    for p in $tpid $spid; do kill -TERM -- "-$p" "$p" 2>/dev/null; done
    sleep 2
    for p in $tpid $spid; do kill -KILL -- "-$p" "$p" 2>/dev/null; done
}
trap 'kill_both; exit 130' INT TERM

# Wait for both; when one fails, give the other a short grace (it should fail by itself
# through the store or its own timeouts), then kill it.
trc=; src=
deadline=$(( $(date +%s) + limit + 15 ))
while [ -z "$trc" ] || [ -z "$src" ]; do
    if [ -z "$trc" ] && ! kill -0 "$tpid" 2>/dev/null; then wait "$tpid"; trc=$?; fi
    if [ -z "$src" ] && ! kill -0 "$spid" 2>/dev/null; then wait "$spid"; src=$?; fi
    if { [ -n "$trc" ] && [ "$trc" != 0 ] && [ -z "$src" ]; } ||
       { [ -n "$src" ] && [ "$src" != 0 ] && [ -z "$trc" ]; }; then
        [ -z "${grace:-}" ] && grace=$(( $(date +%s) + 20 ))
    fi
    now=$(date +%s)
    if { [ -n "${grace:-}" ] && [ "$now" -gt "$grace" ]; } || [ "$now" -gt "$deadline" ]; then
        echo "killing what is left (trainer rc=${trc:-running}, server rc=${src:-running})"
        kill_both
        [ -z "$trc" ] && { wait "$tpid"; trc=$?; }
        [ -z "$src" ] && { wait "$spid"; src=$?; }
    fi
    sleep 0.2
done

echo "---- trainer (rc $trc) ----"; cat "$out/trainer.log"
echo "---- server (rc $src) ----"; cat "$out/server.log"
ok=0
grep -q '^RESULT torch_share trainer: OK' "$out/trainer.log" && [ "$trc" = 0 ] || ok=1
grep -q '^RESULT torch_share server: OK' "$out/server.log" && [ "$src" = 0 ] || ok=1
{
    echo "trainer rc=$trc: $(grep '^RESULT' "$out/trainer.log" || echo 'no RESULT line')"
    echo "server rc=$src: $(grep '^RESULT' "$out/server.log" || echo 'no RESULT line')"
    [ $ok = 0 ] && echo "PASS" || echo "FAIL"
} > "$out/summary.txt"
echo "---- summary ($out) ----"; cat "$out/summary.txt"
exit $ok

#!/usr/bin/env bash
# Usage: bash benchmarks/device/detached.sh NAME ARGS...
# Runs `python3 benchmarks/NAME.py --out /root/NAME/NAME.json ARGS...` on the GPU machine detached
# (setsid), so it outlives the call that started it and keeps running while the machine stays
# warm; every call waits up to WAIT_S seconds, then brings back NAME.json, NAME.log and the files
# named in BRING_BACK (paths under /root/NAME) under $OUT. Call again to keep waiting.
# A run whose NAME.json is there is not started again (a waiting call after the end only brings
# it back); TAG=x runs another one under /root/NAME-x once none is running (e.g. a second arm
# reusing the first one's checkpoints). An argument's `{run}` becomes that folder (/root/NAME[-TAG]).
set -uo pipefail
export PYTHONPATH=/root/smol RLPLUGS_CACHE=/root/rlcache HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false
name=$1
shift
work=/root/$name${TAG:+-$TAG}
set -- "${@//\{run\}/$work}"
start=$SECONDS
source benchmarks/device/chains.sh  # chain, alive: detached runs found by their pid files
running() { alive /root/$name/$name.pid /root/$name-*/$name.pid; }  # any TAG's
if [ -f $work/$name.json ]; then
    echo "$work/$name.json is there: not started again (TAG=x runs another under /root/$name-x)"
elif ! running; then
    bash benchmarks/device/setup.sh || exit 1
    mkdir -p $work
    chain $work $name "python3 benchmarks/$name.py --out $work/$name.json $(printf '%q ' "$@")"
    sleep 5
fi
while running && [ $((SECONDS - start)) -lt "${WAIT_S:-560}" ]; do sleep 5; done
running && echo "still running after $((SECONDS - start)) s: call again to keep waiting" || echo "ended"
for f in $name.json $name.log ${BRING_BACK:-}; do cp "$work/$f" "$OUT/" 2>/dev/null; done
grep -v "Warning\|warn(" $work/$name.log | tail -c 4000

#!/usr/bin/env bash
# benchmarks/generation.py on the H200, detached (setsid) so it outlives the call that started it
# and keeps running while the machine stays warm; every call waits up to WAIT_S seconds, then
# brings back the result and the log under $OUT. Call again (nothing to carry) to keep waiting.
# The SmolLM2 GGUF travels in two parts over two calls (benchmarks/device/setup.sh joins them):
#   call 1: carry .whl and .smol1, run `bash benchmarks/device/setup.sh`
#   call 2: carry .smol2, run `bash benchmarks/device/generation.sh ARGS...`
set -uo pipefail
export PYTHONPATH=/root/smol RLPLUGS_CACHE=/root/rlcache HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false
WORK=/root/generation
start=$SECONDS
running() { pgrep -f "benchmarks/generation.py" > /dev/null; }
if ! running; then
    bash benchmarks/device/setup.sh || exit 1
    mkdir -p $WORK
    setsid nohup python3 benchmarks/generation.py --out $WORK/generation.json "$@" > $WORK/generation.log 2>&1 < /dev/null &
    sleep 5
fi
while running && [ $((SECONDS - start)) -lt "${WAIT_S:-560}" ]; do sleep 5; done
running && echo "still running after $((SECONDS - start)) s: call again to keep waiting" || echo "ended"
cp $WORK/generation.json $WORK/generation.log "$OUT/" 2>/dev/null
grep -v "Warning\|warn(" $WORK/generation.log | tail -c 4000

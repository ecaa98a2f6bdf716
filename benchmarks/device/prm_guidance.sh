#!/usr/bin/env bash
# benchmarks/prm_guidance.py on the H200 (issue 19, item 3: SFT on won games, then greedy vs
# best-of-N random / outcome / PRM vs beam), detached (setsid) so it outlives the call that started
# it and keeps running while the machine stays warm; every call waits up to WAIT_S seconds, then
# brings back the result and the log under $OUT. Call again (nothing to carry) to keep waiting.
# The SmolLM2 GGUF travels in parts over consecutive calls (benchmarks/device/setup.sh joins them):
#   call 1: carry .whl and .smol1, run `bash benchmarks/device/setup.sh`
#   call 2: carry .smol2, run `bash benchmarks/device/prm_guidance.sh` (ARGS replace the defaults below)
set -uo pipefail
export PYTHONPATH=/root/smol RLPLUGS_CACHE=/root/rlcache HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false
WORK=/root/prm_guidance
start=$SECONDS
running() { pgrep -f "benchmarks/prm_guidance.py" > /dev/null; }
if [ $# -eq 0 ]; then  # the run, sized for about 10 device minutes (see benchmarks/README.md)
    set -- --device cuda --sft-first 24 --sft-epochs 2 --label-episodes 48 --candidates 4 --k 2 --episodes 128 \
        --n 4 --beam-width 2 --iterations 2 --max-new-tokens 64 --batch-size 256 --prm-epochs 2
fi
if ! running; then
    bash benchmarks/device/setup.sh || exit 1
    mkdir -p $WORK
    setsid nohup python3 benchmarks/prm_guidance.py --work $WORK/work --out $WORK/prm_guidance.json "$@" \
        > $WORK/prm_guidance.log 2>&1 < /dev/null &
    sleep 5
fi
while running && [ $((SECONDS - start)) -lt "${WAIT_S:-560}" ]; do sleep 5; done
running && echo "still running after $((SECONDS - start)) s: call again to keep waiting" || echo "ended"
cp $WORK/prm_guidance.json $WORK/prm_guidance.log "$OUT/" 2>/dev/null
cp $WORK/work/sft.log "$OUT/" 2>/dev/null
grep -v "Warning\|warn(" $WORK/prm_guidance.log | tail -c 4000

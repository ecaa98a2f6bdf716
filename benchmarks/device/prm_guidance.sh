#!/usr/bin/env bash
# benchmarks/prm_guidance.py on the H200 (issue 19, item 3: SFT on won games, then greedy vs
# best-of-N random / outcome / PRM vs beam), detached (benchmarks/device/detached.sh): every call
# waits up to WAIT_S seconds, then brings back the result, its log and the SFT log under $OUT.
# Call again (nothing to carry) to keep waiting.
# The SmolLM2 GGUF travels in four parts over three calls (benchmarks/device/split_gguf.sh cuts them
# here, benchmarks/device/setup.sh joins them there):
#   calls 1 and 2: carry .whl .smol1, then .smol3 .smol4, run `bash benchmarks/device/setup.sh`
#   call 3: carry .smol2, run `bash benchmarks/device/prm_guidance.sh` (ARGS replace the defaults below)
if [ $# -eq 0 ]; then  # the run, sized for about 10 device minutes (see benchmarks/README.md)
    set -- --device cuda --sft-first 16 --sft-epochs 2 --label-episodes 24 --candidates 2 --k 2 --episodes 96 \
        --modes greedy,best_of_n_random,best_of_n_prm,beam_prm --n 4 --beam-width 2 --iterations 2 \
        --max-new-tokens 64 --batch-size 256 --prm-epochs 2
fi
BRING_BACK="work/sft.log ${BRING_BACK:-}" exec bash benchmarks/device/detached.sh prm_guidance --work "{run}/work" "$@"

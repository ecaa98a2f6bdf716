#!/usr/bin/env bash
# issue 7/7 on the GPU machine: start (or keep waiting for) the stages of benchmarks/factorio_repro.py.
#
# The chains run detached (setsid), so they outlive the device call that started them and keep
# running while the machine stays warm; every call (the first one too) waits up to WAIT_S seconds,
# then copies what has finished to $OUT. Call it again on the warm machine to wait for the rest.
# Stages already written under /root/repro are skipped (the driver is resumable), so a fresh
# machine after a lost lease redoes only what is missing. With 2 GPUs the 93-program chain and the
# overhead figure share GPU 0, the 800-program chain takes GPU 1; with one GPU all run in turn (A, then B).
set -uo pipefail
export PYTHONPATH=/root/smol RLPLUGS_CACHE=/root/rlcache HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# on an H100 (80 GB) the 8-group chain ran out of memory generating its second batch, with 12.9 GiB
# reserved but unallocated (session 31); with expandable segments (and 2 GiB of stray processes
# gone) the same steps passed
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
wait_s=${WAIT_S:-560}
repro=/root/repro
start=$SECONDS
source benchmarks/device/chains.sh  # chain, alive: detached runs found by their pid files
running() { alive $repro/*.pid; }
if ! running; then
    bash benchmarks/device/setup.sh || exit 1
    python3 -c "from rlplugs.testing.smollm2 import smollm2_dir; print(smollm2_dir())" || exit 1
    mkdir -p $repro
    ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
    A=${STAGES_A-base,sft93,grpo93,overhead}; B=${STAGES_B-sft800,grpo800}  # set but empty means none
    # EXTRA: driver flags for both chains; EXTRA_B: more for the B chain (the later of repeated flags wins).
    # Both are shell words (quotes kept: --grpo_args "..."), so each chain runs under bash -c.
    stages() { [ -n "$1" ] && echo "python3 benchmarks/factorio_repro.py --stages $1 --out $repro --workers $2 $3"; }
    a=$(stages "$A" 7 "${EXTRA:-}"); b=$(stages "$B" 7 "${EXTRA:-} ${EXTRA_B:-}")
    # CHAIN: a whole command line run as the one chain instead (plans that are several driver calls)
    if [ -n "${CHAIN:-}" ]; then CUDA_VISIBLE_DEVICES=0 chain $repro chain_a "$CHAIN"
    elif [ "$ngpu" -ge 2 ] && [ -n "$a" ] && [ -n "$b" ]; then CUDA_VISIBLE_DEVICES=0 chain $repro chain_a "$a"; CUDA_VISIBLE_DEVICES=1 chain $repro chain_b "$b"
    else CUDA_VISIBLE_DEVICES=0 chain $repro chain_a "$(stages "$A" 14 "${EXTRA:-}")${a:+${b:+; }}$(stages "$B" 14 "${EXTRA:-} ${EXTRA_B:-}")"; fi
    sleep 5
fi
while running && [ $((SECONDS - start)) -lt $wait_s ]; do sleep 10; done
running && echo "still running after $((SECONDS - start)) s: call again to keep waiting" || echo "all chains ended"
ls $repro
for dir in $repro ${repro}[0-9]*; do  # /root/repro, and /root/repro2 ... where a CHAIN wrote them
    [ -d "$dir" ] && (cd $dir && tar czf $OUT/$(basename $dir).tgz $(ls *.json *.log 2>/dev/null) \
        $(ls -d eval-*/report.json eval-*/report.md eval-*/samples.jsonl eval-*/*.png grpo*/trainer_state.json 2>/dev/null))
done
tail -c 2500 $repro/chain_a.log; tail -c 2500 $repro/chain_b.log 2>/dev/null
nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader

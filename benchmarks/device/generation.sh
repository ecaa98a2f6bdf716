#!/usr/bin/env bash
# benchmarks/generation.py on the H200, detached (benchmarks/device/detached.sh): every call waits
# up to WAIT_S seconds, then brings back the result and the log under $OUT. Call again (nothing to
# carry) to keep waiting.
# The SmolLM2 GGUF travels in two parts over two calls (benchmarks/device/setup.sh joins them):
#   call 1: carry .whl and .smol1, run `bash benchmarks/device/setup.sh`
#   call 2: carry .smol2, run `bash benchmarks/device/generation.sh ARGS...`
exec bash benchmarks/device/detached.sh generation "$@"

#!/usr/bin/env bash
# Download the wheels benchmarks/matrl_relax.py and benchmarks/judge_serving.py need on the GPU machine
# (Python 3.12, torch 2.11, no chgnet/pymatgen/ase/fastapi/uvicorn there) into .whl_matrl/ (its own
# git-ignored folder: .whl/ is shared with other work) at the repository root. Only downloads; nothing runs.
#
#   bash benchmarks/gpu_wheels_matrl.sh
#
# numpy, scipy, pandas, networkx, sympy, matplotlib, tabulate, requests, tqdm, lxml, msgpack,
# pynvml (nvidia-ml-py), narwhals are already on that machine (plotly is not, and pymatgen's phase
# diagrams import it at module level). chgnet imports `nvidia_smi` (nvidia-ml-py3,
# which PyPI has only as an sdist), so a one-line shim over pynvml is written next to the wheels.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .whl_matrl
download() {
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -q -d .whl_matrl "$@"
}
download chgnet==0.4.2 pymatgen==2026.10.24 pymatgen-core==2026.10.16 ase==3.29.0 monty==2026.10.21 \
  fastapi==0.165.0 opentelemetry-api==1.45.2 starlette==1.10.0 uvicorn==0.54.0 sniffio==1.3.1 \
  ruamel.yaml==0.19.1 orjson==3.13.0 spglib==2.8.0 palettable==3.3.3 uncertainties==3.2.3 plotly==7.1.0
mkdir -p .whl_matrl/shim
echo 'from pynvml import *  # noqa: F403 - chgnet imports nvidia-ml-py3 under this name' > .whl_matrl/shim/nvidia_smi.py
du -ch .whl_matrl/*.whl | tail -1

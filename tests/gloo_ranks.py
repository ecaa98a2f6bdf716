"""Run a test module as an accelerate worker on two CPU ranks over gloo, and read what each rank wrote.

The worker is the module itself (its ``__main__`` block), called with the output folder and the
model folder; each rank writes ``rank{N}.json`` there.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _by_rank(stderr: str) -> str:
    """Each rank's last lines apart: when one rank dies, the other's long "connection reset"
    traceback would otherwise fill the message and hide why."""
    lines = stderr.splitlines()
    parts = {tag: [l for l in lines if l.startswith(f"[{tag}]")] for tag in ("rank0", "rank1")}
    parts["untagged"] = [l for l in lines if not l.startswith("[rank")]
    return "\n".join(f"--- {tag} ---\n" + "\n".join(part)[-2500:] for tag, part in parts.items())


def run_two_ranks(worker: str, out_dir: Path, model_dir: Path, env: dict[str, str] | None = None,
                  timeout: int = 900) -> list[dict]:
    """``accelerate launch`` ``worker`` on two gloo ranks; the two ranks' JSON records."""
    env = dict(env or os.environ, OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1", HF_HUB_OFFLINE="1")
    cmd = [
        str(Path(sys.executable).with_name("accelerate")), "launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(_free_port()), worker, str(out_dir), str(model_dir),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, _by_rank(proc.stderr)
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(2)]

"""Run a test module as an accelerate worker on two CPU ranks over gloo, and read what each rank wrote.

The worker is the module itself (its ``__main__`` block), called with the output folder and the
model folder; each rank writes ``rank{N}.json`` there.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import warnings
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
    """``accelerate launch`` ``worker`` on two gloo ranks; the two ranks' JSON records. A run whose rank
    was killed by a signal runs once more (see :func:`_killed_by_signal`), on a fresh port."""
    env = dict(env or os.environ, OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1", HF_HUB_OFFLINE="1")

    def launch() -> subprocess.CompletedProcess:
        cmd = [
            str(Path(sys.executable).with_name("accelerate")), "launch", "--multi_gpu", "--num_processes", "2",
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(_free_port()), worker, str(out_dir), str(model_dir),
        ]  # fmt: skip
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)

    proc = launch()
    if proc.returncode != 0 and _killed_by_signal(proc.stderr):
        warnings.warn(f"a gloo rank was killed by a signal; running the ranks once more:\n{_by_rank(proc.stderr)}")
        proc = launch()
    assert proc.returncode == 0, _by_rank(proc.stderr)
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(2)]


def _killed_by_signal(stderr: str) -> bool:
    """Whether torch's launcher reports a rank aborted or crashed (SIGABRT, SIGSEGV) and none that
    raised. CI saw gloo abort both ranks ("terminate called without an active exception") in two tests
    of one run that pass here and had passed in CI before. A rank that raises exits with code 1 and the
    launcher stops the other with SIGTERM: such a run (an error of ours) is never run again."""
    codes = [int(code) for code in re.findall(r"exitcode\s*:\s*(-?\d+)", stderr)]
    return any(code in (-6, -11) for code in codes) and not any(code > 0 for code in codes)

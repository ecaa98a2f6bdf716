"""How the benchmark drivers run a stage's command (``rlplugs sft``, ``trl grpo``, ...): its output
goes to a log file beside the results (a training run prints too much for the driver's own log),
the driver logs the command as ``$ ...`` (``factorio_repro.stage_commands`` collects those lines)
and gets the wall seconds back; a failed command stops the driver with one line that says which
command failed and where its log is, followed by the log's last lines (the error is usually there)."""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger("benchmarks")
TAIL_CHARS = 4000


def rlplugs_cli(*args: str) -> list[str]:
    """The user's ``rlplugs ARGS`` command, run with this interpreter."""
    return [sys.executable, "-m", "rlplugs.tools.cli", *args]


def run_logged(cmd: list[str], log_path: Path, name: str) -> float:
    """Run ``cmd`` with stdout and stderr in ``log_path``; its wall seconds. ``name`` is what the
    error calls the command (``rlplugs sft``): the full command line is in the driver's log."""
    log.info("$ %s", shlex.join(cmd))
    start = time.perf_counter()
    with open(log_path, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode:
        tail = Path(log_path).read_text(errors="replace")[-TAIL_CHARS:]
        raise RuntimeError(f"{name} failed with exit code {proc.returncode} (its output: {log_path}); the log ends:\n{tail}")
    return time.perf_counter() - start

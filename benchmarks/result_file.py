"""How the judge benchmarks record a result: the figures, the machine (with its load, since the
CPU machine is shared with other jobs while they run) and the command that made them."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def write_result(out: str | Path, results: dict[str, Any], load_before: float, key: str | None = None,
                 shared: bool = True) -> None:
    """Write ``results`` to ``out``, or under ``key`` of it (the file's other figures are kept:
    a GPU machine's figures beside the CPU ones)."""
    import torch

    gpu = f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    results.update({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores{gpu}, Python {platform.python_version()}; "
                   f"{'SHARED with other jobs' if shared else 'not shared'}: load average {load_before:.1f} before, "
                   f"{os.getloadavg()[0]:.1f} after",
        "command": f"python benchmarks/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:]),
    })
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    document = {**(json.loads(Path(out).read_text()) if Path(out).exists() else {}), key: results} if key else results
    Path(out).write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(results, indent=2))

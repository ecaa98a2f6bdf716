"""How the judge benchmarks record a result: the figures, the machine (with its load, since the
CPU machine is shared with other jobs while they run) and the command that made them."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def write_result(out: str | Path, results: dict[str, Any], load_before: float) -> None:
    results.update({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; SHARED with "
                   f"other jobs: load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after",
        "command": f"python benchmarks/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:]),
    })
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))

"""Whether a model folder's safetensors files are whole, checked before anything loads them.

A copy cut short (an interrupted download, a full disk during a save) otherwise surfaces as a
``SafetensorError`` traceback from inside transformers' loader, in every training process, after the
launch and the data loading. safetensors checks a file's header against its size when it opens it,
without reading the tensors, so the check costs milliseconds per shard.
"""

from __future__ import annotations

from pathlib import Path


def damaged_safetensors(folder: Path) -> str | None:
    """The first safetensors file in ``folder`` (not its subfolders) that does not open, with the
    reason; ``None`` when every one opens."""
    from safetensors import SafetensorError, safe_open

    for shard in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(shard), framework="numpy"):
                pass
        except (SafetensorError, OSError) as exc:
            return f"{shard.name} is damaged ({exc})"
    return None

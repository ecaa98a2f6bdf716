"""Whether a model or checkpoint folder holds weights, and whole ones, checked before anything loads them.

A folder without weights fails ``Trainer``'s resume only after the model and the data have loaded. A copy
cut short (an interrupted download, a full disk during a save) otherwise surfaces as a
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


def holds_weights(folder: Path) -> bool:
    """Whether ``folder`` or one of its subfolders holds what transformers' ``Trainer`` loads weights
    from on resume: full or sharded weights, a PEFT adapter (subfolders hold one per adapter), an FSDP
    model state, or a DeepSpeed ``global_step*`` folder."""
    from accelerate.utils.constants import FSDP_MODEL_NAME
    from transformers.utils import (ADAPTER_SAFE_WEIGHTS_NAME, ADAPTER_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME,
                                    SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME)  # fmt: skip

    names = (WEIGHTS_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_INDEX_NAME, ADAPTER_WEIGHTS_NAME,
             ADAPTER_SAFE_WEIGHTS_NAME, f"{FSDP_MODEL_NAME}.bin")  # fmt: skip
    subfolders = [p for p in folder.iterdir() if p.is_dir()]
    return any((where / name).is_file() for where in [folder, *subfolders] for name in names) or any(
        FSDP_MODEL_NAME in p.name or p.name.startswith("global_step") for p in subfolders)

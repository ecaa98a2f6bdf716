"""Whether a model or checkpoint folder holds weights, and whole ones, checked before anything loads them.

A folder without weights fails ``Trainer``'s resume only after the model and the data have loaded. A copy
cut short (an interrupted download, a full disk during a save) otherwise surfaces as a
``SafetensorError`` traceback from inside transformers' loader, in every training process, after the
launch and the data loading. safetensors checks a file's header against its size when it opens it,
without reading the tensors, so the check costs milliseconds per shard.
"""

from __future__ import annotations

import json
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


def model_folder_problem(folder: Path, markers: tuple[str, ...] = ("config.json", "adapter_config.json")) -> str | None:
    """What keeps ``folder`` from loading as a model, said with what to do (``None`` when nothing):
    none of ``markers`` in it (a model's ``config.json``, a LoRA adapter's ``adapter_config.json``),
    one that does not parse, no weights file, or a safetensors file cut short. The training launch
    and every command that loads a model ask it."""
    found = [marker for marker in markers if (folder / marker).is_file()]
    if markers and not found:
        return f"no {' or '.join(markers)} in it; give a Hugging Face model directory or a LoRA adapter's"
    for marker in found:  # transformers' loader raised an OSError about it from inside the training processes
        try:
            json.loads((folder / marker).read_text())
        except (ValueError, OSError) as exc:
            return f"{marker} does not parse as JSON ({exc}); save or download the model again"
    if found and not any((folder / name).is_file() for name in _weight_files()):
        return f"no weights in it ({', '.join(_weight_files()[:2])}, ...); save or download the model again"
    if damage := damaged_safetensors(folder):
        return f"{damage}; save or download the model again"
    return None


def _weight_files() -> tuple[str, ...]:
    """The files transformers loads a model's or an adapter's weights from (whole or as an index of shards)."""
    from transformers.utils import (ADAPTER_SAFE_WEIGHTS_NAME, ADAPTER_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME,
                                    SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME)  # fmt: skip

    return (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME, ADAPTER_SAFE_WEIGHTS_NAME,
            ADAPTER_WEIGHTS_NAME)  # fmt: skip


def holds_weights(folder: Path) -> bool:
    """Whether ``folder`` or one of its subfolders holds what transformers' ``Trainer`` loads weights
    from on resume: full or sharded weights, a PEFT adapter (subfolders hold one per adapter), an FSDP
    model state, or a DeepSpeed ``global_step*`` folder."""
    from accelerate.utils.constants import FSDP_MODEL_NAME

    names = (*_weight_files(), f"{FSDP_MODEL_NAME}.bin")
    subfolders = [p for p in folder.iterdir() if p.is_dir()]
    return any((where / name).is_file() for where in [folder, *subfolders] for name in names) or any(
        FSDP_MODEL_NAME in p.name or p.name.startswith("global_step") for p in subfolders)


def unresumable(checkpoint: Path) -> str | None:
    """Why ``Trainer`` could not resume from ``checkpoint`` (``None`` when it could): no folder, a step
    record that is missing, does not parse or holds no step count, no weights, or a safetensors file
    cut short (in the folder or an adapter's subfolder). Resume meets each only after the model loaded."""
    from transformers import TrainerState

    if not checkpoint.is_dir():
        return f"{checkpoint}: no such folder; give a checkpoint-N folder of a run"
    state = checkpoint / "trainer_state.json"
    if not state.is_file():
        return f"{checkpoint}: no trainer_state.json, not a checkpoint-N folder"
    try:
        step = TrainerState.load_from_json(str(state)).global_step
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as exc:
        return (f"{checkpoint}: its trainer_state.json is damaged ({type(exc).__name__}: {exc}); resume from another "
                "checkpoint-N")
    if not isinstance(step, int):  # the LR schedule is stepped to it
        return (f"{checkpoint}: its trainer_state.json's global_step is {step!r}, not a step count; resume from "
                "another checkpoint-N")
    if not holds_weights(checkpoint):
        return (f"{checkpoint}: no model weights (model.safetensors, pytorch_model.bin, an adapter or an "
                "FSDP/DeepSpeed model state); resume from a checkpoint-N the trainer saved whole")
    for folder in [checkpoint, *(p for p in sorted(checkpoint.iterdir()) if p.is_dir())]:
        if damage := damaged_safetensors(folder):
            return f"{folder}: {damage}; resume from another checkpoint-N"
    return None

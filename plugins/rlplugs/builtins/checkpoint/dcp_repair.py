"""Add the missing per-parameter optimizer state to a torch DCP checkpoint (prime-rl ``step_N``).

Why: AdamW creates a parameter's state on the first step that parameter gets a gradient. A
parameter that never gets one (the vision tower of a Qwen3.5 trained on text only) has no
``exp_avg``/``exp_avg_sq``/``step`` in the checkpoint, yet on load ``set_state_dict`` materialises
state for *every* trainable parameter and the strict DCP planner then fails with ``Missing key in
checkpoint state_dict: app.optimizers.state.<param>.step``. Resume-from-latest turns that into a
crash loop (prime-rl #2676, #2800).

The repair writes, for each parameter listed in the optimizer's ``param_groups`` but without state,
the state an optimizer has before its first update: zero-filled tensors shaped like the parameter
for the per-element entries and a zero ``step``, using the entries of a parameter that *has* state
as the template (so AdamW, Adam, Lion, ... all work; an entry of any other shape is refused).
Those tensors go to a new ``__rlplugs_repair_*.distcp`` file and ``.metadata`` is replaced
atomically by one that also indexes them. The existing ``.distcp`` files are never opened for
writing, so the trained parameters' saved state stays identical bit for bit. Running it twice is
a no-op.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

log = logging.getLogger(__name__)

METADATA_FILE = ".metadata"
REPAIR_FILE_PREFIX = "__rlplugs_repair_"
#: Layout of prime-rl's ``AppState``: ``{"app": {"model": ..., "optimizers": ...}}``.
DEFAULT_MODEL_PREFIX = "app.model."
DEFAULT_OPTIMIZER_PREFIX = "app.optimizers."


class RepairError(RuntimeError):
    """The checkpoint cannot be repaired; it was left unchanged."""


@dataclass
class RepairReport:
    checkpoint: Path
    params_repaired: list[str] = field(default_factory=list)
    keys_added: list[str] = field(default_factory=list)
    file_written: str | None = None


def find_dcp_dir(step_dir: str | os.PathLike[str]) -> Path:
    """The folder holding ``.metadata``: ``step_dir`` itself or prime-rl's ``step_dir/trainer``."""
    step_dir = Path(step_dir)
    for candidate in (step_dir, step_dir / "trainer"):
        if (candidate / METADATA_FILE).is_file():
            return candidate
    raise RepairError(f"{step_dir}: no DCP checkpoint ({METADATA_FILE} not found here or in trainer/)")


def _read_metadata(ckpt: Path):
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        with (ckpt / METADATA_FILE).open("rb") as f:
            metadata = pickle.load(f)
    except Exception as exc:  # unpickling garbage raises about anything (ValueError, EOFError, UnpicklingError, ...)
        raise RepairError(f"{ckpt / METADATA_FILE} does not load ({type(exc).__name__}: {exc}); the checkpoint is "
                          "damaged: save it again or take an earlier one") from None
    if not isinstance(metadata, Metadata):
        raise RepairError(f"{ckpt / METADATA_FILE} holds a {type(metadata).__name__}, not DCP metadata; the checkpoint is damaged")
    return metadata


def _param_fqns(ckpt: Path, metadata, optim_prefix: str) -> list[str]:
    """Every parameter the optimizer was built over, from its saved ``param_groups``."""
    import torch.distributed.checkpoint as dcp

    keys = [
        k for k in metadata.state_dict_metadata
        if k.startswith(f"{optim_prefix}param_groups.") and k.endswith(".params")
    ]  # fmt: skip
    if not keys:
        roots = sorted({k.split(".")[0] + "." + k.split(".")[1] for k in metadata.state_dict_metadata if "." in k})
        raise RepairError(f"{ckpt}: no '{optim_prefix}param_groups.*.params' entries; key prefixes here: {roots}")
    groups: dict[str, object] = dict.fromkeys(keys)
    dcp.load(groups, checkpoint_id=str(ckpt), no_dist=True)
    return [fqn for k in keys for fqn in groups[k]]


def _state_path(metadata, key: str, state_prefix: str) -> tuple:
    """``(path..., fqn, name)`` of one flattened optimizer-state key (DCP's own unflatten map)."""
    planner = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
    if key in planner:
        return tuple(planner[key])
    fqn, name = key[len(state_prefix) :].rsplit(".", 1)
    return (*state_prefix.rstrip(".").split("."), fqn, name)


def _missing_state(ckpt: Path, metadata, model_prefix: str, optim_prefix: str) -> tuple[dict, list[str]]:
    """Nested ``{path: {fqn: {name: zeros}}}`` for the parameters without state, and their names."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    md = metadata.state_dict_metadata
    state_prefix = f"{optim_prefix}state."
    by_param: dict[str, dict[str, TensorStorageMetadata]] = {}
    paths: dict[str, tuple] = {}
    for key, entry in md.items():
        if key.startswith(state_prefix) and isinstance(entry, TensorStorageMetadata):
            path = _state_path(metadata, key, state_prefix)
            by_param.setdefault(path[-2], {})[path[-1]] = entry
            paths[path[-2]] = path[:-2]
    if not by_param:
        raise RepairError(f"{ckpt}: no optimizer state under '{state_prefix}' to use as a template")
    ref_fqn, template = next(iter(by_param.items()))
    ref_param = md.get(model_prefix + ref_fqn)
    if ref_param is None:
        raise RepairError(f"{ckpt}: optimizer state for '{ref_fqn}' but no '{model_prefix}{ref_fqn}' in the model")

    missing = [fqn for fqn in _param_fqns(ckpt, metadata, optim_prefix) if fqn not in by_param]
    nested: dict = {}
    for fqn in missing:
        param = md.get(model_prefix + fqn)
        if not isinstance(param, TensorStorageMetadata):
            raise RepairError(f"{ckpt}: the optimizer lists '{fqn}' but '{model_prefix}{fqn}' is not a saved tensor")
        state: dict[str, torch.Tensor] = {}
        for name, entry in template.items():
            if entry.size == ref_param.size:
                shape = param.size
            elif len(entry.size) == 0:
                shape = torch.Size([])
            else:
                raise RepairError(
                    f"{ckpt}: state entry '{name}' of '{ref_fqn}' has shape {tuple(entry.size)}, neither the "
                    f"parameter's {tuple(ref_param.size)} nor a scalar; cannot synthesise it for '{fqn}'"
                )
            state[name] = torch.zeros(shape, dtype=entry.properties.dtype)
        node = nested
        for part in paths[ref_fqn]:
            node = node.setdefault(part, {})
        node[fqn] = state
    return nested, missing


def repair_optimizer_state(
    step_dir: str | os.PathLike[str],
    model_prefix: str = DEFAULT_MODEL_PREFIX,
    optimizer_prefix: str = DEFAULT_OPTIMIZER_PREFIX,
) -> RepairReport:
    """Add zero (never-stepped) optimizer state for every parameter that lacks it; see module docstring."""
    import torch.distributed.checkpoint as dcp

    ckpt = find_dcp_dir(step_dir)
    metadata = _read_metadata(ckpt)
    nested, missing = _missing_state(ckpt, metadata, model_prefix, optimizer_prefix)
    report = RepairReport(ckpt, params_repaired=missing)
    if not missing:
        return report

    staging = Path(tempfile.mkdtemp(prefix=".rlplugs-repair-", dir=ckpt))
    try:
        dcp.save(nested, checkpoint_id=str(staging), no_dist=True)
        added = _read_metadata(staging)
        n = sum(1 for p in ckpt.iterdir() if p.name.startswith(REPAIR_FILE_PREFIX))
        renames = {}
        for f in sorted(staging.glob("*.distcp")):
            renames[f.name] = f"{REPAIR_FILE_PREFIX}{n}{f.name}"
            os.replace(f, ckpt / renames[f.name])  # unreferenced until .metadata is swapped below
        metadata.state_dict_metadata.update(added.state_dict_metadata)
        metadata.storage_data.update(
            {idx: replace(info, relative_path=renames[info.relative_path]) for idx, info in added.storage_data.items()}
        )
        if isinstance(metadata.planner_data, dict) and isinstance(added.planner_data, dict):
            metadata.planner_data.update(added.planner_data)
        tmp = staging / METADATA_FILE
        with tmp.open("wb") as f:
            pickle.dump(metadata, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, ckpt / METADATA_FILE)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    report.keys_added = sorted(added.state_dict_metadata)
    report.file_written = ", ".join(renames.values())
    log.info("repaired %s: optimizer state added for %d parameters (%s)", ckpt, len(missing), report.file_written)
    return report

"""Rewrite a Hugging Face checkpoint's dtype: ``config.json`` labels and safetensors shards together.

Why: a run trained with fp32 master weights (TRL's default, prime-rl's text-only default) exports
``"dtype": "float32"`` in ``config.json`` (and in every sub-config: ``text_config``,
``vision_config``), sometimes next to bf16 shards. Anything that trusts the label
(``from_pretrained(dtype="auto")``, wrappers that copy it into ``--dtype``) then loads the model
at twice the memory. :func:`fix_dtype` makes label and tensors agree on one dtype.

Safety rules, because this edits the only copy of a trained model:

- **validate everything first**: every shard's header is parsed and checked against the file
  size, every index entry against the shard that should hold it; any problem raises
  :class:`CheckpointError` before a byte is written;
- **stage, then rename**: new shards, index and config are written to a staging folder inside the
  checkpoint, then each moved over its original with ``os.replace`` (atomic per file). The config
  goes last, so a crash between renames leaves shards already converted and the old label, and a
  re-run finishes the job;
- **idempotent**: files already in the target dtype are not rewritten.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: dtypes a checkpoint can be rewritten to, by their ``config.json`` spelling.
TARGET_DTYPES = ("bfloat16", "float16", "float32")
_SAFETENSORS_CODE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
#: Floating dtypes that get cast. 8-bit floats are quantized weights with their own scales: a
#: plain cast would destroy them, so they (like integer tensors) are left as they are.
_CASTABLE = {"F64", "F32", "F16", "BF16"}
_ITEM_SIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}  # fmt: skip
_DTYPE_KEYS = ("dtype", "torch_dtype")
INDEX_SUFFIX = ".safetensors.index.json"


class CheckpointError(ValueError):
    """The checkpoint is corrupt or inconsistent; nothing was changed."""


@dataclass
class DtypeFixReport:
    """What :func:`fix_dtype` changed (empty lists: the checkpoint already was in ``dtype``)."""

    directory: Path
    dtype: str
    shards_rewritten: list[str] = field(default_factory=list)
    config_keys_rewritten: list[str] = field(default_factory=list)
    tensors_cast: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.shards_rewritten or self.config_keys_rewritten)


@dataclass(frozen=True)
class ShardHeader:
    """The parsed JSON header of one safetensors file."""

    path: Path
    tensors: dict[str, dict[str, Any]]
    metadata: dict[str, str]

    @property
    def data_bytes(self) -> int:
        return sum(_nbytes(info) for info in self.tensors.values())


def _nbytes(info: dict[str, Any]) -> int:
    n = _ITEM_SIZE[info["dtype"]]
    for dim in info["shape"]:
        n *= dim
    return n


def read_shard_header(path: Path) -> ShardHeader:
    """Parse and check one safetensors header against the file: known dtypes, offsets that tile
    the data section exactly, sizes that match shapes. A truncated download fails here."""
    size = path.stat().st_size
    with path.open("rb") as f:
        raw_len = f.read(8)
        if len(raw_len) < 8:
            raise CheckpointError(f"{path}: not a safetensors file (only {size} bytes)")
        (header_len,) = struct.unpack("<Q", raw_len)
        if header_len > size - 8:
            raise CheckpointError(f"{path}: header claims {header_len} bytes but the file has {size}: truncated")
        try:
            header = json.loads(f.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{path}: unreadable safetensors header ({exc})") from exc
    metadata = header.pop("__metadata__", None) or {}
    data_len = size - 8 - header_len
    spans = []
    for name, info in header.items():
        code = info.get("dtype") if isinstance(info, dict) else None
        if code not in _ITEM_SIZE:
            raise CheckpointError(f"{path}: tensor '{name}' has unknown dtype {code!r}")
        try:
            begin, stop = info["data_offsets"]
            info["shape"] = [int(d) for d in info["shape"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{path}: tensor '{name}' has a malformed header entry ({exc!r})") from exc
        if stop - begin != _nbytes(info):
            raise CheckpointError(f"{path}: tensor '{name}' {info['shape']} {code} spans {stop - begin} bytes")
        spans.append((begin, stop, name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise CheckpointError(
                f"{path}: tensor '{name}' starts at byte {begin}, expected {end}: overlapping or gapped"
            )
        end = stop
    if end != data_len:
        what = "truncated" if end > data_len else "has trailing bytes"
        raise CheckpointError(f"{path}: tensors need {end} data bytes, file holds {data_len}: {what}")
    return ShardHeader(path, header, metadata)


def _shard_names(directory: Path) -> tuple[list[str], Path | None, dict[str, Any] | None]:
    """The shard files of a checkpoint, its index file and the parsed index (``None`` if unsharded)."""
    indexes = sorted(directory.glob(f"*{INDEX_SUFFIX}"))
    if len(indexes) > 1:
        raise CheckpointError(f"{directory}: several safetensors indexes {[p.name for p in indexes]}")
    if not indexes:
        shards = sorted(p.name for p in directory.glob("*.safetensors"))
        if not shards:
            raise CheckpointError(f"{directory}: no *.safetensors files (only safetensors checkpoints are supported)")
        return shards, None, None
    index_path = indexes[0]
    try:
        index = json.loads(index_path.read_text())
        weight_map: dict[str, str] = index["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{index_path}: not a safetensors index ({exc})") from exc
    return sorted(set(weight_map.values())), index_path, index


def validate_checkpoint(directory: Path) -> tuple[dict[str, ShardHeader], Path | None, dict[str, Any] | None]:
    """All shard headers, checked against the index; raises :class:`CheckpointError` on any mismatch."""
    names, index_path, index = _shard_names(directory)
    missing = [n for n in names if not (directory / n).is_file()]
    if missing:
        raise CheckpointError(f"{index_path}: names shard files that do not exist: {missing}")
    headers = {n: read_shard_header(directory / n) for n in names}
    if index is not None:
        for tensor, shard in index["weight_map"].items():
            if tensor not in headers[shard].tensors:
                raise CheckpointError(f"{index_path}: maps '{tensor}' to {shard}, which does not contain it")
        for shard, header in headers.items():
            stray = sorted(set(header.tensors) - set(index["weight_map"]))
            if stray:
                raise CheckpointError(f"{shard}: holds tensors the index does not list: {stray[:5]}")
    return headers, index_path, index


def _rewrite_config_dtypes(node: Any, dtype: str, path: str = "") -> list[str]:
    """Set every ``dtype``/``torch_dtype`` string at any nesting level; returns the keys changed."""
    changed: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else key
            if key in _DTYPE_KEYS and isinstance(value, str):
                if value != dtype:
                    node[key] = dtype
                    changed.append(where)
            else:
                changed += _rewrite_config_dtypes(value, dtype, where)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            changed += _rewrite_config_dtypes(item, dtype, f"{path}[{i}]")
    return changed


def _cast_shard(header: ShardHeader, dtype: str, out: Path) -> int:
    import torch
    from safetensors.torch import load_file, save_file

    target = getattr(torch, dtype)
    tensors = load_file(str(header.path))
    n = 0
    for name, info in header.tensors.items():
        if info["dtype"] in _CASTABLE and info["dtype"] != _SAFETENSORS_CODE[dtype]:
            tensors[name] = tensors[name].to(target)
            n += 1
    save_file(tensors, str(out), metadata=header.metadata or None)
    return n


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def fix_dtype(directory: str | os.PathLike[str], dtype: str = "bfloat16") -> DtypeFixReport:
    """Make ``directory``'s config labels and floating safetensors tensors all ``dtype``.

    Raises :class:`CheckpointError` (checkpoint untouched) on an unknown target dtype, a missing,
    truncated or unparsable shard, or an index that disagrees with the shards.
    """
    directory = Path(directory)
    if dtype not in TARGET_DTYPES:
        raise CheckpointError(f"unknown dtype {dtype!r}; choose one of {', '.join(TARGET_DTYPES)}")
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a directory")
    headers, index_path, index = validate_checkpoint(directory)
    config_path = directory / "config.json"
    config = None
    if config_path.exists():
        try:
            config = json.loads(config_path.read_text())
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{config_path}: not valid JSON ({exc})") from exc
        if not isinstance(config, dict):
            raise CheckpointError(f"{config_path}: a model config is a JSON object, this file holds a "
                                  f"{type(config).__name__}; restore the checkpoint's config.json")

    report = DtypeFixReport(directory, dtype)
    code = _SAFETENSORS_CODE[dtype]
    to_cast = [
        n for n, h in headers.items() if any(i["dtype"] in _CASTABLE and i["dtype"] != code for i in h.tensors.values())
    ]
    if config is not None:
        report.config_keys_rewritten = _rewrite_config_dtypes(config, dtype)
        if config.get("dtype") != dtype:  # transformers 5 reads the top-level "dtype"
            config["dtype"] = dtype
            report.config_keys_rewritten.append("dtype")
    if not to_cast and not report.config_keys_rewritten:
        return report

    staging = Path(tempfile.mkdtemp(prefix=".rlplugs-fix-dtype-", dir=directory))
    try:
        for name in to_cast:
            report.tensors_cast += _cast_shard(headers[name], dtype, staging / name)
            read_shard_header(staging / name)  # the staged copy must itself be sound
        if index is not None and to_cast:
            sizes = {
                n: read_shard_header(staging / n).data_bytes if n in to_cast else h.data_bytes
                for n, h in headers.items()
            }
            index.setdefault("metadata", {})["total_size"] = sum(sizes.values())
            _write_json(staging / index_path.name, index)
        if report.config_keys_rewritten:
            _write_json(staging / "config.json", config)
        for staged in staging.iterdir():  # keep the originals' permissions
            shutil.copymode(directory / staged.name, staged)
        for name in to_cast:
            os.replace(staging / name, directory / name)
            report.shards_rewritten.append(name)
        if index is not None and to_cast:
            os.replace(staging / index_path.name, index_path)
        if report.config_keys_rewritten:
            os.replace(staging / "config.json", config_path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info(
        "fix-dtype %s -> %s: %d tensors cast in %d shards; config keys %s",
        directory,
        dtype,
        report.tensors_cast,
        len(report.shards_rewritten),
        report.config_keys_rewritten,
    )
    return report

"""fix-dtype on a real sharded tiny Qwen3.5 (vision-language class, nested sub-configs)."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from rlplugs.builtins.checkpoint.dtype import CheckpointError, fix_dtype
from rlplugs.registry import get_registry


@pytest.fixture(scope="module")
def fp32_vl_checkpoint(tmp_path_factory, tiny_qwen35_vl) -> Path:
    """The tiny VL Qwen3.5 loaded in float32 and saved in two shards, as an fp32-master-weights run
    exports it: every config level says ``"dtype": "float32"``."""
    from transformers import AutoModelForImageTextToText

    out = tmp_path_factory.mktemp("fp32") / "ckpt"
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen35_vl, dtype=torch.float32)
    model.save_pretrained(out, max_shard_size="20MB")
    return out


@pytest.fixture
def ckpt(fp32_vl_checkpoint, tmp_path) -> Path:
    return Path(shutil.copytree(fp32_vl_checkpoint, tmp_path / "ckpt"))


def _dtype_labels(node, path="") -> dict[str, str]:
    found = {}
    if isinstance(node, dict):
        for k, v in node.items():
            where = f"{path}.{k}" if path else k
            if k in ("dtype", "torch_dtype") and isinstance(v, str):
                found[where] = v
            else:
                found.update(_dtype_labels(v, where))
    return found


def _snapshot(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_fp32_export_loads_as_bf16_with_half_the_parameter_memory(ckpt):
    from transformers import AutoModelForImageTextToText

    labels = _dtype_labels(json.loads((ckpt / "config.json").read_text()))
    assert {"dtype", "text_config.dtype", "vision_config.dtype"} <= set(labels)
    assert set(labels.values()) == {"float32"}
    before = AutoModelForImageTextToText.from_pretrained(ckpt, dtype="auto")
    assert before.dtype == torch.float32

    report = fix_dtype(ckpt, "bfloat16")

    assert sorted(report.shards_rewritten) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    labels = _dtype_labels(json.loads((ckpt / "config.json").read_text()))
    assert set(labels.values()) == {"bfloat16"} and "vision_config.dtype" in labels
    after = AutoModelForImageTextToText.from_pretrained(ckpt, dtype="auto")
    assert {p.dtype for p in after.parameters()} == {torch.bfloat16}
    assert _param_bytes(after) * 2 == _param_bytes(before)
    for (name, p32), (_, p16) in zip(before.state_dict().items(), after.state_dict().items(), strict=True):
        assert torch.equal(p32.to(torch.bfloat16), p16), name
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    shard_bytes = sum((ckpt / s).stat().st_size for s in set(index["weight_map"].values()))
    assert index["metadata"]["total_size"] < shard_bytes  # data bytes only, headers excluded
    assert index["metadata"]["total_size"] * 2 >= shard_bytes
    assert not [p for p in ckpt.iterdir() if p.name.startswith(".rlplugs")]


def test_second_fix_changes_no_byte(ckpt):
    fix_dtype(ckpt, "bfloat16")
    snap = _snapshot(ckpt)
    mtimes = {p.name: p.stat().st_mtime_ns for p in ckpt.iterdir()}
    report = fix_dtype(ckpt, "bfloat16")
    assert not report.changed
    assert _snapshot(ckpt) == snap
    assert {p.name: p.stat().st_mtime_ns for p in ckpt.iterdir()} == mtimes


def test_bf16_shards_under_a_float32_label_only_get_the_label_fixed(ckpt):
    """prime-rl <= 0.8 writes bf16 shards next to an fp32 config; only the labels are wrong."""
    fix_dtype(ckpt, "bfloat16")
    config = json.loads((ckpt / "config.json").read_text())
    config["dtype"] = config["text_config"]["dtype"] = config["vision_config"]["dtype"] = "float32"
    (ckpt / "config.json").write_text(json.dumps(config))
    shards = {p.name: p.read_bytes() for p in ckpt.glob("*.safetensors")}
    report = fix_dtype(ckpt, "bfloat16")
    assert report.shards_rewritten == [] and sorted(report.config_keys_rewritten) == [
        "dtype",
        "text_config.dtype",
        "vision_config.dtype",
    ]
    assert {p.name: p.read_bytes() for p in ckpt.glob("*.safetensors")} == shards


def _truncate_last_shard(ckpt: Path) -> str:
    shard = ckpt / "model-00002-of-00002.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 1000])
    return "truncated"


def _index_points_at_wrong_shard(ckpt: Path) -> str:
    path = ckpt / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    name, shard = next(iter(index["weight_map"].items()))
    index["weight_map"][name] = next(s for s in index["weight_map"].values() if s != shard)
    path.write_text(json.dumps(index))
    return "does not contain it"


def _index_names_missing_shard(ckpt: Path) -> str:
    path = ckpt / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    index["weight_map"][next(iter(index["weight_map"]))] = "model-00003-of-00002.safetensors"
    path.write_text(json.dumps(index))
    return "do not exist"


def _shard_with_unknown_dtype(ckpt: Path) -> str:
    shard = ckpt / "model-00002-of-00002.safetensors"
    data = shard.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    first = next(k for k in header if k != "__metadata__")
    header[first]["dtype"] = "F12"
    raw = json.dumps(header, separators=(",", ":")).encode()
    assert len(raw) <= n  # fits the original header slot: only the dtype is wrong
    raw = raw.ljust(n)
    shard.write_bytes(data[:8] + raw + data[8 + n :])
    return "unknown dtype 'F12'"


def _config_not_json(ckpt: Path) -> str:
    (ckpt / "config.json").write_text('{"dtype": "float32",')
    return "config.json: not valid JSON"


@pytest.mark.parametrize(
    "corrupt",
    [
        _truncate_last_shard,
        _index_points_at_wrong_shard,
        _index_names_missing_shard,
        _shard_with_unknown_dtype,
        _config_not_json,
    ],
)
def test_corrupt_checkpoint_is_refused_and_left_byte_identical(ckpt, corrupt):
    """The first shard is valid and fp32: a fixer that converted shard by shard would have
    rewritten it before meeting the corruption."""
    expected = corrupt(ckpt)
    snap = _snapshot(ckpt)
    with pytest.raises(CheckpointError, match=expected):
        fix_dtype(ckpt, "bfloat16")
    assert _snapshot(ckpt) == snap


def test_unknown_target_dtype_is_refused(ckpt):
    snap = _snapshot(ckpt)
    with pytest.raises(CheckpointError, match="unknown dtype 'float8'.*bfloat16, float16, float32"):
        fix_dtype(ckpt, "float8")
    assert _snapshot(ckpt) == snap


def test_adapter_folder_without_config_is_cast_and_integer_tensors_kept(tmp_path):
    """A PEFT adapter folder has shards but no config.json; non-float tensors must survive as they are."""
    from safetensors.torch import load_file, save_file

    a = torch.randn(4, 64)
    save_file(
        {"base_model.model.lora_A.weight": a, "step": torch.tensor([7])}, str(tmp_path / "adapter_model.safetensors")
    )
    report = fix_dtype(tmp_path, "bfloat16")
    assert report.tensors_cast == 1 and report.config_keys_rewritten == []
    loaded = load_file(str(tmp_path / "adapter_model.safetensors"))
    assert torch.equal(loaded["base_model.model.lora_A.weight"], a.to(torch.bfloat16))
    assert loaded["step"].dtype == torch.int64 and loaded["step"].item() == 7


def _ckpt_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlplugs")
    get_registry().add_cli_commands(parser.add_subparsers(dest="command"))
    return parser


def test_cli_fix_dtype_converts_then_refuses_unknown_dtype(ckpt, capsys):
    parser = _ckpt_parser()
    args = parser.parse_args(["ckpt", "fix-dtype", str(ckpt), "--dtype", "bfloat16"])
    assert args.func(args) == 0
    assert "cast to bfloat16 in 2 shard(s)" in capsys.readouterr().out
    args = parser.parse_args(["ckpt", "fix-dtype", str(ckpt)])
    assert args.func(args) == 0
    assert "already bfloat16" in capsys.readouterr().out
    args = parser.parse_args(["ckpt", "fix-dtype", str(ckpt), "--dtype", "fp8"])
    assert args.func(args) == 2
    assert "unknown dtype 'fp8'" in capsys.readouterr().err

"""repair-optimizer on a real torch DCP checkpoint (gloo, world size 1) of the tiny Qwen3.5 VL
trained on text only, saved the way prime-rl saves it (``AppState`` over ``get_state_dict``)."""

from __future__ import annotations

import argparse
import hashlib
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from rlplugs.builtins.checkpoint.dcp_repair import RepairError, repair_optimizer_state
from rlplugs.registry import get_registry
from rlplugs.testing.tiny_models import TINY_TEXT_CONFIG, TINY_VISION_CONFIG


class AppState(Stateful):
    """prime-rl's checkpoint wrapper, reduced to model + optimizers."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def state_dict(self):
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optimizers": optim_sd}

    def load_state_dict(self, state_dict):
        set_state_dict(
            self.model, self.optimizer, model_state_dict=state_dict["model"], optim_state_dict=state_dict["optimizers"]
        )


@pytest.fixture(scope="module")
def gloo(tmp_path_factory):
    store = dist.FileStore(str(tmp_path_factory.mktemp("gloo") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _fresh():
    """The tiny Qwen3.5 vision-language model with a 1,024-token vocabulary: the real architecture
    (vision tower included) at a checkpoint size that keeps the test fast; seeded, so every call
    builds the same weights."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(0)
    text = {**TINY_TEXT_CONFIG, "vocab_size": 1024, "eos_token_id": 1, "pad_token_id": 0}
    model = Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text, vision_config=TINY_VISION_CONFIG))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


@pytest.fixture(scope="module")
def text_only_step(gloo, tmp_path_factory):
    """Two AdamW steps on text: the vision tower never gets a gradient, so it has no state."""
    model, optim = _fresh()
    ids = torch.randint(0, 1000, (2, 12))
    for _ in range(2):
        model(input_ids=ids, labels=ids).loss.backward()
        optim.step()
        optim.zero_grad()
    stateless = [n for n, p in model.named_parameters() if p not in optim.state]
    assert stateless and all(".visual." in n for n in stateless)
    step_dir = tmp_path_factory.mktemp("run") / "checkpoints" / "step_2"
    dcp.save({"app": AppState(model, optim)}, checkpoint_id=str(step_dir / "trainer"))
    names = {p: n for n, p in model.named_parameters()}
    saved = {names[p]: {k: v.clone() for k, v in s.items()} for p, s in optim.state.items()}
    return step_dir, saved, stateless


@pytest.fixture
def step_dir(text_only_step, tmp_path) -> Path:
    """A private copy of the unrepaired checkpoint."""
    return Path(shutil.copytree(text_only_step[0], tmp_path / "step_2"))


def _sha(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.glob("*.distcp")}


def test_strict_load_fails_before_repair_and_succeeds_after_with_trained_state_bit_identical(text_only_step, step_dir):
    _, saved, stateless = text_only_step
    trainer_dir = step_dir / "trainer"
    before = _sha(trainer_dir)

    model, optim = _fresh()
    with pytest.raises(
        CheckpointException, match=r"Missing key in checkpoint state_dict: app\.optimizers\.state\.model\.visual\."
    ):
        dcp.load({"app": AppState(model, optim)}, checkpoint_id=str(trainer_dir))

    report = repair_optimizer_state(step_dir)
    assert sorted(report.params_repaired) == sorted(stateless)
    assert _sha(trainer_dir).items() >= before.items()  # original shard files untouched, one file added
    assert len(_sha(trainer_dir)) == len(before) + 1

    model, optim = _fresh()
    dcp.load({"app": AppState(model, optim)}, checkpoint_id=str(trainer_dir))
    by_name = {n: optim.state[p] for n, p in model.named_parameters()}
    for name, state in saved.items():
        for key, value in state.items():
            assert torch.equal(by_name[name][key], value), (name, key)
    for name in stateless:
        assert float(by_name[name]["step"]) == 0.0
        assert not by_name[name]["exp_avg"].any() and not by_name[name]["exp_avg_sq"].any()

    assert repair_optimizer_state(step_dir).params_repaired == []  # idempotent


def test_repaired_state_steps_like_a_fresh_optimizer(text_only_step, step_dir):
    """A never-stepped parameter that finally gets a gradient moves exactly as under a new AdamW."""
    stateless = text_only_step[2]
    repair_optimizer_state(step_dir)
    model, optim = _fresh()
    dcp.load({"app": AppState(model, optim)}, checkpoint_id=str(step_dir / "trainer"))
    name = stateless[0]
    param = dict(model.named_parameters())[name]
    reference = torch.nn.Parameter(param.detach().clone())
    ref_optim = torch.optim.AdamW([reference], lr=1e-3)
    grad = torch.randn_like(param)
    param.grad, reference.grad = grad.clone(), grad.clone()
    optim.step()
    ref_optim.step()
    assert torch.equal(param.detach(), reference.detach())


def test_repair_refuses_a_folder_without_dcp_metadata(tmp_path):
    (tmp_path / "step_3").mkdir()
    with pytest.raises(RepairError, match="no DCP checkpoint"):
        repair_optimizer_state(tmp_path / "step_3")


def test_cli_repair_optimizer_reports_the_repaired_parameters(step_dir, capsys):
    parser = argparse.ArgumentParser(prog="rlplugs")
    get_registry().add_cli_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["ckpt", "repair-optimizer", str(step_dir)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "added never-stepped optimizer state" in out and "model.visual.patch_embed.proj.weight" in out
    assert args.func(args) == 0
    assert "nothing to do" in capsys.readouterr().out

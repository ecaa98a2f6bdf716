"""The checkpoint-fixups plugin as the registry, the TRL adapter and the CLI see it."""

from __future__ import annotations

import argparse

import pytest

from rlplugs.registry import UnknownOptionError, get_registry

CALLBACK_FIXUPS = [
    "bf16-noop-guard", "entropy-guard", "fix-dtype", "fresh-optimizer-resume", "no-spread-stop", "segments", "truncation-monitor",
]  # fmt: skip


def test_every_fixup_is_registered_by_the_checkpoint_plugin():
    table = get_registry().table("checkpoint_fixup")
    names = [*CALLBACK_FIXUPS, "repair-optimizer"]
    assert {n: table[n].plugin for n in names} == dict.fromkeys(names, "checkpoint-fixups")


@pytest.mark.parametrize("name", CALLBACK_FIXUPS)
def test_trl_adapter_call_returns_a_trainer_callback(name, tmp_path):
    from transformers import TrainerCallback, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    fixup = get_registry().get("checkpoint_fixup", name).build()
    assert fixup.summary
    assert isinstance(fixup.trainer_callback(args, None), TrainerCallback)


def test_disk_only_fixup_says_which_command_to_run_instead_of_a_callback():
    fixup = get_registry().get("checkpoint_fixup", "repair-optimizer").build()
    with pytest.raises(TypeError, match="rlplugs ckpt repair-optimizer STEP_DIR"):
        fixup.trainer_callback(None)


def test_misspelled_option_is_refused_with_a_suggestion():
    with pytest.raises(UnknownOptionError, match="'check_step' \\(did you mean 'check_steps'\\?\\)"):
        get_registry().get("checkpoint_fixup", "bf16-noop-guard").build({"check_step": 2})
    with pytest.raises(ValueError, match="dtype"):
        get_registry().get("checkpoint_fixup", "fix-dtype").build({"dtype": "float8"})


def test_strip_optimizer_cli_refuses_a_folder_that_is_not_a_checkpoint(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="rlplugs")
    get_registry().add_cli_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["ckpt", "strip-optimizer", str(tmp_path)])
    assert args.func(args) == 2
    assert "no trainer_state.json" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []

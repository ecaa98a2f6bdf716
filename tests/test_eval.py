"""Generic evaluation (``rlplugs eval`` / :func:`rlplugs.tools.evaluation.evaluate`) on the test envs."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest

from rlplugs.tools.evaluation import evaluate, evaluate_to_dir, protocol_overrides
from rlplugs.registry import make_env
from test_cli import RLPLUGS

PNG = b"\x89PNG\r\n\x1a\n"


def test_single_turn_reference_policy_scores_every_sample_with_each_component():
    spec = make_env("letters-test")
    result = evaluate(spec, "validation", spec.reference_policy)
    assert result["counts"] == {"rows": 4, "samples": 8, "samples_per_row": 2, "unscored_samples": 0}
    assert result["components"] == {"letters": 1.0, "brevity": pytest.approx(1 - 3 / 200)}
    assert result["success_rate"] == 1.0  # success_component = letters
    assert [r["group"] for r in result["samples"]] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_multi_turn_reference_policy_plays_whole_episodes():
    spec = make_env("count-test", {"turns": 3})
    result = evaluate(spec, "validation", spec.reference_policy)
    assert result["counts"]["samples"] == 8
    assert result["components"] == {"digits": 1.0, "final_len": 1.0}
    replies = [m for m in result["samples"][0]["episode"]["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in replies] == ["7", "7", "7"]


def test_dead_component_is_reported_unscored_with_reason_not_averaged_as_zero():
    spec = make_env("letters-test", {"dead_component": True})
    result = evaluate(spec, "validation", spec.reference_policy)
    assert result["components"]["never"] is None
    assert result["unscored"]["never"]["count"] == 8
    assert "switched off" in next(iter(result["unscored"]["never"]["reasons"]))
    assert result["weighted_reward"] == pytest.approx(1.0 + 0.5 * (1 - 3 / 200))  # the dead one is left out


def test_episode_that_never_ends_is_unscored_with_its_reason():
    spec = make_env("count-test", {"turns": 5})
    result = evaluate(spec, "validation", spec.reference_policy, max_turns=2)
    assert result["components"]["digits"] is None
    assert result["counts"]["unscored_samples"] == 8
    assert "did not end within 2 turns" in next(iter(result["unscored"]["digits"]["reasons"]))


def test_the_lockstep_runner_stops_a_guarded_episode_at_its_cap_and_raises_for_a_bare_one():
    """One runner (rlplugs.play_lockstep) plays evaluation, PRM labels, guidance and ``play``: at
    the turn cap a guarded episode is stopped with the reason (unscored later), a bare one raises."""
    from rlplugs import as_batch_policy, guard, play, play_lockstep, stop_reason

    spec = make_env("count-test", {"turns": 5})
    row = spec.dataset("validation")[0]
    finished, capped = guard(spec.episodes(row)), guard(spec.episodes(row))
    ended = []
    play_lockstep([finished], as_batch_policy(spec.reference_policy), max_turns=5, on_done=ended.append)
    play_lockstep([capped], as_batch_policy(spec.reference_policy), max_turns=2, on_done=ended.append)
    assert ended == [finished, capped] and stop_reason(finished) is None
    assert stop_reason(capped) == "episode did not end within 2 turns"
    with pytest.raises(RuntimeError, match="did not end within 2 turns"):
        play(spec.episodes(row), spec.reference_policy, max_turns=2)
    assert play(spec.episodes(row), spec.reference_policy, max_turns=5).done


@pytest.mark.parametrize("fault, reason", [
    ("fail_starts", "episode stopped by an error: RuntimeError: judge crashed (simulated fault)"),
    ("broken_starts", "episode could not start: ValueError: no episode for start 101 (simulated fault)"),
])  # fmt: skip
def test_episode_stopped_by_an_error_is_unscored_in_every_component_with_its_reason(fault, reason):
    spec = make_env("count-test", {fault: [101]})  # validation rows start at 100
    result = evaluate(spec, "validation", spec.reference_policy)
    assert result["counts"]["unscored_samples"] == 2  # the faulty row's two samples, nothing else
    assert result["components"] == {"digits": 1.0, "final_len": 1.0}  # means over the scored ones
    faulty = [r for r in result["samples"] if r["group"] == 1]
    for record in faulty:
        assert record["scores"] == {"digits": None, "final_len": None}
        assert record["unscored_reasons"] == {"digits": reason, "final_len": reason}
        assert record["episode"]["stopped"] == reason


def test_a_batch_scorer_never_scores_a_stopped_episode_and_a_failing_one_leaves_its_components_unscored():
    """Components sharing one batch function (``RewardComponent.from_batch``) are computed by one
    call per batch that would score anything "as it stands" (0.0): it is never handed a stopped
    episode. When it raises, its components are unscored with the reason; the others still count."""
    from rlplugs import RewardComponent, Score

    seen: list[int] = []

    async def as_it_stands(samples):
        seen.append(len(samples))
        return [{"digits": Score(0.0), "final_len": 1.0} for _ in samples]

    async def broken(samples):
        raise RuntimeError("scorer down")

    spec = make_env("count-test", {"fail_starts": [101]})
    batch = RewardComponent.from_batch(as_it_stands, [("digits", 1.0, ""), ("final_len", 0.2, "")])
    result = evaluate(dataclasses.replace(spec, components=batch), "validation", spec.reference_policy)
    assert seen == [6]  # one call: 4 rows x 2 samples, less the faulty row's two
    faulty = [r for r in result["samples"] if r["group"] == 1]
    assert all(r["scores"] == {"digits": None, "final_len": None} for r in faulty)
    assert result["components"] == {"digits": 0.0, "final_len": 1.0}
    mixed = [*RewardComponent.from_batch(broken, [("digits", 1.0, "")]), spec.components[1]]
    result = evaluate(dataclasses.replace(spec, components=mixed), "validation", spec.reference_policy)
    assert result["components"] == {"digits": None, "final_len": 1.0}
    assert {r["unscored_reasons"]["digits"] for r in result["samples"] if r["group"] != 1} == {"RuntimeError: scorer down"}


def test_guidance_plays_each_episode():
    class FirstOfTwo:  # the simplest real guidance: sample two replies, keep the first
        def play(self, episode, policy):
            while not episode.done:
                episode.step(policy.generate([episode.observation()], n=2)[0][0])
            return episode

    spec = make_env("count-test")
    result = evaluate(spec, "validation", spec.reference_policy, guidance=FirstOfTwo())
    assert result["components"]["digits"] == 1.0
    with pytest.raises(ValueError, match="single-turn"):
        evaluate(make_env("letters-test"), "validation", lambda m: "x", guidance=FirstOfTwo())


def test_report_files_breakdown_pictures_and_env_renders(tmp_path):
    rendered = []

    def render(sample, out_dir):
        path = out_dir / f"sample_{len(rendered)}.txt"
        path.write_text(sample.completion)
        rendered.append(path)
        return [path]

    spec = dataclasses.replace(make_env("letters-test"), render=render)
    protocol = protocol_overrides(spec.eval, report_by=("row_id",), rows=3, samples_per_row=None)
    report, out = evaluate_to_dir(spec, ["validation"], spec.reference_policy, tmp_path, protocol=protocol, policy_name="reference", render=2)
    saved = json.loads((out / "report.json").read_text())
    assert saved["policy"] == "reference" and saved["protocol"]["rows"] == 3
    split = saved["splits"]["validation"]
    assert set(split["by"]["row_id"]) == {"100", "101", "102"}
    assert split["by"]["row_id"]["101"]["samples"] == 2
    assert len(split["renders"]) == 2 and not split["render_errors"]
    for picture in split["pictures"]:
        assert (out / picture).read_bytes()[:8] == PNG
    assert {"components_validation.png", "success_by_row_id_validation.png"} <= set(split["pictures"])
    assert "| letters | 1.000 | 0 |" in (out / "report.md").read_text()
    assert len((out / "samples.jsonl").read_text().splitlines()) == 6


def test_report_links_resolve_from_report_md_with_a_relative_out_and_samples_of_one_row_keep_their_renders(
    tmp_path, monkeypatch
):
    """``rlplugs eval --out runs/eval`` from elsewhere: every link in report.md must resolve from
    report.md's own folder, and an env naming its pictures after the row (as factorio-build and
    matrl do) must not have a row's samples overwrite each other's."""

    def render(sample, out_dir):
        path = out_dir / f"row_{sample.row['row_id']}.txt"
        path.write_text(sample.completion)
        return [path]

    monkeypatch.chdir(tmp_path)
    spec = dataclasses.replace(make_env("letters-test"), render=render)
    protocol = protocol_overrides(spec.eval, rows=1, samples_per_row=3)
    policy = iter(["first", "second", "third"]).__next__
    evaluate_to_dir(spec, ["validation"], lambda messages: policy(), "runs/eval", protocol=protocol, render=3)
    report_md = tmp_path / "runs" / "eval" / "report.md"
    links = re.findall(r"\]\(([^)]+)\)", report_md.read_text())
    renders = [link for link in links if link.endswith(".txt")]
    assert len(renders) == 3 and all(not link.startswith("runs/") for link in links)
    assert sorted((report_md.parent / link).read_text() for link in renders) == ["first", "second", "third"]
    assert all((report_md.parent / link).exists() for link in links)


def test_failing_render_is_noted_not_fatal(tmp_path):
    def render(sample, out_dir):
        raise RuntimeError("no display")

    spec = dataclasses.replace(make_env("letters-test"), render=render)
    report, _ = evaluate_to_dir(spec, ["validation"], spec.reference_policy, tmp_path, render=1)
    assert report["splits"]["validation"]["render_errors"] == ["sample 0: RuntimeError: no display"]


@pytest.mark.parametrize("env", ["letters-test", "count-test"])
def test_cli_eval_with_tiny_qwen35(env, tiny_qwen35, tmp_path, plugin_env):
    name = ["--name", "tiny Qwen3.5, step 0"] if env == "count-test" else []  # else the report names it by path
    out = subprocess.run(
        [RLPLUGS, "eval", "--env", env, "--split", "validation", "--model", str(tiny_qwen35), "--rows", "2",
         "--samples", "2", "--max_new_tokens", "6", "--temperature", "1.0", "--out", str(tmp_path), *name],
        env=plugin_env, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["policy"] == (name[1] if name else str(tiny_qwen35))
    split = report["splits"]["validation"]
    assert split["counts"]["samples"] == 4 and split["counts"]["unscored_samples"] == 0
    assert 0.0 <= split["success_rate"] <= 1.0
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert all(s["completion"] != "abc" and s["completion"] != "7" for s in samples)  # the model answered, not the reference
    if env == "letters-test":  # single-turn: the random model never stops within 6 tokens, and the report says so
        assert [(s["tokens"], s["at_cap"]) for s in samples] == [(6, True)] * 4
        assert split["completions"] == {"samples": 4, "mean_tokens": 6.0, "max_tokens": 6, "at_cap": 4, "at_cap_share": 1.0}
        assert "**4 of 4 (100%) cut off at max_new_tokens**" in (tmp_path / "report.md").read_text()
    else:  # multi-turn: a cap cuts turns, not samples; no completion summary
        assert "completions" not in split


def test_cli_eval_compiled_decoding_gives_plain_generates_replies_and_says_how_it_decoded(tiny_qwen35, tmp_path, plugin_env):
    def cli_eval(out: Path, *flags: str) -> tuple[dict, list[str]]:
        done = subprocess.run(
            [RLPLUGS, "eval", "--env", "letters-test", "--split", "validation", "--model", str(tiny_qwen35), "--rows", "2",
             "--samples", "1", "--max_new_tokens", "6", "--temperature", "0", "--out", str(out), *flags],
            env=plugin_env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        lines = (out / "samples.jsonl").read_text().splitlines()
        return json.loads((out / "report.json").read_text()), [json.loads(line)["completion"] for line in lines]

    plain_report, plain = cli_eval(tmp_path / "plain")
    compiled_report, compiled = cli_eval(tmp_path / "compiled", "--compile_generation", "--dtype", "float32")
    assert compiled == plain and len(plain) == 2
    assert plain_report["decoding"]["compiled"] is False and plain_report["decoding"]["attention"] != "rlplugs_packed_gqa"
    assert compiled_report["decoding"] == {"dtype": "float32", "compiled": True, "attention": "rlplugs_packed_gqa"}
    assert "- decoding: float32 weights, compiled decoding (static cache), attention `rlplugs_packed_gqa`" in (
        tmp_path / "compiled" / "report.md").read_text()  # fmt: skip
    refused = subprocess.run(
        [RLPLUGS, "eval", "--env", "letters-test", "--policy", "reference", "--dtype", "bfloat16", "--out", str(tmp_path / "ref")],
        env=plugin_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2 and "the reference policy is no model" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.parametrize(
    "env, message",
    [("count-test", "unknown guidance 'best-of-nine'"), ("letters-test", "env 'letters-test' is single-turn")],
)
def test_cli_eval_guidance_misuse_is_a_usage_error(env, message, plugin_env, tmp_path):
    out = subprocess.run(
        [RLPLUGS, "eval", "--env", env, "--policy", "reference", "--guidance", "best-of-nine", "--out", str(tmp_path)],
        env=plugin_env, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_evaluate_result_is_json_ready():
    spec = make_env("count-test")
    result = evaluate(spec, "validation", spec.reference_policy)
    assert json.loads(json.dumps(result))["counts"]["samples"] == 8

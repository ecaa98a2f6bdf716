"""The literal ``trl grpo --env NAME`` through TRL's real console script (subprocesses, offline CPU).

rlplugs' startup hook (``rlplugs_trl_hook.pth``, installed with the package) extends TRL's CLI in
the ``trl`` process only; these tests run the installed ``trl`` executable exactly as a user would.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

TRL = str(Path(sys.executable).with_name("trl"))
TINY_RUN = [
    "--use_cpu", "--bf16", "false", "--num_generations", "4", "--per_device_train_batch_size", "4",
    "--max_completion_length", "16", "--report_to", "none", "--logging_steps", "1",
    "--gradient_checkpointing", "false",
]  # fmt: skip


def trl(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([TRL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def log_history(output_dir: Path) -> list[dict]:
    checkpoint = max(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]


def test_trl_grpo_env_with_lora_trains_logs_each_component_and_writes_a_checkpoint(tmp_path, tiny_qwen35, plugin_env):
    """Stock TRL flags (LoRA on the Qwen3.5 targets, accelerate's --num_processes) pass through."""
    from rlplugs.qwen35 import QWEN35_LORA_TARGETS

    out = tmp_path / "out"
    proc = trl(
        "grpo", "--env", "letters-test", "--model_name_or_path", str(tiny_qwen35), "--max_steps", "2",
        "--extra_rewards", "length-penalty:0.1", "--num_processes", "1", "--output_dir", str(out),
        "--use_peft", "--lora_r", "8", "--lora_target_modules", *QWEN35_LORA_TARGETS, *TINY_RUN,
        env=plugin_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    adapter = json.loads((out / "checkpoint-2" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == sorted(QWEN35_LORA_TARGETS)
    assert (out / "checkpoint-2" / "adapter_model.safetensors").exists()
    steps = [h for h in log_history(out) if "loss" in h]
    assert len(steps) == 2
    for h in steps:
        for name in ("letters", "brevity", "length-penalty"):  # env components plus the extra one
            assert h[f"rewards/{name}/mean"] is not None
            assert h[f"unscored/{name}"] == 0.0
        assert 0.0 < h["rewards/letters/mean"] < 1.0  # real scores of the model's text, not a constant
    assert "preflight of env 'letters-test'" in proc.stderr


@pytest.mark.parametrize("nucleus", [[], *(["--top_p", "0.9", "--off_policy_mask_threshold", threshold, "--fixups", "segments",
                                             "entropy-guard"] for threshold in ("0.5", "0.02"))],
                         ids=["temperature", "top_p", "top_p-mask-negative"])  # fmt: skip
def test_trl_grpo_sampling_logprobs_logs_the_gap_of_plain_generate(tmp_path, tiny_qwen35, plugin_env, nucleus):
    """A single-turn env through TRL's own generation path: one generation batch of 8 serves two
    updates, so TRL computes the trainer's old log-probabilities and the gap is logged; plain
    fp32 ``generate`` is the trainer's own forward, so the gap is float noise. With top_p it is
    the log of the mass the nucleus cut, and TRL's off-policy mask and the entropy guard run on it
    (the nucleus phase benchmarks/README.md plans). Every token's gap is below -log 0.9 = 0.105, so a
    threshold of 0.5 drops nothing. The random model's nucleus cuts mass at each token, so every
    rollout's mean gap is about 0.105: a threshold of 0.02 drops every negative-advantage rollout,
    as would 2 and 4 times it (0.04, 0.08), and 8 times it (0.16) would drop none. The logged
    shares say so."""
    out = tmp_path / "out"
    proc = trl(
        "grpo", "--env", "letters-test", "--model_name_or_path", str(tiny_qwen35), "--max_steps", "2",
        "--sampling_logprobs", "true", "--generation_batch_size", "8", "--temperature", "0.7",
        "--output_dir", str(out), *TINY_RUN, *nucleus, env=plugin_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    (logged,) = [h for h in log_history(out) if "sampling/logp_gap/mean" in h]
    assert logged["step"] == 1 and 0 <= logged["sampling/logp_gap/mean"] <= logged["sampling/logp_gap/max"]
    assert logged["sampling/logp_gap/max"] < 1e-4 if not nucleus else logged["sampling/logp_gap/mean"] > 0.01
    updates = [h for h in log_history(out) if "loss" in h]
    shares = ("dropped_frac", "dropped_of_negative", *(f"dropped_of_negative_at_{times}x" for times in (2, 4, 8)))
    masked = [tuple(h.get(f"off_policy_mask/{share}") for share in shares) for h in updates]
    if not nucleus:
        assert masked == [(None,) * 5] * 2  # no threshold, no mask
    elif nucleus[3] == "0.5":
        assert masked == [(0.0,) * 5] * 2
    else:
        assert all(0 < frac < 1 and rest == [1.0, 1.0, 1.0, 0.0] for frac, *rest in masked), masked


def test_trl_grpo_keep_sampling_mask_trains_the_policy_the_sampler_drew_from(tmp_path, tiny_qwen35, plugin_env):
    """The run above at top_p 0.9 (and top_k 20) with ``--keep_sampling_mask``: the trainer scores
    each token over the set the sampler kept, so its old log-probabilities are the sampler's up to
    float noise (without it the gap is the log of the cut mass, over 0.01), and the mask at 0.02,
    which there dropped every negative rollout, drops none."""
    out = tmp_path / "out"
    proc = trl(
        "grpo", "--env", "letters-test", "--model_name_or_path", str(tiny_qwen35), "--max_steps", "2",
        "--sampling_logprobs", "true", "--keep_sampling_mask", "true", "--generation_batch_size", "8",
        "--temperature", "0.7", "--top_p", "0.9", "--top_k", "20", "--off_policy_mask_threshold", "0.02",
        "--output_dir", str(out), *TINY_RUN, env=plugin_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    (logged,) = [h for h in log_history(out) if "sampling/logp_gap/mean" in h]
    assert 0 <= logged["sampling/logp_gap/mean"] <= logged["sampling/logp_gap/max"] < 1e-4
    updates = [h for h in log_history(out) if "loss" in h]
    assert len(updates) == 2 and all(math.isfinite(h["loss"]) and math.isfinite(h["grad_norm"]) for h in updates)
    assert [h["off_policy_mask/dropped_frac"] for h in updates] == [0.0, 0.0]


def test_a_run_the_entropy_guard_stops_keeps_its_step_log_and_why(tmp_path, tiny_qwen35, plugin_env):
    """``trl grpo --fixups segments entropy-guard`` stopped between checkpoints (none is saved): the
    output folder still holds the trainer state with every logged step and the guard's reason, and
    the segment ends with it. The guard watches the rate of a 4-step warm-up, which rises
    deterministically (a random model's entropy does not)."""
    out = tmp_path / "out"
    proc = trl(
        "grpo", "--env", "letters-test", "--model_name_or_path", str(tiny_qwen35), "--max_steps", "6",
        "--warmup_steps", "4", "--save_strategy", "no", "--output_dir", str(out), "--fixups", "segments",
        "entropy-guard", "--fixup_args", '{"entropy-guard": {"metric": "learning_rate", "baseline_steps": 2}}',
        *TINY_RUN, env=plugin_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not list(out.glob("checkpoint-*"))
    state = json.loads((out / "trainer_state.json").read_text())
    rates = [h["learning_rate"] for h in state["log_history"] if "learning_rate" in h]
    assert state["global_step"] == len(rates) < 6 and rates[-1] > 1.6 * (rates[0] + rates[1]) / 2
    (stop,) = [h["rlplugs/stop_reason"] for h in state["log_history"] if "rlplugs/stop_reason" in h]
    assert stop.startswith(f"entropy-guard: the policy's learning_rate on its completions rose to {rates[-1]:.4g}")
    (segment,) = json.loads((out / "rlplugs_segments.json").read_text())
    assert segment["end_step"] == len(rates) and segment["end_reason"] == f"stopped: {stop}"


def test_trl_grpo_no_spread_stop_ends_the_run_and_says_why(tmp_path, tiny_qwen35, plugin_env):
    """``trl grpo --fixups no-spread-stop``: letters-test's rewards do vary, so the stop is pointed at
    a share that is 1.0 at every batch here (the random model never ends a completion, so every one
    is clipped); it ends the run at the second batch and the reason lands in the trainer state."""
    out = tmp_path / "out"
    proc = trl(
        "grpo", "--env", "letters-test", "--model_name_or_path", str(tiny_qwen35), "--max_steps", "5",
        "--save_strategy", "no", "--output_dir", str(out), "--fixups", "no-spread-stop",
        "--fixup_args", '{"no-spread-stop": {"metric": "completions/clipped_ratio"}}', *TINY_RUN, env=plugin_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    state = json.loads((out / "trainer_state.json").read_text())
    (stop,) = [h["rlplugs/stop_reason"] for h in state["log_history"] if "rlplugs/stop_reason" in h]
    assert state["global_step"] == 2 and stop.startswith("no-spread-stop: no group had reward spread")
    assert "logged at steps 1, 2 (completions/clipped_ratio 1.0 in 2 log entries in a row)" in stop


@pytest.mark.parametrize(("command", "ours", "stock"), [
    ("grpo", "--filter_zero_spread_groups", "--reward_funcs"),
    ("sft", "--sft_dataset", "--packing"),
])  # fmt: skip
def test_trl_help_lists_env_and_the_stock_flags(command, ours, stock, plugin_env):
    proc = trl(command, "--help", env=plugin_env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"usage: trl {command}")
    assert "--env ENVIRONMENT" in proc.stdout and ours in proc.stdout
    assert stock in proc.stdout and "--dataset_name" in proc.stdout


STOCK_REWARD = """
import sys
from pathlib import Path


def reward(completions, **kwargs):
    Path("launched_script.txt").write_text(sys.modules["__main__"].__file__)
    return [float(len(c[0]["content"]) % 7) for c in completions]
"""


def test_stock_trl_grpo_without_env_runs_trls_own_script(tmp_path, tiny_qwen35, plugin_env):
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"prompt": [{"role": "user", "content": f"Say {w}."}]} for w in ("hi", "yes", "no", "ok")]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "stock_reward.py").write_text(STOCK_REWARD)
    proc = trl(
        "grpo", "--model_name_or_path", str(tiny_qwen35), "--dataset_name", str(data), "--reward_funcs",
        "stock_reward.reward", "--max_steps", "1", "--output_dir", str(tmp_path / "out"), *TINY_RUN,
        env=plugin_env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    launched = Path(tmp_path / "launched_script.txt").read_text()
    assert launched.endswith(str(Path("trl", "scripts", "grpo.py")))  # TRL's script, not rlplugs'
    assert "rewards/reward/mean" in log_history(tmp_path / "out")[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env_args", '{"rowz": 4}'], "did you mean 'rows'"),
        (["--extra_rewards", "lenght-penalty"], "Did you mean 'length-penalty'"),
        (["--extra_rewards", "length-penalty:lots"], "weight 'lots' is not a number"),
        (["--env_args", "[1]"], "--env_args must be a JSON object"),
        (["--fixups", "segmnets"], "Did you mean 'segments'"),
        (["--extra_rewards", "length-penalty", "--reward_args", '{"length-penalty": {"limit_chrs": 4}}'],
         "'limit_chrs' (did you mean 'limit_chars'?)"),
        (["--extra_rewards", "length-penalty", "--reward_args", '{"lenght-penalty": {}}'],
         "--reward_args has options for 'lenght-penalty' (did you mean 'length-penalty'?), which is not named"),
        (["--fixups", "segments", "--fixup_args", '{"segments": {"every": 2}}'], "'segments' takes no options"),
        (["--fixups", "bf16-noop-guard", "--fixup_args", '{"bf16-noop-guard": {"check_step": 2}}'],
         "'check_step' (did you mean 'check_steps'?)"),
    ],
)
def test_bad_environment_options_are_errors_with_suggestions(args, message):
    from rlplugs.adapters.trl.launch import split_launch_args

    with pytest.raises((ValueError, LookupError)) as caught:  # raised in the `trl` process, before launch
        split_launch_args("grpo", ["--env", "letters-test", *args, "--use_cpu", "--bf16", "false"])
    assert message in str(caught.value)


def test_launch_args_split_between_accelerate_and_the_script(tiny_qwen35):
    from rlplugs.adapters.trl.launch import split_launch_args

    argv = [
        "--env",
        "letters-test",
        "--model_name_or_path",
        str(tiny_qwen35),
        "--num_processes",
        "2",
        "--use_cpu",
        "--bf16",
        "false",
        "--accelerate_config",
        "multi_gpu",
    ]
    launch, script = split_launch_args("grpo", argv)
    assert launch[:2] == ["--config_file", launch[1]] and launch[1].endswith("multi_gpu.yaml")
    assert launch[2:] == ["--num_processes", "2"]
    assert script == ["--env", "letters-test", "--model_name_or_path", str(tiny_qwen35), "--use_cpu", "--bf16", "false"]


@pytest.mark.parametrize(
    ("launch", "environ", "expected"),
    [
        ([], {}, ["--num_cpu_threads_per_process", "{all}"]),
        (["--num_processes", "2"], {}, ["--num_processes", "2", "--num_cpu_threads_per_process", "{half}"]),
        (["--num_processes=2"], {}, ["--num_processes=2", "--num_cpu_threads_per_process", "{half}"]),
        (["--num_cpu_threads_per_process", "3"], {}, ["--num_cpu_threads_per_process", "3"]),
        ([], {"OMP_NUM_THREADS": "3"}, []),
        (["--config_file", "multi_cpu.yaml"], {}, ["--config_file", "multi_cpu.yaml"]),
    ],
)
def test_cpu_launches_share_the_cores_unless_the_user_chose(monkeypatch, launch, environ, expected, tiny_qwen35):
    """Without CUDA, accelerate would start each process on one thread; the launch asks for the
    machine's torch threads split between the processes, and leaves any choice of the user's."""
    import torch

    from rlplugs.adapters.trl.launch import split_launch_args

    assert not torch.cuda.is_available()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    threads = torch.get_num_threads()
    expected = [e.format(all=threads, half=max(1, threads // 2)) for e in expected]
    model = ["--model_name_or_path", str(tiny_qwen35)]
    got, script = split_launch_args("grpo", ["--env", "letters-test", *model, *launch])
    assert got == expected
    assert script == ["--env", "letters-test", *model]


def test_dead_component_from_yaml_config_fails_preflight_naming_it(tmp_path, tiny_qwen35, plugin_env):
    config = tmp_path / "letters.yaml"
    config.write_text(
        "environment: letters-test\n"
        'env_args: {"dead_component": true}\n'
        f"model_name_or_path: {tiny_qwen35}\n"
        f"output_dir: {tmp_path / 'out'}\n"
        "max_steps: 2\n"
    )
    proc = trl("grpo", "--config", str(config), *TINY_RUN, env=plugin_env)
    assert proc.returncode != 0
    assert "PreflightError" in proc.stderr and "'never' (judge 'never' is switched off)" in proc.stderr
    assert "Loading weights" not in proc.stderr  # stopped before the model was even built
    assert not list((tmp_path / "out").glob("checkpoint-*"))


def test_startup_hook_leaves_other_trl_versions_untouched(plugin_env):
    code = (
        "import sys, warnings; sys.argv = ['trl']; import trl; trl.__version__ = '1.17.0'\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always'); import rlplugs.adapters.trl.startup_hook; import trl.cli.main\n"
        "m = sys.modules['trl.cli.main']\n"
        "names = {type(c).__name__ for c in m.get_commands()}\n"
        "print(sorted(names), [str(w.message) for w in caught if 'rlplugs' in str(w.message)])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=plugin_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "EnvTrainingCommand" not in proc.stdout and "TrainingCommand" in proc.stdout
    assert "outside the tested range" in proc.stdout


def test_env_defaults_apply_only_where_the_user_set_nothing(tmp_path):
    from rlplugs.adapters.trl.arguments import make_grpo_parser, parse_with_env_defaults

    config = Path(__file__).resolve().parents[1] / "configs" / "trl" / "letters-test.yaml"
    (script, train, _, _), spec, *_ = parse_with_env_defaults(make_grpo_parser(), ["--config", str(config)])
    assert spec.name == "letters-test" and script.filter_zero_spread_groups and train.max_steps == 2
    assert [c.name for c in spec.components] == ["letters", "brevity", "length-penalty"]
    assert train.chat_template_kwargs == {"enable_thinking": False}  # the env's default
    override = ["--config", str(config), "--chat_template_kwargs", '{"enable_thinking": true}', "--max_steps", "3"]
    (_, train, _, _), *_ = parse_with_env_defaults(make_grpo_parser(), override)
    assert train.chat_template_kwargs == {"enable_thinking": True} and train.max_steps == 3  # CLI wins
    yaml_override = tmp_path / "own.yaml"
    yaml_override.write_text(config.read_text() + "chat_template_kwargs: {enable_thinking: true}\n")
    (_, train, _, _), *_ = parse_with_env_defaults(make_grpo_parser(), ["--config", str(yaml_override)])
    assert train.chat_template_kwargs == {"enable_thinking": True}  # YAML wins over the env default


def test_without_cuda_cpu_float32_is_the_default_and_an_explicit_choice_wins():
    import torch

    from rlplugs.adapters.trl.arguments import make_grpo_parser, parse_with_env_defaults

    assert not torch.accelerator.is_available()
    (_, train, _, _), *_ = parse_with_env_defaults(make_grpo_parser(), ["--env", "letters-test"])
    assert train.use_cpu and not train.bf16  # TRL alone defaults to bf16, which transformers refuses here
    (_, train, _, _), *_ = parse_with_env_defaults(make_grpo_parser(), ["--env", "letters-test", "--bf16", "true"])
    assert train.use_cpu and train.bf16  # the user's flag: bf16 autocast on the CPU
    (_, train, _, _), *_ = parse_with_env_defaults(make_grpo_parser(), ["--env", "letters-test", "--use_cpu", "false"])
    assert not train.use_cpu and not train.bf16


def test_fixups_attach_as_trainer_callbacks(tmp_path):
    from transformers import TrainerCallback
    from trl import GRPOConfig

    from rlplugs.registry import make_env
    from rlplugs.adapters.trl.arguments import EnvArguments
    from rlplugs.adapters.trl.grpo import build_callbacks

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    script_args = EnvArguments(fixups=["segments", "bf16-noop-guard"], fixup_args='{"bf16-noop-guard": {"check_steps": 2}}')
    segments, guard = build_callbacks(script_args, args, make_env("letters-test"))
    assert isinstance(segments, TrainerCallback) and isinstance(guard, TrainerCallback)
    assert guard.check_steps == 2  # the --fixup_args option reached the fixup

"""Bad input to ``trl grpo|sft --env`` and ``rlplugs grpo|sft``: one line saying what is wrong and
what to do, exit code 2, no traceback, and nothing launched (the parent process checks it all).

Each case runs the real console script in a subprocess; the cases alternate between the two
front ends and the two commands, which share every check after the dispatch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

# a safetensors file cut short: its header promises 16 bytes of tensor data and none follow (the
# header's length, 55, is the first of 8 little-endian bytes, all below 128, so the file is also text)
CUT_HEADER = '{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
CUT_SAFETENSORS = chr(len(CUT_HEADER)) + "\0" * 7 + CUT_HEADER

INPUT_FILES = {
    "env-key.yaml": "env: letters-test\nmax_steps: 1\n",
    "malformed.yaml": "environment: letters-test\nenv_args: {rows: 4\n",
    "list.yaml": "- environment: letters-test\n- max_steps: 1\n",
    "zero0.json": '{"zero_optimization": {"stage": 0}}',  # a DeepSpeed config
    "checkpoint-1/trainer_state.json": '{"global_step": 1, "log_hist',  # a copy cut short
    "checkpoint-2/trainer_state.json": '{"global_step": 2}',
    "checkpoint-3/trainer_state.json": '{"global_step": 3}',  # and no weights
    "checkpoint-2/model.safetensors": CUT_SAFETENSORS,
    "cut-model/config.json": "{}",
    "cut-model/model.safetensors": CUT_SAFETENSORS,
    "bad-json-model/config.json": "{bad",
    "bad-json-model/model.safetensors": CUT_SAFETENSORS,
    "no-weights-model/config.json": "{}",
    "letters-as-rewards.yaml": "environment: letters-test\nextra_rewards: length-penalty\n",
    "list-env-args.yaml": "environment: letters-test\nenv_args: [1]\n",
}

CASES = [  # (console script, command, arguments, what the one line must say)
    ("trl", "grpo", ["--env", "leters-test"], "unknown environment 'leters-test'. Did you mean 'letters-test'"),
    ("rlplugs", "sft", ["--env", "letters-test", "--env_args", '{"rowz": 4}'], "'rowz' (did you mean 'rows'?)"),
    ("trl", "sft", ["--env", "letters-test", "--model_name_or_path", "/nonexistent/model"],
     "--model_name_or_path /nonexistent/model: no such directory"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "Org/not-downloaded"],
     "not in the Hub cache, and HF_HUB_OFFLINE=1 forbids downloading it"),
    ("trl", "grpo", ["--config", "{tmp}/env-key.yaml"], "name the rlplugs environment with `environment: letters-test`"),
    ("rlplugs", "grpo", ["--config", "{tmp}/malformed.yaml"], "malformed.yaml is not valid YAML"),
    ("trl", "grpo", ["--env", "letters-test", "--config", "{tmp}/list.yaml"], "must be a YAML mapping of option: value, not a list"),
    ("rlplugs", "sft", ["--config", "{tmp}/missing.yaml"], "missing.yaml does not exist"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--env_args", "{bad"], "--env_args is not valid JSON"),
    ("trl", "grpo", ["--env", "letters-test", "--extra_rewards", "length-penalty:abc"], "weight 'abc' is not a number"),
    ("trl", "sft", ["--env", "factorio-build", "--model_name_or_path", "{model}", "--sft_dataset", "nosuch"],
     "env 'factorio-build' has no SFT dataset 'nosuch'; choose from warmstart-93, warmstart-800"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--env_split", "tset"],
     "env 'letters-test' has no split 'tset'; splits: train, validation"),
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--use_vllm", "true",
                     "--generation_kwargs", '{"max_new_tokens": 8}'],
     "generation_kwargs 'max_new_tokens' is not a vLLM (use_vllm true) option: name the per-turn cap 'max_tokens'"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--compile_generation", "true",
                         "--use_transformers_continuous_batching", "true"],
     "--compile_generation speeds up plain generate"),
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--sampling_logprobs", "true",
                     "--top_p", "0.9", "--min_p", "0.05"],
     "--sampling_logprobs records temperature, top-k and top-p sampling only, and min_p=0.05 would reshape the distribution"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--sampling_logprobs", "true",
                         "--use_vllm", "true"],
     "--sampling_logprobs records plain generate's log-probabilities; vLLM returns its own"),
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--keep_sampling_mask", "true",
                     "--top_p", "0.9", "--top_k", "20"],
     "--keep_sampling_mask renormalises over the kept sets the sampler records: turn on sampling_logprobs too"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--sampling_logprobs", "true",
                         "--keep_sampling_mask", "true", "--top_p", "0.9"],
     "--keep_sampling_mask keeps every token's kept set until the update: bound the sets with top_k (for example 512)"),
    ("trl", "grpo", ["--env", "count-test", "--model_name_or_path", "{model}", "--sampling_logprobs", "true",
                     "--keep_sampling_mask", "true", "--top_p", "0.9", "--top_k", "20"],
     "--keep_sampling_mask supports single-turn environments; this one plays episodes"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--sampling_logprobs", "true",
                         "--keep_sampling_mask", "true", "--top_p", "0.9", "--top_k", "20", "--accelerate_config", "fsdp2"],
     "--keep_sampling_mask reads output-embedding rows outside the forward, which FSDP and DeepSpeed shard"),
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--sampling_logprobs", "true",
                     "--keep_sampling_mask", "true", "--top_p", "0.9", "--top_k", "20", "--deepspeed", "{tmp}/zero0.json"],
     "--keep_sampling_mask reads output-embedding rows outside the forward, which FSDP and DeepSpeed shard"),
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{gemma2}", "--sampling_logprobs", "true",
                     "--keep_sampling_mask", "true", "--top_p", "0.9", "--top_k", "20"],
     "--keep_sampling_mask computes plain logits, and this model scales them (final_logit_softcapping=30.0)"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--max_stpes", "1"],
     "unknown option --max_stpes (did you mean --max_steps"),
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--num_generations", "3"],
     "must be divisible by num_generations (3). The generation batch is per_device_train_batch_size x "
     "gradient_accumulation_steps x processes (or generation_batch_size): make it a multiple of num_generations"),
    # GRPOConfig's own checks divide by it: a ZeroDivisionError traceback before
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--num_generations", "0"],
     "a count TRL divides by is 0 (num_generations, num_generations_eval or per_device_train_batch_size)"),
    # these failed only inside the launched processes, with a traceback from the sampler or generate
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--gradient_accumulation_steps", "0"],
     "--gradient_accumulation_steps 0: give a value of at least 1"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--temperature", "0"],
     "--temperature 0.0: give a value above 0 (GRPO learns from the spread in a group of samples"),
    ("trl", "sft", ["--env", "letters-test", "--model_name_or_path", "{model}", "--learning_rate", "-1"],
     "--learning_rate -1.0: give a value of at least 0"),
    # Trainer reads the step record only after the model has loaded: a JSON traceback from every process
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--resume_from_checkpoint",
                     "{tmp}/checkpoint-1"], "checkpoint-1: its trainer_state.json is damaged (JSONDecodeError"),
    ("rlplugs", "sft", ["--env", "letters-test", "--model_name_or_path", "{model}", "--resume_from_checkpoint",
                        "{tmp}/checkpoint-9"], "checkpoint-9: no such folder"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--resume_from_checkpoint",
                         "{tmp}/checkpoint-2"], "checkpoint-2: model.safetensors is damaged ("),
    ("trl", "sft", ["--env", "letters-test", "--model_name_or_path", "{model}", "--resume_from_checkpoint",
                    "{tmp}/checkpoint-3"], "checkpoint-3: no model weights (model.safetensors, pytorch_model.bin"),
    # transformers' loader met it inside every process, with a SafetensorError traceback
    ("trl", "sft", ["--env", "letters-test", "--model_name_or_path", "{tmp}/cut-model"],
     "cut-model: model.safetensors is damaged ("),
    # one extra reward per letter ("unknown reward component 'l'"), and a TypeError
    ("rlplugs", "grpo", ["--config", "{tmp}/letters-as-rewards.yaml"],
     "letters-as-rewards.yaml: extra_rewards: 'length-penalty' is not a list[str] | None"),
    ("trl", "grpo", ["--config", "{tmp}/list-env-args.yaml"], "list-env-args.yaml: env_args: [1] is not a dict[str, Any] | str | None"),
    # accepted, and nothing done with them
    ("rlplugs", "sft", ["--env", "factorio-build", "--model_name_or_path", "{model}", "--extra_rewards", "length-penalty"],
     "--extra_rewards: GRPO's, SFT trains on an SFT dataset (--sft_dataset) with no reward"),
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--eval_strategy", "steps",
                     "--dataset_test_split", "nope"], "env 'letters-test' has no split 'nope'; splits: train, validation"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{model}", "--fixups", "entropy-guard",
                         "entropy-guard"], "--fixups names entropy-guard more than once"),
    ("trl", "grpo", ["--env", "letters-test", "--extra_rewards", "length-penalty:nan"], "'length-penalty:nan': give a finite weight"),
    ("rlplugs", "grpo", ["--env", "letters-test", "--max_episode_turns", "0"], "--max_episode_turns 0: give at least 1"),
    # tracebacks from inside the training process, after the model had loaded
    ("rlplugs", "sft", ["--env", "letters-test", "--model_name_or_path", "{model}", "--dataset_name", "/nonexistent/data"],
     "--dataset_name /nonexistent/data: no such file or folder"),
    # argparse printed the usage of every TRL option first (about 230 lines)
    ("rlplugs", "grpo", ["--env", "letters-test", "--max_steps", "abc"], "argument --max_steps/--max-steps: invalid int value: 'abc'"),
    # transformers' OSError traceback, after the preflight, from inside the training process
    ("rlplugs", "grpo", ["--env", "letters-test", "--model_name_or_path", "{tmp}/bad-json-model"],
     "bad-json-model: config.json does not parse as JSON (Expecting property name"),
    ("trl", "grpo", ["--env", "letters-test", "--model_name_or_path", "{tmp}/no-weights-model"],
     "no-weights-model: no weights in it (model.safetensors, model.safetensors.index.json, ...)"),
]  # fmt: skip


def one_error_line(stderr: str) -> str:
    """The single line of stderr besides the registry's log of the test site's plugins that are
    broken on purpose. No Python warning either: transformers' FutureWarning that
    ``gradient_checkpointing`` is deprecated (TRL's default sets it) came before every refusal."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    rest = [line for line in lines if not line.startswith(("WARNING rlplugs.registry", "rlplugs plugin '"))]
    assert len(rest) == 1, stderr
    return rest[0]


@pytest.fixture(scope="module")
def gemma2_dir(tmp_path_factory):
    """A Gemma 2 config, whose head softcaps its logits: the launcher reads the config, and only
    asks that a weights file be there (an empty one: nothing loads it)."""
    from transformers import Gemma2Config

    path = tmp_path_factory.mktemp("gemma2")
    Gemma2Config().save_pretrained(path)
    (path / "pytorch_model.bin").write_bytes(b"")
    return path


def run(script: str, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / script), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("script", "command", "args", "message"), CASES, ids=[f"{c[0]}-{c[1]}-{c[3][:40]}" for c in CASES])
def test_bad_input_is_one_line_and_exit_2_before_launch(script, command, args, message, tmp_path, tiny_qwen35, gemma2_dir,
                                                       plugin_env):  # fmt: skip
    for name, text in INPUT_FILES.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    args = [a.replace("{tmp}", str(tmp_path)).replace("{model}", str(tiny_qwen35)).replace("{gemma2}", str(gemma2_dir))
            for a in args]  # fmt: skip
    proc = run(script, command, *args, "--output_dir", str(tmp_path / "out"), env=plugin_env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    line = one_error_line(proc.stderr)
    assert line.startswith("error: ") and message in line, line
    assert not (tmp_path / "out").exists()  # nothing was launched


def test_misnamed_env_recommendation_stops_the_launch_naming_it(tmp_path, tiny_qwen35, plugin_env):
    """An env recommending options in the wrong names (matrl once said ``max_turns`` and
    ``enable_thinking``) fails in the parent, not in every training process."""
    bad = json.dumps({"recommend": {"max_turns": 10, "enable_thinking": True}})
    proc = run(
        "rlplugs", "grpo", "--env", "letters-test", "--env_args", bad, "--model_name_or_path", str(tiny_qwen35),
        "--output_dir", str(tmp_path / "out"), env=plugin_env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = one_error_line(proc.stderr)
    assert "env 'letters-test' recommends options the TRL trainer does not have" in line
    assert "'max_turns' (did you mean 'max_episode_turns'" in line and "'enable_thinking'" in line
    assert not (tmp_path / "out").exists()


def test_shipped_envs_recommend_only_trl_options():
    from rlplugs.registry import make_env
    from rlplugs.adapters.trl.arguments import check_recommendations

    for name in ("factorio-build", "matrl", "clembench-games"):
        check_recommendations(make_env(name))  # raises naming any option TRL lacks


@pytest.mark.parametrize("name", ["factorio-build", "matrl", "clembench-games"])
def test_shipped_envs_defaults_alone_make_a_valid_grpo_config(name, tmp_path, tiny_qwen35):
    """``trl grpo --env NAME --model_name_or_path M`` with no other option must get past TRL's own
    checks: matrl once recommended groups of 16 beside TRL's batch of 8, and TRL refused the run
    (its generation batch must hold whole groups)."""
    from rlplugs.adapters.trl.arguments import make_grpo_parser, parse_training_args

    argv = ["--env", name, "--model_name_or_path", str(tiny_qwen35), "--output_dir", str(tmp_path)]
    parsed = parse_training_args("grpo", make_grpo_parser(), argv)  # TRL raises on a partial group
    values = {key: value for args in parsed.args for key, value in vars(args).items()}
    assert {key: values[key] for key in parsed.spec.trainer_defaults} == parsed.spec.trainer_defaults  # all applied


def test_an_output_dir_that_cannot_be_written_is_one_line_before_launch(tmp_path, tiny_qwen35, plugin_env):
    """Trainer met it after the model had loaded: a FileNotFoundError traceback."""
    proc = run("rlplugs", "grpo", "--env", "letters-test", "--model_name_or_path", str(tiny_qwen35),
               "--output_dir", "/proc/rlplugs-out", env=plugin_env, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert one_error_line(proc.stderr).startswith("error: --output_dir /proc/rlplugs-out: cannot write there (")

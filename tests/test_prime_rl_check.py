"""``scripts/check_prime_rl.py``: the prime-rl TOMLs checked with prime-rl's own code.

prime-rl is not on PyPI, so the full check needs a prime-rl checkout: set ``RLPLUGS_PRIME_RL_SRC``
to one (after its ``uv sync``, with rlplugs installed into its ``.venv`` as examples/prime_rl.md
shows). Without it, what runs here: every TOML's sources through verifiers' own env-config
resolution (PyPI verifiers 0.4.x), the TOML facts prime-rl's loader was seen to need (the check's
JSON records that run), and the script's error path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "check_prime_rl.py"
PRIME_RL_SRC = os.environ.get("RLPLUGS_PRIME_RL_SRC")
TOMLS = sorted((REPO / "configs" / "prime-rl").glob("*.toml"))


def sources(config: dict) -> list[dict]:
    orchestrator = config["orchestrator"]
    return orchestrator["train"]["source"] + orchestrator.get("eval", {}).get("source", [])


def test_every_toml_source_resolves_through_verifiers_env_config():
    """Each ``env`` block (taskset options, seats, ``n``, ``max_turns``) as prime-rl's orchestrator
    and env server resolve it; a misspelt key is an error, not a default."""
    pytest.importorskip("verifiers.v1")
    from verifiers.v1.utils import loaders

    for toml in TOMLS:
        for source in sources(tomllib.loads(toml.read_text())):
            env = loaders.resolve_env_config(source["env"])
            assert env.taskset.id == source["env"]["taskset"]["id"], (toml.name, source["name"])
    bad = sources(tomllib.loads((REPO / "configs/prime-rl/clembench-games.toml").read_text()))[0]["env"]
    with pytest.raises(ValueError, match="gamez"):
        loaders.resolve_env_config({**bad, "taskset": {**bad["taskset"], "gamez": ["taboo"]}})


def test_every_toml_states_what_prime_rl_needs_to_train_and_resume():
    """What prime-rl 559b447's loader and launcher were seen to need (scripts/check_prime_rl.py):
    an inference server on its own GPUs (without one, `rl` starts no vLLM), an explicit renderer
    ("auto" rejects fine-tuned model names), checkpoints, and a fixed run name (with the generated
    one, `--resume` trains from scratch in a new folder)."""
    for toml in TOMLS:
        config = tomllib.loads(toml.read_text())
        assert "inference" in config and config["deployment"]["num_infer_gpus"] >= 1, toml.name
        vllm = config["inference"].get("vllm", {})
        assert vllm.get("data_parallel_size", 1) * vllm.get("tensor_parallel_size", 1) == config["deployment"]["num_infer_gpus"]
        assert config["orchestrator"]["renderer"]["name"] == "qwen3.5", toml.name
        assert config["ckpt"]["interval"] >= 1 and config["run"]["name"] == toml.stem, toml.name
        assert config["orchestrator"]["batch_size"] % config["orchestrator"]["group_size"] == 0, toml.name
    games = tomllib.loads((REPO / "configs/prime-rl/clembench-games.toml").read_text())
    assert games["orchestrator"]["algo"]["type"] == "rae"  # baselines per trace.agent.name = seat, per source
    trained = [s["env"]["taskset"]["games"] for s in games["orchestrator"]["train"]["source"]]
    assert all(len(g) == 1 for g in trained) and len({g[0] for g in trained}) == 6  # one source per game


def test_verifiers_extra_keeps_prime_rls_verifiers_and_installs_a_release_fresh():
    """The ``verifiers`` extra accepts the submodule prime-rl pins (installed: pip and uv accept a
    satisfying pre-release that is already there) and 0.4.x, and a fresh install resolves to a
    release, not a dev build (PyPI has 0.4.1.dev86)."""
    from packaging.requirements import Requirement

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["verifiers"]
    (spec,) = [Requirement(r).specifier for r in extra if Requirement(r).name == "verifiers"]
    assert spec.contains("0.3.1.dev62", prereleases=True)  # prime-rl 559b447's deps/verifiers (a60a606)
    on_pypi = ["0.1.14", "0.3.0", "0.3.1", "0.4.0", "0.4.1.dev86", "0.5.0"]
    assert list(spec.filter(on_pypi)) == ["0.3.1", "0.4.0"]  # what a resolver picks from: releases only


def run_check(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RLPLUGS_CHECK_PRIME_RL_REEXEC"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, **kwargs)


def test_a_wrong_checkout_is_one_line_and_exit_2(tmp_path):
    result = run_check(str(tmp_path / "nowhere"), timeout=60)
    assert result.returncode == 2 and "is not a folder (a prime-rl source checkout)" in result.stderr
    assert result.stderr.strip().count("\n") == 0
    result = run_check(str(tmp_path), timeout=60)
    assert result.returncode == 2 and "no packages/prime-rl-configs" in result.stderr
    assert result.stderr.strip().count("\n") == 0
    if importlib.util.find_spec("prime_rl") is None:  # this Python has no prime-rl: the checkout's .venv is needed
        (tmp_path / "packages" / "prime-rl-configs").mkdir(parents=True)
        result = run_check(str(tmp_path), timeout=60)
        assert result.returncode == 2 and "run `uv sync`" in result.stderr and result.stderr.strip().count("\n") == 0


@pytest.mark.skipif(not PRIME_RL_SRC, reason="RLPLUGS_PRIME_RL_SRC is not set: point it at a prime-rl checkout "
                    "(after `uv sync`, rlplugs installed into its .venv: examples/prime_rl.md) to check the "
                    "prime-rl TOMLs with prime-rl's loader, rl --dry-run and its env-server client")
def test_every_prime_rl_toml_loads_dry_runs_and_plays_scored_episodes(tmp_path):
    out = tmp_path / "prime_rl_check.json"
    result = run_check(PRIME_RL_SRC, "--episodes", "1", "--out", str(out), timeout=3000)
    assert out.exists(), result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["configs"]) == {f"configs/prime-rl/{p.name}" for p in (REPO / "configs" / "prime-rl").glob("*.toml")}
    for name, config in report["configs"].items():
        assert config["valid"] and config["warnings"] == [], (name, config.get("error"), config.get("warnings"))
        assert config["inference"] and config["gpus"]["inference"] >= 1, name
        assert config["renderer"] != "auto" and config["ckpt"]["interval"], name
        assert config["dry_run"]["ok"], (name, config["dry_run"].get("tail"))
        assert all(e["reloaded"] for e in config["env_server_configs"].values()), name
        for source, rollouts in config["rollouts"].items():
            assert rollouts.get("traces_scored", 0) >= 1 and rollouts["episodes_ok"] == rollouts["episodes"], (source, rollouts)
    clembench = report["configs"]["configs/prime-rl/clembench-games.toml"]["rollouts"]
    assert clembench["clembench-taboo"]["trainable_agent_names"] == ["describer", "guesser"]
    assert result.returncode == 0 and report["all_ok"]


def check_script():
    spec = importlib.util.spec_from_file_location("check_prime_rl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_env_server_that_exits_ends_the_wait_with_its_last_line(tmp_path):
    """prime-rl's env client waits forever for a server that never came up (one run hung 10 minutes
    on an env server that could not bind its port); the check reports the exit instead."""
    import asyncio

    check = check_script()
    log = tmp_path / "env-server.log"
    with check.background([sys.executable, "-c", "print('zmq.error.ZMQError: Address already in use'); raise SystemExit(3)"], log) as process:
        with pytest.raises(RuntimeError, match=r"env-server exited with code 3: zmq.error.ZMQError: Address already in use \(log env-server.log\)"):
            asyncio.run(check.served(asyncio.sleep(3600), process, log))
        assert asyncio.run(check.served(asyncio.sleep(0, result="played"), process, log)) == "played"  # done before the check


def test_ports_are_never_handed_out_twice():
    """A service started on one port may not listen yet when the next port is chosen."""
    check = check_script()
    ports = [check.free_port() for _ in range(200)]
    assert len(set(ports)) == 200

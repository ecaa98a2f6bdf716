"""A scripted policy (known good and known bad structures) through the trainer adapters: TRL's
reward functions (with episodes pickled as when TRL gathers a group across processes) and the
verifiers v1 taskset, whose Env plays sibling attempts so group components compare them."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest
from pymatgen.core import Lattice, Structure

from matrl.plugin import MatrlConfig, build_env
from matrl.policy import ReplayPolicy
from matrl.structures import structure_to_json
from matrl.toolcalls import format_call
from rlplugs.episode import play
from rlplugs.adapters.trl.rewards import EnvRewardFunctions

NACL = Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.69), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]]).get_primitive_structure()
OVERLAP = Structure(Lattice.cubic(4.0), ["Na", "Cl"], [[0, 0, 0], [0.03, 0, 0]])


def submit(structure) -> str:
    return "Submitting.\n</think>\n\n" + format_call("submit", structure=structure_to_json(structure))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_trl_reward_functions_score_gathered_episodes_per_component():
    spec = build_env(MatrlConfig(relax_steps=6, elastic_judge=False))
    row = next(r for r in spec.dataset("validation") if r["task"] == "space_group")
    row = {**row, "target": json.dumps({"space_group": 225})}  # rock salt's group, so NaCl meets the condition
    episodes = [play(spec.episodes(row), ReplayPolicy([submit(s)])) for s in (NACL, NACL, OVERLAP)]
    gathered = [pickle.loads(pickle.dumps(ep)) for ep in episodes]  # what accelerate's gather_object does
    assert gathered[0].evaluator is None and gathered[0].record()["submission"] == episodes[0].record()["submission"]
    rewards = EnvRewardFunctions(spec)
    n = len(gathered)
    kwargs = {"episode": gathered, "task": [row["task"]] * n, "target": [row["target"]] * n}
    values = {f.__name__: f([row["prompt"]] * n, [""] * n, [[i] for i in range(n)], **kwargs) for f in rewards.functions}
    assert values["valid"] == [1.0, 1.0, 0.0]
    assert values["unique"] == [0.5, 0.5, 0.0]
    assert values["group_diversity"] == [0.0, 0.0, 0.0]
    assert values["sun_marginal"][2] == 0.0 and values["sun_marginal"][0] > 0.0
    assert values["band_gap_target"][0] is None or row["task"] == "band_gap"


def test_verifiers_env_plays_sibling_attempts_scored_as_a_group(tmp_path, monkeypatch):
    vf = pytest.importorskip("verifiers.v1")
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig
    from verifiers.v1.utils import loaders

    from rlplugs.tools.policy_server import serve_policy

    assert loaders.taskset_class("matrl").__name__ == "MatrlTaskset"
    assert loaders.environment_class("matrl").__name__ == "MatrlEnv"
    monkeypatch.setenv("RLPLUGS_TEST_KEY", "local")
    env = {"taskset": {"id": "matrl", "split": "validation", "eval_rows": 2, "relax_steps": 6, "elastic_judge": False},
           "n": 2, "agent": {"runtime": {"type": "subprocess"}}}
    policy = ReplayPolicy([submit(NACL)])
    with serve_policy(policy, idle_timeout_s=300) as server:
        config = EvalConfig(env=env, model="scripted", client={"base_url": server.base_url, "api_key_var": "RLPLUGS_TEST_KEY"},
                            num_rollouts=1, push=False, rich=None, output_dir=tmp_path, select={"limit": 1})
        (episode,) = asyncio.run(run_eval(config))
    assert episode.ok, episode.errors
    assert len(episode.traces) == 2  # two sibling attempts, each a trainable trace
    for trace in episode.traces:
        assert trace.rewards["valid"].score == 1.0
        assert trace.rewards["unique"].score == 0.5  # the siblings submitted the same crystal
        assert trace.rewards["group_diversity"].score == 0.0
    assert vf is not None


def test_verifiers_taskset_config_checks_matrl_options_but_reaches_no_service_while_parsing():
    """prime-rl and verifiers validate ``[env.taskset]`` wherever they read the TOML, maybe before the
    judge service is up: the env's own checks run there (a malformed URL, an unknown judge), the
    one that waits for the service (up to 30 s) runs when the tasks are built (the env's build
    refusing that URL: ``test_cli_errors``' preflight case)."""
    pytest.importorskip("verifiers.v1")
    from verifiers.v1.utils import loaders

    config_type = loaders.taskset_config_type("matrl")
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens
    assert config_type(id="matrl", judge_url=closed).judge_url == closed
    with pytest.raises(ValueError, match="'ftp://judges' is not an http"):
        config_type(id="matrl", judge_url="ftp://judges")


def test_vf_eval_with_a_judge_service_that_does_not_answer_stops_with_one_line(tmp_path):
    """The build's check of the service (after the config parsed) raised inside the taskset's load,
    and vf-eval printed two chained tracebacks around the message."""
    pytest.importorskip("verifiers.v1")
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run(
        [str(Path(sys.executable).with_name("vf-eval")), "matrl", "--env.taskset.judge-url", "http://127.0.0.1:9",
         "--env.taskset.rows", "1", "--env.agent.runtime.type", "subprocess", "--no-push", "-m", "none",
         "--client.base-url", "http://127.0.0.1:9/v1", "-n", "1", "-o", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: invalid 'matrl' options: judge_url: http://127.0.0.1:9: no judge service answered within 30 s")

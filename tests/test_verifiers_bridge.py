"""The verifiers v1 bridge, through verifiers' own loader and rollout machinery.

Rollouts run the real verifiers code path: ``run_eval`` (what ``vf-eval`` calls) loads the
taskset by id, starts the interception server, launches verifiers' own ``null`` chat program as
a subprocess, and that program talks over HTTP to a loopback OpenAI-compatible server
(:mod:`rlplugs.tools.policy_server`) answering with a scripted responder.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tomllib

import pytest

vf = pytest.importorskip("verifiers.v1")
from verifiers.v1.cli.eval.runner import run_eval  # noqa: E402
from verifiers.v1.configs.cli.eval import EvalConfig  # noqa: E402
from verifiers.v1.utils import loaders  # noqa: E402

import rlplugs  # noqa: E402
from rlplugs.tools.policy_server import serve_policy  # noqa: E402
from rlplugs.registry import Registration, get_registry  # noqa: E402


def numbered(messages):
    """Scripted model: '<k> apples' where k is the conversation length (always has a digit)."""
    return f"{len(messages)} apples"


def run_vf_eval(tmp_path, monkeypatch, env: dict, limit: int):
    monkeypatch.setenv("RLPLUGS_TEST_KEY", "local")
    with serve_policy(lambda messages: numbered(messages), idle_timeout_s=120) as server:
        config = EvalConfig(
            env=env, model="scripted", client={"base_url": server.base_url, "api_key_var": "RLPLUGS_TEST_KEY"},
            num_rollouts=1, push=False, rich=None, output_dir=tmp_path, select={"limit": limit},
        )
        episodes = asyncio.run(run_eval(config))
        return episodes, server.requests


def test_loader_resolves_env_modules_by_id():
    assert loaders.taskset_class("letters-test").__name__ == "LettersTestTaskset"
    assert loaders.environment_class("letters-test") is vf.SingleAgentEnv  # single-turn: the stock env
    assert loaders.environment_class("count-test").__name__ == "CountTestEnv"
    assert loaders.default_harness_id("count-test") == "count-test"  # the bundled null harness, not bash


def test_taskset_config_takes_env_options_and_split_from_toml_keys():
    config_type = loaders.taskset_config_type("letters-test")
    taskset = loaders.load_taskset(config_type(id="letters-test", rows=3, split="validation"))
    tasks = list(taskset)
    assert len(tasks) == 4  # the validation split has 4 rows; rows=3 sizes the train split
    assert tasks[0].data.row["row_id"] == 100 and tasks[0].data.env_options == {"rows": 3, "dead_component": False, "recommend": {}, "task": "spell"}
    assert [m.content for m in tasks[0].data.prompt] == ["Write a letter."]  # PROMPTS[100 % 6]
    assert len(list(loaders.load_taskset(config_type(id="letters-test", rows=3)))) == 3  # default: train
    with pytest.raises(ValueError, match="did you mean 'rows'"):
        config_type(id="letters-test", rowz=3)
    with pytest.raises(ValueError, match="Input should be 'train' or 'validation'"):  # in the config, before any task
        config_type(id="letters-test", split="test")


def test_importing_an_env_module_does_not_import_verifiers(plugin_env):
    code = "import sys, letters_test, count_test; assert 'verifiers' not in sys.modules, 'eager import'"
    subprocess.run([sys.executable, "-c", code], env=plugin_env, check=True, timeout=60)


def test_single_turn_rollouts_are_scored_per_component_with_weights_and_unscored_left_none(tmp_path, monkeypatch):
    env = tomllib.loads(
        """
        [env.taskset]
        id = "letters-test"
        split = "validation"
        dead_component = true                     # an env option, validated by the env's StrictConfig
        task.rewards.brevity = { weight = 0.1 }   # reweight one component without code
        [env.agent.runtime]
        type = "subprocess"
        """
    )["env"]
    episodes, requests = run_vf_eval(tmp_path, monkeypatch, env, limit=2)
    assert requests == 2
    for episode in episodes:
        (trace,) = episode.traces
        assert trace.ok, trace.errors
        assert trace.last_reply == "1 apples"
        assert trace.rewards["letters"].score == pytest.approx(6 / 8) and trace.rewards["letters"].weight == 1.0
        assert trace.rewards["brevity"].score == pytest.approx(1 - 8 / 200) and trace.rewards["brevity"].weight == 0.1
        assert trace.rewards["never"] is None  # unscored, not 0
        assert "switched off" in trace.info["unscored"]["never"]
        assert trace.reward == pytest.approx(6 / 8 + 0.1 * (1 - 8 / 200))


def test_multi_turn_episode_is_played_through_the_env_with_sibling_attempts(tmp_path, monkeypatch):
    # a TOML weight for a component the Env records once the episode is over (verifiers would look
    # for a reward method of that name and error every trace)
    env = {"taskset": {"id": "count-test", "split": "validation", "turns": 3, "task": {"rewards": {"digits": {"weight": 0.5}}}}, "n": 2}
    episodes, requests = run_vf_eval(tmp_path, monkeypatch, env, limit=1)
    (episode,) = episodes
    assert episode.ok, episode.errors
    assert len(episode.traces) == 2 and requests == 6  # two sibling episodes x three turns
    for trace in episode.traces:
        assert trace.agent.name == "agent" and trace.agent.trainable
        roles = [n.message.role for n in trace.nodes]
        assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
        assert [n.message.content for n in trace.nodes if n.message.role == "user"][1:] == ["Next number?"] * 2
        assert trace.rewards["digits"].score == 1.0 and trace.rewards["final_len"].weight == 0.2
        assert trace.rewards["digits"].weight == 0.5


def test_episode_stopped_by_an_error_errors_its_traces_and_the_other_tasks_are_scored(tmp_path, monkeypatch):
    env = {"taskset": {"id": "count-test", "split": "train", "rows": 3, "fail_starts": [1], "broken_starts": [2]}, "n": 2}
    episodes, _ = run_vf_eval(tmp_path, monkeypatch, env, limit=3)
    by_start = {e.task.data.row["start"]: e for e in episodes}
    assert by_start[0].ok, [(t.ok, t.errors, t.rewards) for t in by_start[0].traces]
    assert [t.rewards["digits"].score for t in by_start[0].traces] == [1.0, 1.0]
    faulty = by_start[1]
    assert not faulty.ok and len(faulty.traces) == 2  # both attempts kept, each errored with the reason
    for trace in faulty.traces:
        assert not trace.ok and trace.rewards["digits"] is None  # never the as-it-stands score
        assert "episode stopped by an error: RuntimeError: judge crashed (simulated fault)" in trace.errors[-1].message
    unstarted = by_start[2]  # no trace to score: the verifiers episode errors with the reason
    assert not unstarted.ok and not unstarted.traces
    assert "episode could not start: ValueError: no episode for start 2" in unstarted.errors[-1].message


class SiblingsPlugin:
    """A single-turn env with a group component, registered in-process for one test."""

    @staticmethod
    def build():
        from datasets import Dataset

        from rlplugs.envspec import EnvSpec
        from rlplugs.rewards import RewardComponent, Sample

        def distinct(samples: list[Sample]) -> list[float]:
            texts = [s.completion for s in samples]
            return [float(texts.count(t) == 1) for t in texts]

        rows = lambda: Dataset.from_list([{"prompt": [{"role": "user", "content": "Say something new."}]}])  # noqa: E731
        return EnvSpec(
            name="siblings-test", description="Sibling diversity (test).", datasets={"train": rows},
            components=[RewardComponent("length", lambda s: float(len(s.completion)), 0.5), RewardComponent("distinct", distinct, 2.0, group=True)],
            preflight_samples=lambda: [],
        )

    @rlplugs.hookimpl
    def rlplugs_register_environments(self):
        return [Registration("siblings-test", self.build, "sibling diversity (test)")]


def test_group_component_compares_sibling_attempts_in_env_finalize(tmp_path, monkeypatch):
    get_registry().register(SiblingsPlugin(), "siblings-test")
    package = tmp_path / "modules" / "siblings_test"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        '__all__ = ["SiblingsTestTaskset", "SiblingsTestEnv", "SiblingsTestHarness"]\n\n\n'
        "def __getattr__(name):\n"
        "    from rlplugs.adapters.verifiers import verifiers_export\n\n"
        '    return verifiers_export(__name__, name)\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    replies = iter(["first", "first", "third"])  # two siblings agree, so only the third is distinct
    monkeypatch.setattr(sys.modules[__name__], "numbered", lambda messages: next(replies))
    rewards = {"distinct": {"weight": 3.0}}  # a group component's weight, applied by the Env
    episodes, requests = run_vf_eval(tmp_path / "out", monkeypatch, {"taskset": {"id": "siblings-test", "task": {"rewards": rewards}}, "n": 3}, limit=1)
    (episode,) = episodes
    assert episode.ok, episode.errors
    by_reply = {t.last_reply: t for t in episode.traces}
    assert len(episode.traces) == 3 and set(by_reply) == {"first", "third"}
    assert by_reply["third"].rewards["distinct"].score == 1.0 and by_reply["third"].rewards["distinct"].weight == 3.0
    assert [t.rewards["distinct"].score for t in episode.traces].count(0.0) == 2
    assert by_reply["third"].rewards["length"].score == 5.0  # per-trace component scored by the Task


def test_the_shared_chat_program_script_is_written_once_and_never_rewritten(tmp_path, monkeypatch):
    """Rollouts start the same script while later rollouts prepare it: a rewrite in place (what
    the runtime's own ``write`` does) lets a starting interpreter read an empty file."""
    from verifiers.v1.runtimes import subprocess as runtimes

    from rlplugs.adapters.verifiers import _ThisInterpreter

    monkeypatch.setattr(runtimes, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(runtimes.SubprocessRuntime, "scripts_dir", str(tmp_path / "scripts"))
    local = runtimes.SubprocessRuntime(runtimes.SubprocessConfig())
    asyncio.run(local.start())
    runtime = _ThisInterpreter(local)
    script = "print('hello from the chat program')\n" * 100

    async def prepare_many() -> list[list[str]]:
        return await asyncio.gather(*(runtime.prepare_uv_script(script) for _ in range(16)))

    commands = asyncio.run(prepare_many())
    assert all(c == [sys.executable, commands[0][1]] for c in commands)
    path = tmp_path / "scripts" / commands[0][1].rsplit("/", 1)[1]
    assert path.read_text() == script and [p.name for p in path.parent.iterdir()] == [path.name]  # no temp left
    before = path.stat()
    asyncio.run(prepare_many())
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not touched again
    out = subprocess.run(commands[0], capture_output=True, text=True, timeout=60)
    assert out.stdout.count("hello from the chat program") == 100


def test_vf_eval_scores_16_concurrent_reference_rollouts_each_1_1(tmp_path, monkeypatch):
    """The README's ``vf-eval factorio-build --env.agent.runtime.type subprocess`` at its default
    concurrency: the 16 rollouts share one chat-program script, which must never be read while
    being rewritten (it was, and 4-5 of 16 rollouts ran nothing and scored 0 as valid)."""
    import json
    from pathlib import Path

    from factorio_build import reference

    monkeypatch.setenv("RLPLUGS_TEST_KEY", "local")
    with serve_policy(reference.reference_policy, idle_timeout_s=600) as server:
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("vf-eval")), "factorio-build", "--env.agent.runtime.type", "subprocess",
             "--no-push", "-m", "scripted", "--client.base-url", server.base_url, "--client.api-key-var", "RLPLUGS_TEST_KEY",
             "--env.taskset.split", "holdout", "--env.taskset.eval-rows", "16", "-n", "16", "-o", str(tmp_path)],
            capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    [traces] = tmp_path.rglob("traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text().splitlines()]
    assert len(episodes) == 16 and all(e["ok"] and len(e["traces"]) == 1 for e in episodes)
    rewards = [sum(r["score"] * r["weight"] for r in e["traces"][0]["rewards"].values()) for e in episodes]
    assert [round(r, 6) for r in rewards] == [1.1] * 16


def test_optional_tuple_options_and_optional_nested_options_take_json_lists():
    """A tuple option typed ``tuple[...] | None``, or one inside a nested ``Model | None``, gets its
    command-line JSON text parsed as a plain tuple option does; other strings are left alone."""
    from pydantic import BaseModel

    from rlplugs.adapters.verifiers import json_tuples

    class Rules(BaseModel):
        stopwords: tuple[str, ...] | None = None

    class Options(BaseModel):
        games: tuple[str, ...] | None = None
        rules: Rules | None = None
        note: str | None = None

    raw = {"games": '["wordle", "taboo"]', "rules": {"stopwords": '["a", "the"]'}, "note": '["kept"]'}
    options = Options.model_validate(json_tuples(Options, raw))
    assert options.games == ("wordle", "taboo") and options.rules.stopwords == ("a", "the")
    assert options.note == '["kept"]'


@pytest.mark.parametrize(
    "flag, value, shown",
    [
        ("games", '["wordle", nope', "games: '[\"wordle\", nope' is not a JSON list"),
        ("games", "wordle", "Input should be a valid tuple"),
        ("rule-options.taboo-stopwords", '["a",', "taboo_stopwords: '[\"a\",' is not a JSON list"),  # nested
        ("split", "tset", "Input should be 'train', 'validation' or 'test' (got 'tset')"),
        # the env's own validator: a traceback when the tasks loaded
        ("games", '["wordl"]', "invalid 'clembench-games' options: games: unknown game 'wordl' (did you mean 'wordle'?)"),
        # passed the config check, then a traceback about the eval protocol's rows; doubled the rows
        ("games", "[]", "games: no game: name at least one of wordle,"),
        ("games", '["wordle", "taboo", "wordle"]', "games: wordle named more than once: name each game once"),
        ("sft-data", "/nonexistent.jsonl", "sft_data: /nonexistent.jsonl: no such file; write it with `rlplugs games sft-data`"),
        ("rule-options.taboo-stopword", "[]", "'rule_options.taboo_stopword' (did you mean 'rule_options.taboo_stopwords'"),
    ],
)
def test_a_bad_option_on_the_vf_eval_command_line_is_verifiers_config_error(flag, value, shown, tmp_path):
    """A tuple option must be a JSON list (a well-formed one is the acceptance matrix's
    ``--env.taskset.games '["referencegame"]'``), a split one of the env's."""
    from pathlib import Path

    proc = subprocess.run(
        [str(Path(sys.executable).with_name("vf-eval")), "clembench-games", f"--env.taskset.{flag}", value, "--no-push",
         "-m", "none", "-o", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    text = " ".join((proc.stdout + proc.stderr).replace("│", " ").split())  # the error box, unwrapped
    assert proc.returncode != 0 and shown in text and "Traceback" not in text


@pytest.mark.parametrize("env, rewards, shown", [
    ("letters-test", {"brevty": {"weight": 0.1}}, "task.rewards: 'brevty' (did you mean 'brevity'?) is no reward component of 'letters-test'"),
    ("count-test", {"digits": {"fn": "os:getcwd"}}, "task.rewards.digits: 'count-test' records 'digits' once its episodes are scored"),
])  # fmt: skip
def test_task_rewards_that_name_no_component_are_refused_when_the_config_is_read(env, rewards, shown):
    """Such an entry passed verifiers' config check and errored every trace of the run."""
    config = loaders.taskset_config_type(env)
    with pytest.raises(ValueError, match=re.escape(shown)):
        config(id=env, task={"rewards": rewards})
    plugged = config(id=env, task={"rewards": {"mine": {"fn": "os:getcwd"}}})  # a new reward under its own name
    assert list(plugged.task.rewards) == ["mine"]


def test_a_system_prompt_file_is_refused_where_the_episodes_write_their_own(tmp_path):
    """A multi-turn env's seats get the game's rules as their system prompt: the file was dropped."""
    prompt = tmp_path / "system.txt"
    prompt.write_text("Answer in French.")
    with pytest.raises(ValueError, match="system_prompt: 'count-test' is multi-turn, and its episodes write each seat's"):
        loaders.taskset_config_type("count-test")(id="count-test", system_prompt=str(prompt))
    assert loaders.taskset_config_type("letters-test")(id="letters-test", system_prompt=str(prompt)).system_prompt == prompt


def test_an_env_option_renamed_in_the_taskset_config_is_named_as_typed():
    """An env option named like a verifiers taskset key is ``env_<name>`` in ``[env.taskset]``; its
    validator's refusal names that key (it said ``task:``, a key the TOML does not have)."""
    from verifiers.v1.utils import loaders

    config_type = loaders.taskset_config_type("letters-test")
    assert config_type(id="letters-test", env_task="name").env_options()["task"] == "name"
    with pytest.raises(ValueError, match=r"invalid 'letters-test' options: env_task: unknown task 'nope'; tasks: spell, name"):
        config_type(id="letters-test", env_task="nope")

"""The ``rlplugs`` console script: list, preflight, clean usage errors, plugin-added commands."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

import rlplugs
from rlplugs.tools import cli
from rlplugs.registry import Registry

RLPLUGS = shutil.which("rlplugs") or str(__import__("pathlib").Path(sys.executable).with_name("rlplugs"))


def run_cli(plugin_env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RLPLUGS, *args], env=plugin_env, capture_output=True, text=True, timeout=120)


def test_list_shows_registered_envs_with_their_plugin_and_reports_broken_plugin(plugin_env):
    out = run_cli(plugin_env, "list", "--json")
    assert out.returncode == 0, out.stderr
    listing = json.loads(out.stdout)
    envs = {e["name"]: e for e in listing["environment"]}
    assert envs["letters-test"]["plugin"] == "letters-test"
    assert envs["count-test"]["summary"].startswith("say-a-number")
    broken = {b["name"]: b for b in listing["broken"]}
    assert "broken on purpose" in broken["broken-test"]["error"]
    assert "did you mean 'rlplugs_register_environments'?" in broken["misspelled-test"]["error"]


def test_list_table_names_broken_plugin(plugin_env):
    out = run_cli(plugin_env, "list")
    assert out.returncode == 0, out.stderr
    assert "letters-test" in out.stdout and "Broken plugins" in out.stdout and "broken-test" in out.stdout


def test_preflight_passes_and_prints_each_component(plugin_env):
    out = run_cli(plugin_env, "preflight", "--env", "count-test")
    assert out.returncode == 0, out.stderr
    assert "digits" in out.stdout and "final_len" in out.stdout and "1/1" in out.stdout


def test_preflight_exits_1_naming_the_dead_component(plugin_env):
    out = run_cli(plugin_env, "preflight", "--env", "letters-test", "--env_args", '{"dead_component": true}')
    assert out.returncode == 1
    assert "'never'" in out.stderr and "switched off" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_env_is_a_clean_usage_error_with_suggestion(plugin_env):
    out = run_cli(plugin_env, "preflight", "--env", "leters-test")
    assert out.returncode == 2
    assert "Did you mean 'letters-test'" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "env_args, message",
    [('{"rowz": 1}', "did you mean 'rows'"), ("{rows: 1}", "not valid JSON"), ("[1]", "must be a JSON object")],
)
def test_bad_env_args_are_usage_errors(env_args, message, capsys):
    assert cli.main(["preflight", "--env", "letters-test", "--env_args", env_args]) == 2
    assert message in capsys.readouterr().err


def test_plugin_hook_adds_a_subcommand(monkeypatch, capsys):
    class HelloPlugin:
        @rlplugs.hookimpl
        def rlplugs_add_cli_commands(self, subparsers):
            p = subparsers.add_parser("hello", help="say hello")
            p.add_argument("--name", default="world")
            p.set_defaults(func=lambda args: print(f"hello {args.name}") or 0)

    registry = Registry()
    registry.register(HelloPlugin(), "hello-plugin")
    monkeypatch.setattr(cli, "get_registry", lambda: registry)
    assert cli.main(["hello", "--name", "rl"]) == 0
    assert "hello rl" in capsys.readouterr().out


def test_training_commands_forward_every_argument_to_the_trl_launcher(monkeypatch):
    seen = {}

    def fake_launch(command, argv):  # the launcher itself is tested in the TRL adapter's tests
        seen["call"] = (command, argv)
        return 0

    monkeypatch.setattr(cli, "run_training", fake_launch)
    assert cli.main(["grpo", "--env", "letters-test", "--max_steps", "2", "--help"]) == 0
    assert seen["call"] == ("grpo", ["--env", "letters-test", "--max_steps", "2", "--help"])

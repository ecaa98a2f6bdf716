"""rlplugs: plugins for existing LLM RL trainers (TRL, prime-rl/verifiers).

The core (this package) knows no environment by name: environments, reward components, guidance
strategies and checkpoint fixups all arrive through the ``rlplugs`` entry-point group and the
hooks in :mod:`rlplugs.hookspecs`.

This module is the plugin contract: everything an environment or another plugin needs is
importable from here (``from rlplugs import EnvSpec, Registration, StrictConfig, ...``), and
plugins import nothing else of rlplugs (``tests/test_contract.py`` checks it). The names are
loaded on first use (a module ``__getattr__``), so ``import rlplugs`` stays cheap: the ``trl``
startup hook and ``rlplugs list`` do not pay for pydantic, torch or verifiers until they need them.
"""

from __future__ import annotations

import importlib
from typing import Any

import pluggy

__version__ = "0.1.0"

#: Decorator for plugin functions implementing :mod:`rlplugs.hookspecs`.
hookimpl = pluggy.HookimplMarker("rlplugs")

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # registering and building plugins
    "Registration": "rlplugs.registry",
    "get_registry": "rlplugs.registry",
    "make_env": "rlplugs.registry",
    "StrictConfig": "rlplugs.config",
    "validate_options": "rlplugs.config",
    "parse_json_options": "rlplugs.config",
    "one_line": "rlplugs.config",
    "only_parsing": "rlplugs.config",
    # environments
    "EnvSpec": "rlplugs.envspec",
    "EvalProtocol": "rlplugs.envspec",
    "Temperature": "rlplugs.envspec",
    "TopP": "rlplugs.envspec",
    "PreflightError": "rlplugs.envspec",
    # rewards
    "RewardComponent": "rlplugs.rewards",
    "Sample": "rlplugs.rewards",
    "Score": "rlplugs.rewards",
    "Unscorable": "rlplugs.rewards",
    "TransientError": "rlplugs.rewards",
    "RetryPolicy": "rlplugs.rewards",
    "RETRYABLE": "rlplugs.rewards",
    "reason_kind": "rlplugs.rewards",
    # multi-turn episodes and who plays them
    "Episode": "rlplugs.episode",
    "StepResult": "rlplugs.episode",
    "Message": "rlplugs.episode",
    "GuardedEpisode": "rlplugs.episode",
    "guard": "rlplugs.episode",
    "start_episode": "rlplugs.episode",
    "play": "rlplugs.episode",
    "play_lockstep": "rlplugs.episode",
    "advance_until_learner": "rlplugs.episode",
    "as_batch_policy": "rlplugs.episode",
    "stop_reason": "rlplugs.episode",
    "Policy": "rlplugs.episode",
    "BatchPolicy": "rlplugs.episode",
    "Guidance": "rlplugs.episode",
    "HFPolicy": "rlplugs.tools.policies",
    "load_policy": "rlplugs.tools.policies",
    # errors a user can fix (one line, exit code 2 on the CLI) and their suggestions
    "UsageError": "rlplugs.errors",
    "UnknownPluginError": "rlplugs.errors",
    "UnknownOptionError": "rlplugs.errors",
    "InvalidOptionsError": "rlplugs.errors",
    "MissingDependencyError": "rlplugs.errors",
    "DuplicateNameError": "rlplugs.errors",
    "closest": "rlplugs.errors",
    "did_you_mean": "rlplugs.errors",
    "check_counts": "rlplugs.errors",
    "repeated": "rlplugs.errors",
    # tools plugins build their own commands on
    "run_eval": "rlplugs.tools.eval_command",
    "check_model_dir": "rlplugs.tools.eval_command",
    "model_folder_problem": "rlplugs.weights",
    "writable_dir": "rlplugs.tools.eval_command",
    "writable_file": "rlplugs.tools.eval_command",
    "unresumable": "rlplugs.weights",
    "run_script": "rlplugs.tools.cli",
    "verifiers_export": "rlplugs.adapters.verifiers",
    "UvicornThread": "rlplugs.tools.jsonhttp",
    "ServiceMetrics": "rlplugs.tools.jsonhttp",
    "PROMETHEUS_CONTENT_TYPE": "rlplugs.tools.jsonhttp",
    # shared facts
    "cache_root": "rlplugs.cache",
    "QWEN35_LORA_TARGETS": "rlplugs.qwen35",
}

__all__ = ["hookimpl", "__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rlplugs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


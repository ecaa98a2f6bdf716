"""Command-line arguments of ``rlplugs grpo`` / ``trl grpo --env`` (and the SFT variants).

TRL's parsers are dataclass-backed (:class:`trl.TrlParser`): every option here is a documented
dataclass field, so ``--help``, ``--config`` YAML files and the command line come for free. Our
fields extend TRL's own script arguments, so every stock ``trl grpo`` flag keeps working.

Two details shape this module:

- the YAML key ``env:`` is taken by TRL (it exports environment variables), so the field is
  called ``environment`` with the CLI alias ``--env``;
- an environment's ``trainer_defaults``/``model_defaults`` must apply only where the user set
  nothing. :func:`parse_with_env_defaults` installs them as parser *defaults* before parsing, so
  a YAML config (which TRL also applies as defaults, later) and the command line both override
  them, and no option needs to be compared against its dataclass default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, ScriptArguments, SFTConfig, TrlParser
from trl.scripts.grpo import GRPOScriptArguments

from rlplugs.config import parse_json_options
from rlplugs.envspec import EnvSpec
from rlplugs.registry import get_environment, get_registry
from rlplugs.rewards import RewardComponent


@dataclass
class EnvArguments:
    """Which rlplugs environment to train on, and how."""

    environment: str | None = field(
        default=None,
        metadata={
            "help": "Registered rlplugs environment to train on (see `rlplugs list`). YAML key: `environment`.",
            "aliases": ["--env"],
        },
    )
    env_args: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Options of the environment as a JSON object, e.g. '{\"rows\": 64}'; unknown keys are errors."
        },
    )
    env_split: str = field(default="train", metadata={"help": "Dataset split of the environment to train on."})
    extra_rewards: list[str] | None = field(
        default=None,
        metadata={
            "help": "Registered reward components to add to the environment's own, as NAME or NAME:WEIGHT "
            "(e.g. `length-penalty:0.1 think-format`)."
        },
    )
    extra_reward_args: dict[str, Any] | str | None = field(
        default=None,
        metadata={"help": 'Options of the extra reward components as JSON: {"NAME": {option: value}}.'},
    )
    fixups: list[str] | None = field(
        default=None,
        metadata={"help": "Registered checkpoint fixups to attach to the trainer as callbacks."},
    )
    skip_preflight: bool = field(
        default=False,
        metadata={"help": "Skip computing every reward component on real samples before step 0."},
    )

    def __post_init__(self) -> None:
        self.env_args = parse_json_options(self.env_args, "--env_args")
        self.extra_reward_args = parse_json_options(self.extra_reward_args, "--extra_reward_args")


@dataclass
class EnvGRPOScriptArguments(GRPOScriptArguments, EnvArguments):
    """Stock ``trl grpo`` script arguments plus the rlplugs environment."""

    filter_zero_spread_groups: bool = field(
        default=False,
        metadata={
            "help": "Leave groups whose rewards have no spread (all completions equal) out of the loss and its "
            "token normalisation; they carry no gradient but would dilute the others."
        },
    )
    max_episode_turns: int = field(
        default=256,
        metadata={"help": "Multi-turn environments: stop an episode that has not ended after this many turns."},
    )

    def __post_init__(self) -> None:
        EnvArguments.__post_init__(self)


@dataclass
class EnvSFTScriptArguments(ScriptArguments, EnvArguments):
    """Stock ``trl sft`` script arguments plus the rlplugs environment and its SFT dataset."""

    sft_dataset: str | None = field(
        default=None, metadata={"help": "Which of the environment's SFT datasets to use (default: its first)."}
    )

    def __post_init__(self) -> None:
        EnvArguments.__post_init__(self)


def make_grpo_parser(prog: str | None = None) -> TrlParser:
    return TrlParser((EnvGRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


def make_sft_parser(prog: str | None = None) -> TrlParser:
    return TrlParser((EnvSFTScriptArguments, SFTConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


def check_environment(args: EnvArguments) -> None:
    """Fail fast, before anything is launched, on an unknown environment, option, extra reward or fixup."""
    from rlplugs.config import validate_options

    reg = get_registry().get("environment", args.environment)
    if reg.config is not None:
        validate_options(reg.config, dict(args.env_args or {}), owner=reg.name)
    elif args.env_args:
        reg.build(args.env_args)  # raises: the environment takes no options
    extra_components(args)
    for name in args.fixups or []:
        get_registry().get("checkpoint_fixup", name)


def extra_components(args: EnvArguments) -> list[RewardComponent]:
    """The registered components named with ``--extra_rewards NAME[:WEIGHT]``, built with their
    ``--extra_reward_args`` options."""
    options = args.extra_reward_args or {}
    names = [item.split(":", 1)[0] for item in args.extra_rewards or []]
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ValueError(f"--extra_reward_args names {unknown}, which are not in --extra_rewards {names}")
    components = []
    for item in args.extra_rewards or []:
        name, _, weight = item.partition(":")
        component = get_registry().get("reward_component", name).build(options.get(name))
        if weight:
            try:
                component.weight = float(weight)
            except ValueError:
                raise ValueError(f"--extra_rewards {item!r}: weight {weight!r} is not a number") from None
        components.append(component)
    return components


def build_env_spec(args: EnvArguments) -> EnvSpec:
    """The EnvSpec named by ``--env`` with its options, plus any ``--extra_rewards``."""
    spec = get_environment(args.environment, args.env_args)
    extra = extra_components(args)
    return spec.with_components(extra) if extra else spec


def parse_with_env_defaults(parser: TrlParser, argv: list[str] | None = None, strict: bool = True):
    """Parse twice: once to learn the environment, then with its defaults installed beneath the
    user's YAML config and command line. Returns the parsed dataclasses and the EnvSpec (or None).

    ``strict``: a default naming an option this trainer lacks is an error (GRPO, which env
    defaults are written for); otherwise it is skipped (SFT shares only some options)."""
    first = parser.parse_args_and_config(argv, fail_with_unknown_args=False)
    script_args = first[0]
    if not script_args.environment:
        return first, None
    spec = build_env_spec(script_args)
    unused = parser.set_defaults_with_config(**spec.trainer_defaults, **spec.model_defaults)
    if unused and strict:
        raise ValueError(f"env '{spec.name}' sets defaults for options this trainer does not have: {unused[::2]}")
    return parser.parse_args_and_config(argv, fail_with_unknown_args=False), spec

"""Command-line arguments of ``rlplugs grpo`` / ``trl grpo --env`` (and the SFT variants), and
every check that can run before ``accelerate launch``.

TRL's parsers are dataclass-backed (:class:`trl.TrlParser`): every option here is a documented
dataclass field, so ``--help``, ``--config`` YAML files and the command line come for free. Our
fields extend TRL's own script arguments, so every stock ``trl grpo`` flag keeps working.

Three details shape this module:

- the YAML key ``env:`` is taken by TRL (it exports environment variables), so the field is
  called ``environment`` with the CLI alias ``--env``;
- defaults come in layers, lowest first: TRL's, the environment's recommendations
  (``EnvSpec.trainer_defaults``/``model_defaults``, in TRL option names), the machine's (no
  accelerator: CPU in float32, where TRL would default to bf16 and transformers refuse it), then
  the user's YAML and command line. :func:`parse_training_args` installs the first layers as
  parser *defaults*, so YAML and CLI override them without comparing anything to a default;
- the launcher's parent process runs the same parse as every training process, so a misnamed
  recommendation, a missing model, an unknown SFT set or a malformed YAML fails there in one
  line (:class:`LaunchError` and the other ``ValueError``/``LookupError``), before any process starts.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, ScriptArguments, SFTConfig, TrlParser
from trl.scripts.grpo import GRPOScriptArguments

from rlplugs.config import parse_json_options
from rlplugs.envspec import EnvSpec
from rlplugs.errors import did_you_mean, repeated
from rlplugs.registry import build_named, make_env
from rlplugs.rewards import RewardComponent
from rlplugs.weights import model_folder_problem, unresumable


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
    reward_args: dict[str, Any] | str | None = field(
        default=None,
        metadata={"help": 'Options of the extra reward components as JSON: {"NAME": {option: value}}.'},
    )
    fixups: list[str] | None = field(
        default=None,
        metadata={"help": "Registered checkpoint fixups to attach to the trainer as callbacks."},
    )
    fixup_args: dict[str, Any] | str | None = field(
        default=None,
        metadata={"help": 'Options of the checkpoint fixups as JSON: {"NAME": {option: value}}.'},
    )
    skip_preflight: bool = field(
        default=False,
        metadata={"help": "Skip computing every reward component on real samples before step 0."},
    )

    def __post_init__(self) -> None:
        self.env_args = parse_json_options(self.env_args, "--env_args")
        self.reward_args = parse_json_options(self.reward_args, "--reward_args")
        self.fixup_args = parse_json_options(self.fixup_args, "--fixup_args")


@dataclass
class EnvGRPOScriptArguments(GRPOScriptArguments, EnvArguments):
    """Stock ``trl grpo`` script arguments plus the rlplugs environment."""

    filter_zero_spread_groups: bool = field(
        default=False,
        metadata={
            "help": "Leave groups whose rewards have no spread (all completions equal) out of the loss and its "
            "token normalisation; they carry no gradient but would dilute the others. An update left with no "
            "group skips its optimizer step, and a generation batch with none skips its forward and backward passes."
        },
    )
    compile_generation: bool = field(
        default=False,
        metadata={
            "help": "Plain generate (no vLLM, no continuous batching): static cache and a compiled decoding step, "
            "prompts bucketed by --pad_to_multiple_of (default 256); compiles once per bucket, CUDA only."
        },
    )
    sampling_logprobs: bool = field(
        default=False,
        metadata={
            "help": "Plain generate (no vLLM): record the sampler's log-probability of each token it draws "
            "(under temperature, top-k and top-p: the truncated distribution it draws from), as vLLM returns them: TRL's off_policy_mask_threshold then uses them, and "
            "the log shows their gap to the trainer's (sampling/logp_gap/mean, max) where TRL computes old log-probs."
        },
    )
    keep_sampling_mask: bool = field(
        default=False,
        metadata={
            "help": "With sampling_logprobs under top-k/top-p (top_k bounds the sets): record each token's kept set "
            "and score the trainer's log-probabilities over it alone (DeepSeek-V3.2's keep sampling mask), so old "
            "log-probabilities, loss and off_policy_mask_threshold see the truncated policy the rollouts came from."
        },
    )
    max_episode_turns: int = field(
        default=256,
        metadata={"help": "Multi-turn environments: stop an episode that has not ended after this many turns."},
    )

    def __post_init__(self) -> None:
        EnvArguments.__post_init__(self)
        if self.max_episode_turns < 1:
            raise ValueError(f"--max_episode_turns {self.max_episode_turns}: give at least 1")


@dataclass
class EnvSFTScriptArguments(ScriptArguments, EnvArguments):
    """Stock ``trl sft`` script arguments plus the rlplugs environment and its SFT dataset."""

    sft_dataset: str | None = field(
        default=None, metadata={"help": "Which of the environment's SFT datasets to use (default: its first)."}
    )

    def __post_init__(self) -> None:
        EnvArguments.__post_init__(self)


class OneLineParser(TrlParser):
    """TRL's parser, whose refusals are one line: argparse printed the whole usage of several
    hundred options before ``invalid int value: 'abc'``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}; see `{self.prog} --help`\n")


def make_grpo_parser(prog: str | None = None) -> TrlParser:
    return OneLineParser((EnvGRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


def make_sft_parser(prog: str | None = None) -> TrlParser:
    return OneLineParser((EnvSFTScriptArguments, SFTConfig, ModelConfig, DatasetMixtureConfig), prog=prog)


def extra_components(args: EnvArguments) -> list[RewardComponent]:
    """The registered components named with ``--extra_rewards NAME[:WEIGHT]``, built with their
    ``--reward_args`` options."""
    items = [item.partition(":") for item in args.extra_rewards or []]
    components = build_named("reward_component", [name for name, _, _ in items], args.reward_args, "--reward_args")
    for (name, _, weight), component in zip(items, components):
        if weight:
            try:
                component.weight = float(weight)
            except ValueError:
                raise ValueError(f"--extra_rewards '{name}:{weight}': weight {weight!r} is not a number") from None
            if not math.isfinite(component.weight):  # nan trained on a reward of 0 without a word
                raise ValueError(f"--extra_rewards '{name}:{weight}': give a finite weight")
    return components


def fixups(args: EnvArguments) -> list[Any]:
    """The checkpoint fixups named with ``--fixups``, built with their ``--fixup_args`` options."""
    names = list(args.fixups or [])
    if twice := repeated(names):  # two callbacks acting on every step
        raise ValueError(f"--fixups names {', '.join(twice)} more than once: name each fixup once")
    return build_named("checkpoint_fixup", names, args.fixup_args, "--fixup_args")


def env_from_args(args: EnvArguments) -> EnvSpec:
    """The EnvSpec named by ``--env`` with its options, plus any ``--extra_rewards``."""
    spec = make_env(args.environment, args.env_args)
    extra = extra_components(args)
    return spec.with_components(extra) if extra else spec


class LaunchError(ValueError):
    """Bad input to a training command, found before launch; shown as one line, exit code 2."""


class ParsedTraining(NamedTuple):
    """One parse of a training command: its dataclasses, the EnvSpec, and what goes to accelerate."""

    args: tuple  # (script arguments, training config, ModelConfig, DatasetMixtureConfig)
    spec: EnvSpec | None
    config_rest: list[str]  # YAML keys no dataclass knows: accelerate options (``num_processes: 2``)
    cli_rest: list[str]  # command-line flags no dataclass knows: accelerate options


def read_config_file(argv: list[str]) -> dict[str, Any] | None:
    """The ``--config`` YAML as a mapping (None without ``--config``), or a :class:`LaunchError`
    saying what is wrong with the file. TRL reads it again; this only makes its failures clear."""
    import yaml

    if "--config" not in argv:
        return None
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise LaunchError("--config needs a YAML file path")
    path = argv[i + 1]
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except FileNotFoundError:
        raise LaunchError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise LaunchError(f"config file {path} cannot be read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise LaunchError(f"config file {path} is not valid YAML ({problem}{at})") from None
    if not isinstance(config, dict):
        raise LaunchError(f"config file {path} must be a YAML mapping of option: value, not a {type(config).__name__}")
    return config


def names_env_in_env_key(config: dict[str, Any]) -> bool:
    """A YAML that names the environment under ``env:``, TRL's map of environment variables."""
    return "env" in config and not isinstance(config["env"], dict)


def check_config_file(argv: list[str]) -> None:
    """:func:`read_config_file`, ``env: NAME`` answered with the key to use instead, and rlplugs' own
    keys checked against their types (TRL hands a YAML value to the dataclass as it is: ``extra_rewards:
    length-penalty`` became one reward per letter, ``env_args: [1]`` a TypeError)."""
    import dataclasses
    import typing

    from pydantic import TypeAdapter, ValidationError

    config = read_config_file(argv) or {}
    if not config:
        return
    path = argv[argv.index("--config") + 1]
    if names_env_in_env_key(config):
        raise LaunchError(
            f"config file {path}: `env: {config['env']}` is TRL's map of environment "
            f"variables; name the rlplugs environment with `environment: {config['env']}`"
        )
    types = typing.get_type_hints(EnvArguments)
    for option in (f.name for f in dataclasses.fields(EnvArguments) if f.name in config):
        try:
            TypeAdapter(types[option]).validate_python(config[option], strict=True)
        except ValidationError:
            kind = types[option].__name__ if isinstance(types[option], type) else str(types[option]).replace("typing.", "")
            raise LaunchError(f"config file {path}: {option}: {config[option]!r} is not a {kind}") from None


def parser_options(parser: TrlParser) -> set[str]:
    """The option names (``dest``) a TRL parser knows."""
    return {a.dest for a in parser._actions if a.option_strings}


def check_recommendations(spec: EnvSpec) -> None:
    """The env's ``trainer_defaults``/``model_defaults`` must name options of rlplugs' TRL commands
    (GRPO's or SFT's); a name neither has is the environment's bug, reported before launch."""
    known = parser_options(make_grpo_parser()) | parser_options(make_sft_parser())
    unknown = [k for k in {**spec.trainer_defaults, **spec.model_defaults} if k not in known]
    if not unknown:
        return
    raise LaunchError(
        f"env '{spec.name}' recommends options the TRL trainer does not have: {did_you_mean(unknown, known)}. "
        "EnvSpec.trainer_defaults/model_defaults take TRL option names (chat-template options go in "
        "chat_template_kwargs, episode limits in max_episode_turns); fix the environment plugin"
    )


def machine_defaults() -> dict[str, Any]:
    """Defaults the machine imposes: without an accelerator, train on the CPU in float32 (TRL's
    configs default to bf16, which transformers refuses without a GPU unless ``use_cpu`` is set)."""
    import torch

    return {} if torch.accelerator.is_available() else {"use_cpu": True, "bf16": False}


def check_model_source(name: str | None) -> None:
    """``--model_name_or_path`` must be a local model directory, a Hub id, or (offline) a cached
    Hub id, so a typo fails here rather than as a hub error inside every training process."""
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not name:
        raise LaunchError("pass --model_name_or_path (a Hub id or a local model directory)")
    path = Path(name).expanduser()
    if path.is_dir():
        if problem := model_folder_problem(path):
            raise LaunchError(f"--model_name_or_path {name}: {problem}")
        return
    if path.exists():
        raise LaunchError(f"--model_name_or_path {name} is a file; pass the model's directory")
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise LaunchError(f"--model_name_or_path {name}: no such directory (and not a Hub id like Org/Name)") from None
    if constants.HF_HUB_OFFLINE and try_to_load_from_cache(name, "config.json") is None:
        raise LaunchError(
            f"--model_name_or_path {name} is no local directory and not in the Hub cache, and HF_HUB_OFFLINE=1 "
            "forbids downloading it: pass a local model directory, or download it first"
        )


#: TRL options whose out-of-range values TRL meets only inside the launched processes (a traceback
#: from the sampler, the optimizer or generate): (option, bound, whether the bound itself is out).
BOUNDS = (
    ("per_device_train_batch_size", 1, False), ("gradient_accumulation_steps", 1, False),
    ("learning_rate", 0, False), ("max_completion_length", 1, False), ("temperature", 0, True),
)  # fmt: skip
#: Why a bound holds, where the number alone does not say it. Temperature: transformers' generate
#: refuses 0; vLLM takes it as greedy, and a group of one prompt's greedy completions has no reward
#: spread, so GRPO learns nothing from it.
BOUND_REASONS = {"temperature": "GRPO learns from the spread in a group of samples; for near-greedy sampling give e.g. 0.1"}


def check_bounds(training_args) -> None:
    for name, bound, strict in BOUNDS:
        value = getattr(training_args, name, None)  # max_completion_length and temperature are GRPO's
        if value is not None and (value <= bound if strict else value < bound):
            why = f" ({BOUND_REASONS[name]})" if name in BOUND_REASONS else ""
            raise LaunchError(f"--{name} {value}: give a value {'above' if strict else 'of at least'} {bound}{why}")


def check_resume(resume_from_checkpoint: str | None) -> None:
    """``--resume_from_checkpoint`` names a folder ``Trainer`` can resume from: it reads the step record
    and the weights only after the model has loaded, and a damaged one ends the run there with a
    traceback from every process."""
    if resume_from_checkpoint is not None and (reason := unresumable(Path(resume_from_checkpoint))):
        raise LaunchError(f"--resume_from_checkpoint {reason}")


def check_output_dir(output_dir: str | None) -> None:
    """``--output_dir`` must be a folder this process can write into (``Trainer`` met it after the model
    had loaded, with a traceback from every process)."""
    from rlplugs.errors import UsageError
    from rlplugs.tools.eval_command import writable_dir

    if output_dir:
        try:
            writable_dir(output_dir, "--output_dir")
        except UsageError as exc:
            raise LaunchError(str(exc)) from None


def check_dataset_path(name: str | None) -> None:
    """A ``--dataset_name`` written as a local path must be there (datasets raised from inside the
    training process); a Hub id is left to datasets."""
    if name and name.startswith(("/", ".", "~")) and not Path(name).expanduser().exists():
        raise LaunchError(f"--dataset_name {name}: no such file or folder; give a local dataset or a Hub dataset id")


def check_training_inputs(command: str, parsed: ParsedTraining) -> None:
    """What a training script would otherwise find only after loading the model: the model
    source and, per command, where the data and rewards come from."""
    script_args, training_args, model_args, dataset_args = parsed.args
    spec = parsed.spec
    if spec is None:
        raise LaunchError(f"no environment: pass --env NAME (or use stock `trl {command}` without rlplugs)")
    check_model_source(model_args.model_name_or_path)
    check_bounds(training_args)
    check_resume(training_args.resume_from_checkpoint)
    check_output_dir(training_args.output_dir)
    check_dataset_path(script_args.dataset_name)
    user_data = bool(dataset_args.datasets or script_args.dataset_name)
    if command == "grpo" and (script_args.reward_funcs or script_args.reward_model_name_or_path):
        raise LaunchError(
            f"env '{spec.name}' brings its own reward components; add registered ones with --extra_rewards "
            "instead of --reward_funcs/--reward_model_name_or_path"
        )
    if command == "grpo":
        check_generation_backend(script_args, training_args, spec.multi_turn)
        if not user_data:
            spec.check_split(script_args.env_split)
            if training_args.eval_strategy != "no" and script_args.dataset_test_split != "test":  # TRL's default
                spec.check_split(script_args.dataset_test_split)  # an unknown one fell back to the protocol's
    if command == "sft":  # EnvArguments are shared; these were accepted and did nothing
        unused = [flag for flag, given in (("--extra_rewards", script_args.extra_rewards), ("--reward_args", script_args.reward_args),
                                           ("--skip_preflight", script_args.skip_preflight),
                                           ("--env_split", script_args.env_split != "train")) if given]  # fmt: skip
        if unused:
            raise LaunchError(f"{', '.join(unused)}: GRPO's, SFT trains on an SFT dataset (--sft_dataset) with no reward")
    if command == "sft" and not user_data:
        try:
            spec.sft_dataset_name(script_args.sft_dataset)
        except KeyError as exc:
            raise LaunchError(f"{exc.args[0]} (or pass --dataset_name)") from None
        if training_args.eval_strategy != "no":
            raise LaunchError("environment SFT datasets have no eval split; pass --eval_strategy no or a --dataset_name")


def check_generation_backend(script_args: EnvGRPOScriptArguments, training_args, episodes: bool) -> None:
    """The per-turn cap, the compile switch, sampling_logprobs and keep_sampling_mask must be ones the chosen generation backend reads
    (:func:`~rlplugs.adapters.trl.rollout.turn_cap_name`): each backend would ignore or reject
    the other's name for the cap. ``episodes``: the environment plays episodes (multi-turn)."""
    from rlplugs.adapters.trl.rollout import turn_cap_name
    from rlplugs.adapters.trl.trainer import COMPILE_CONFLICT, keep_sampling_mask_conflict, sampling_logprobs_conflict

    vllm = training_args.use_vllm
    wrong, right = turn_cap_name(not vllm), turn_cap_name(vllm)
    if wrong in (training_args.generation_kwargs or {}):
        backend = "vLLM (use_vllm true)" if vllm else "transformers generate (use_vllm false)"
        raise LaunchError(f"generation_kwargs '{wrong}' is not a {backend} option: name the per-turn cap '{right}'")
    if script_args.compile_generation and (vllm or training_args.use_transformers_continuous_batching):
        raise LaunchError(f"--{COMPILE_CONFLICT}")
    refused = sampling_logprobs_conflict(training_args) if script_args.sampling_logprobs else None
    if refused is None and script_args.keep_sampling_mask:
        refused = keep_sampling_mask_conflict(training_args, script_args.sampling_logprobs, episodes)
    if refused:
        raise LaunchError(f"--{refused}")


def parse_with_env_defaults(parser: TrlParser, argv: list[str] | None = None) -> ParsedTraining:
    """Parse a training command's arguments with the environment's and the machine's defaults
    installed beneath the user's YAML config and command line.

    An environment's recommendation for an option this command lacks is skipped (SFT has only
    some of GRPO's), once :func:`check_recommendations` knows it names an option of one of them."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    check_config_file(argv)
    machine = machine_defaults()
    parser.set_defaults_with_config(**machine)
    script_args = parse_trl(parser, argv)[0]
    spec = None
    if script_args.environment:
        spec = env_from_args(script_args)
        fixups(script_args)  # names and options checked before launch
        check_recommendations(spec)
        parser.set_defaults_with_config(**{**spec.trainer_defaults, **spec.model_defaults, **machine})
    *args, config_rest, cli_rest = parse_trl(parser, argv, separate_remaining_strings=True)
    return ParsedTraining(tuple(args), spec, config_rest, cli_rest)


def quiet_checkpointing_rename() -> None:
    """Leave out transformers 5.2x's FutureWarnings that ``gradient_checkpointing`` (and TRL's call of
    ``is_gradient_checkpointing``) are deprecated for ``activation_checkpointing``: TRL's configs
    default the old name to True, so every parse warned, two lines before every run and refusal from
    each process. The new name is no option of transformers 5.17 and older, which rlplugs supports:
    the old one is what a YAML has to keep using."""
    warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing\w*` is deprecated", category=FutureWarning)


def parse_trl(parser: TrlParser, argv: list[str], **kwargs: Any) -> tuple:
    """TRL's parse, with what to do added to its check of group sizes (the most common refusal of a
    GRPO setup, whose message names a value the user never set) and to the division by zero that a
    count of 0 meets in GRPOConfig's own checks (a bare ZeroDivisionError traceback otherwise)."""
    try:
        with warnings.catch_warnings():
            quiet_checkpointing_rename()
            return parser.parse_args_and_config(argv, return_remaining_strings=True, **kwargs)
    except ZeroDivisionError:
        raise LaunchError(
            "a count TRL divides by is 0 (num_generations, num_generations_eval or per_device_train_batch_size): "
            "give each at least 1, and num_generations at least 2"
        ) from None
    except ValueError as exc:
        if "must be divisible by num_generations" not in str(exc):
            raise
        raise LaunchError(
            f"{exc} The generation batch is per_device_train_batch_size x gradient_accumulation_steps x processes "
            "(or generation_batch_size): make it a multiple of num_generations"
        ) from None


def parse_training_args(command: str, parser: TrlParser, argv: list[str] | None = None) -> ParsedTraining:
    """:func:`parse_with_env_defaults` and every check of the inputs: what the launcher's parent
    runs before accelerate starts anything, and each training process runs again."""
    parsed = parse_with_env_defaults(parser, argv)
    check_training_inputs(command, parsed)
    return parsed

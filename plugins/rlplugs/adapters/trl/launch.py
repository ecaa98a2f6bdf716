"""Launch an rlplugs training script through ``accelerate launch``, the way ``trl <command>`` does.

The parent process parses and checks everything a training process would (see
:func:`rlplugs.adapters.trl.arguments.parse_training_args`): options our parser knows (TRL's, ours, a
``--config`` YAML) go to the training script; everything else (``--num_processes``,
``--multi_gpu``, ``--accelerate_config zero3``, ...) goes to accelerate, with
``--accelerate_config`` resolved by TRL's own helper, and must be an accelerate option. The script
runs as a module (``python -m rlplugs.adapters.trl.grpo``) in every accelerate process, so its directory
never shadows top-level modules on ``sys.path``.

A mistake in the input (unknown environment, option or model, malformed YAML, a missing extra,
...) is one line on stderr and exit code 2, before accelerate starts any process; so is an
environment whose ``trainer_defaults`` name an option the TRL trainer lacks (the plugin's bug,
:func:`~rlplugs.adapters.trl.arguments.check_recommendations`).
"""

from __future__ import annotations

from rlplugs.errors import UsageError, closest
from rlplugs.adapters.trl.arguments import LaunchError, make_grpo_parser, make_sft_parser, parse_training_args

SCRIPTS = {
    "grpo": ("rlplugs.adapters.trl.grpo", make_grpo_parser),
    "sft": ("rlplugs.adapters.trl.sft", make_sft_parser),
}


def _without(items: list[str], subsequence: list[str]) -> list[str]:
    """``items`` with the ordered ``subsequence`` taken out (the launch options among the CLI args)."""
    rest, it = [], iter(subsequence)
    want = next(it, None)
    for item in items:
        if want is not None and item == want:
            want = next(it, None)
        else:
            rest.append(item)
    return rest


def split_launch_args(command: str, argv: list[str], prog: str | None = None) -> tuple[list[str], list[str]]:
    """(accelerate launch args, training script args) for ``command``'s ``argv``, after every check
    of :func:`~rlplugs.adapters.trl.arguments.parse_training_args`. Exits on ``--help`` like any argparse program."""
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    if command not in SCRIPTS:
        raise ValueError(f"unknown training command {command!r}; choose from {', '.join(SCRIPTS)}")
    parser = SCRIPTS[command][1](prog=prog or f"rlplugs {command}")
    parsed = parse_training_args(command, parser, list(argv))
    launch_args = resolve_accelerate_config_argument(parsed.config_rest + parsed.cli_rest)
    check_launch_options(launch_args, parser)
    if command == "grpo" and parsed.args[0].keep_sampling_mask:
        check_keep_sampling_mask_model(parsed, launch_args)
    return with_cpu_threads(launch_args), _without(list(argv), parsed.cli_rest)


def check_launch_options(launch_args: list[str], parser) -> None:
    """Every option left for accelerate must be one of its own: a misspelled trainer option
    would otherwise reach ``accelerate launch`` and fail there, or be taken as its option."""
    from accelerate.commands.launch import launch_command_parser

    accelerate = {s for a in launch_command_parser()._actions for s in a.option_strings}
    for arg in launch_args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag not in accelerate:
            ours = {s for a in parser._actions for s in a.option_strings}
            hint = closest(flag, ours | accelerate, n=2)
            raise LaunchError(
                f"unknown option {flag}" + (f" (did you mean {' or '.join(hint)}?)" if hint else "")
                + f": neither a {parser.prog} option nor an accelerate launch option"
            )


def option_value(launch_args: list[str], flag: str) -> str | None:
    """The value of ``flag`` among ``launch_args`` (``--flag value`` or ``--flag=value``; the last
    one wins, as in argparse), or None."""
    value = None
    for i, arg in enumerate(launch_args):
        if arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1]
        elif arg == flag and i + 1 < len(launch_args):
            value = launch_args[i + 1]
    return value


def sharded_launch(training_args, launch_args: list[str]) -> bool:
    """Whether the training processes will shard the model: FSDP or DeepSpeed named in the training
    arguments, in accelerate's options, or in the accelerate config file it will read (its default
    one without ``--config_file``)."""
    from pathlib import Path

    import yaml
    from accelerate.commands.config import default_config_file

    if training_args.fsdp or training_args.deepspeed:
        return True
    if {a.split("=", 1)[0] for a in launch_args} & {"--use_fsdp", "--use_deepspeed"}:
        return True
    config_file = Path(option_value(launch_args, "--config_file") or default_config_file)
    try:
        config = yaml.safe_load(config_file.read_text())
    except (OSError, yaml.YAMLError):  # none, or unreadable: accelerate reports it at launch
        return False
    return isinstance(config, dict) and config.get("distributed_type") in ("FSDP", "DEEPSPEED")


def check_keep_sampling_mask_model(parsed, launch_args: list[str]) -> None:
    """``--keep_sampling_mask`` on a sharded launch, or on a model that scales its logits, is refused
    here in one line rather than in every training process. The model's config is read when it is
    local or cached; otherwise the trainer checks it once the model is loaded."""
    from transformers import AutoConfig

    from rlplugs.adapters.trl.trainer import keep_sampling_mask_model_conflict

    _, training_args, model_args, _ = parsed.args
    try:
        config = AutoConfig.from_pretrained(model_args.model_name_or_path, trust_remote_code=training_args.trust_remote_code)
    except (OSError, ValueError):
        config = None
    refused = keep_sampling_mask_model_conflict(config, sharded_launch(training_args, launch_args))
    if refused:
        raise LaunchError(f"--{refused}")


def with_cpu_threads(launch_args: list[str]) -> list[str]:
    """``launch_args`` plus ``--num_cpu_threads_per_process`` on a machine without CUDA.

    There ``accelerate launch`` starts every process with ``OMP_NUM_THREADS=1`` unless told
    otherwise, so a CPU run trains on one core of many (GRPO steps 1.7x slower on 2 cores,
    measured with the tiny Qwen3.5). The cores are shared between the processes instead, unless
    the user chose (the flag, ``OMP_NUM_THREADS``) or an accelerate config file sets the
    process count, which this parent process does not read.
    """
    import os

    import torch

    chosen = any(a.split("=")[0] in ("--num_cpu_threads_per_process", "--config_file") for a in launch_args)
    if chosen or os.environ.get("OMP_NUM_THREADS") or torch.cuda.is_available():
        return launch_args
    value = option_value(launch_args, "--num_processes")  # a malformed count is left for accelerate to report
    processes = int(value) if value is not None and value.isdigit() else 1
    threads = max(1, torch.get_num_threads() // max(1, processes))
    return [*launch_args, "--num_cpu_threads_per_process", str(threads)]


def run_training(command: str, argv: list[str], prog: str | None = None) -> int:
    """Run ``rlplugs <command> ARGS`` (``command`` is ``"grpo"`` or ``"sft"``); returns the exit
    status of the training processes (their traceback is already on stderr when it is not 0), or
    2 after one line on stderr when the input is wrong."""
    import subprocess

    from accelerate.commands.launch import launch_command, launch_command_parser

    try:
        launch_args, script_args = split_launch_args(command, argv, prog)
    except (UsageError, ValueError, LookupError) as exc:  # the user's input: unknown names, bad values, files
        report_usage_error(exc)
        return USAGE_ERROR
    module = SCRIPTS[command][0]
    try:
        launch_command(launch_command_parser().parse_args([*launch_args, "--module", module, *script_args]))
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    return 0


USAGE_ERROR = 2


def report_usage_error(exc: Exception) -> None:
    """One line on stderr: what is wrong and what to do (a KeyError's message without its quotes)."""
    from rich.console import Console
    from rich.markup import escape

    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    message = " ".join(str(message).split())  # pydantic's and others' multi-line messages, on one line
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}")

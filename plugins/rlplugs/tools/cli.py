"""The ``rlplugs`` command: inspect plugins, check an environment, evaluate, and train.

``list`` and ``preflight`` answer "what is installed" and "will this env's rewards compute"
before any compute is spent. ``eval`` runs an environment's evaluation protocol and writes a
report; ``report`` puts several such reports side by side (one table, one picture, intervals).
``grpo``/``sft`` hand every remaining argument to the TRL launcher, so TRL's own flags,
``--config`` and the accelerate options keep their meaning. Plugins add further commands
(``ckpt``, ``games``, ``prm``, ...) through the ``rlplugs_add_cli_commands`` hook; this module
never names them.

Errors a user can fix (an unknown env name, a bad option, malformed JSON) are printed as one
clean message with exit code 2, never as a traceback; any other fault as one line with exit code
1, its traceback behind ``rlplugs -v`` (:func:`run_script`, which the example scripts end in too).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rlplugs.config import parse_json_options
from rlplugs.errors import UsageError, check_counts
from rlplugs.registry import get_registry, make_env

#: Subcommands whose arguments all belong to the TRL launcher (parsed there, not here).
TRAINING_COMMANDS = ("grpo", "sft")
USAGE_ERROR = 2


def _console(err: bool = False) -> Console:
    return Console(stderr=err, highlight=False, soft_wrap=True)


def parse_env_args(text: str | None) -> dict[str, Any]:
    """``--env_args '{"rows": 4}'`` as a dict (a usage error saying what is wrong otherwise)."""
    return parse_json_options(text or None, "--env_args") or {}


# --- list -----------------------------------------------------------------------------------

KIND_TITLES = {
    "environment": "Environments",
    "reward_component": "Reward components",
    "guidance": "Guidance strategies",
    "checkpoint_fixup": "Checkpoint fixups",
}


def cmd_list(args: argparse.Namespace) -> int:
    registry = get_registry()
    tables = {kind: registry.table(kind) for kind in KIND_TITLES}  # may record more broken plugins
    if args.json:
        out = {
            kind: [{"name": r.name, "plugin": r.plugin, "summary": r.summary} for r in table.values()]
            for kind, table in tables.items()
        }
        out["broken"] = [{"name": b.name, "target": b.target, "error": b.error} for b in registry.broken]
        _console().print_json(json.dumps(out))
        return 0
    console = _console()
    for kind, title in KIND_TITLES.items():
        table = Table(title=title, title_justify="left")
        for column in ("name", "plugin", "summary"):
            table.add_column(column)
        for reg in sorted(tables[kind].values(), key=lambda r: r.name):
            table.add_row(reg.name, reg.plugin, reg.summary)
        if not tables[kind]:
            table.add_row("(none)", "", "")
        console.print(table)
    if registry.broken:
        table = Table(title="Broken plugins (not loaded; the others work)", title_justify="left", style="red")
        for column in ("plugin", "target", "error"):
            table.add_column(column)
        for b in registry.broken:
            table.add_row(b.name, b.target, escape(b.error))  # '[matrl]' in an install hint is not markup
        console.print(table)
    return 0


# --- preflight ------------------------------------------------------------------------------


def cmd_preflight(args: argparse.Namespace) -> int:
    from rlplugs.envspec import PreflightError

    spec = make_env(args.env, parse_env_args(args.env_args))
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what judges print (CHGNet does) must not break --json
            report = spec.preflight()
    except PreflightError as exc:
        _console(err=True).print(f"[red]preflight failed:[/red] {escape(str(exc))}")
        return 1
    if args.json:
        _console().print_json(json.dumps(report))
        return 0
    table = Table(title=f"Preflight: {spec.name}", title_justify="left")
    for column in ("component", "weight", "scored", "mean", "unscored reasons"):
        table.add_column(column)
    for component in spec.components:
        r = report[component.name]
        mean = sum(r["values"]) / len(r["values"]) if r["values"] else float("nan")
        table.add_row(
            component.name, f"{component.weight:g}", f"{r['scored']}/{r['of']}", f"{mean:.3f}", "; ".join(r["reasons"])
        )
    _console().print(table)
    _console().print(f"[green]ok:[/green] every reward component of '{spec.name}' computed on real samples")
    return 0


# --- eval -----------------------------------------------------------------------------------


def _add_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="registered environment name")
    p.add_argument("--env_args", help="environment options as a JSON object")
    p.add_argument("--split", help="dataset split (default: the env's eval splits)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--model", help="path of a Hugging Face model directory to evaluate")
    who.add_argument("--policy", choices=["reference"], help="'reference': the env's own reference policy")
    p.add_argument("--name", help="the policy's name in the report and in `rlplugs report` tables "
                                  "(default: the --model path, or 'reference')")
    p.add_argument("--tokenizer", help="tokenizer path (default: the model's)")
    p.add_argument("--rows", type=int, help="rows per split (default: the env's protocol)")
    p.add_argument("--samples", type=int, help="samples per row (default: the env's protocol)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default: the env's protocol)")
    p.add_argument("--top_p", type=float, help="nucleus sampling (default: the env's protocol)")
    p.add_argument("--max_new_tokens", type=int, help="tokens per reply (default: the env's protocol)")
    thinking = p.add_mutually_exclusive_group()
    thinking.add_argument("--thinking", dest="enable_thinking", action="store_true", default=None)
    thinking.add_argument("--no_thinking", dest="enable_thinking", action="store_false")
    p.add_argument("--batch_size", type=int, default=8, help="conversations per generate() call")
    p.add_argument("--compile_generation", action="store_true",
                   help="--model: decode as `rlplugs grpo --compile_generation` does (static cache, compiled "
                        "decoding attention); many times faster on a GPU")
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float16", "float32"], default="auto",
                   help="--model: the dtype it is loaded in (auto: as saved; a checkpoint trained in mixed "
                        "precision is saved in float32 and decodes faster in bfloat16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--guidance", help="registered guidance strategy (multi-turn envs), e.g. best-of-n")
    p.add_argument("--guidance_args", help='options of the guidance strategy as a JSON object, e.g. \'{"n": 4, "prm": "runs/prm"}\'')
    p.add_argument("--render", type=int, default=3, help="samples the env renders as pictures (if it can)")
    p.add_argument("--out", required=True, help="report directory")


def cmd_eval(args: argparse.Namespace) -> int:
    from rlplugs.tools.eval_command import run_eval

    check_counts(args, rows=1, samples=1, render=0)
    run_eval(
        args.env, args.out, env_args=parse_env_args(args.env_args), split=args.split, model=args.model,
        policy=args.policy, tokenizer=args.tokenizer, rows=args.rows, samples=args.samples,
        temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
        enable_thinking=args.enable_thinking, batch_size=args.batch_size, compile_generation=args.compile_generation,
        dtype=args.dtype, seed=args.seed, guidance=args.guidance,
        guidance_args=parse_json_options(args.guidance_args, "--guidance_args"), render=args.render, name=args.name,
    )  # fmt: skip
    return 0


def parse_pair(text: str, flag: str) -> tuple[str, str]:
    """``RUN=BASE`` as ``(RUN, BASE)``; anything else is a usage error naming ``flag``."""
    run, sep, base = (x.strip() for x in text.partition("="))
    if not (sep and run and base):
        raise UsageError(f"{flag} takes RUN=BASE pairs separated by commas, not {text!r}")
    return run, base


def cmd_report(args: argparse.Namespace) -> int:
    from rich.table import Table

    from rlplugs.tools.eval_command import writable_dir
    from rlplugs.tools.report import difference_text, write_comparison

    labels = [x.strip() for x in args.labels.split(",")] if args.labels else None
    against = dict(parse_pair(x, "--against") for x in args.against.split(",")) if args.against else None
    table = write_comparison(args.runs, writable_dir(args.out, "--out"), labels, args.metric, args.title or "", against)
    shown = Table("run", "env", "policy", "split", "metric", "rows", "mean", "95% interval",
                  "difference (paired 95%)", title=f"written to {args.out}")
    for r in table:
        ci = f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]" if r["ci95"] else "n/a"
        mean = "n/a" if r["mean"] is None else f"{r['mean']:.3f}"
        shown.add_row(r["run"], str(r["env"]), str(r["policy"]), r["split"], r["metric"], str(r["rows"]), mean, ci,
                      difference_text(r))
    _console().print(shown)
    return 0


# --- training (delegated to the TRL launcher) ------------------------------------------------


def run_training(command: str, argv: list[str]) -> int:
    """``rlplugs grpo|sft ...``: everything after the command goes to the TRL launcher."""
    from rlplugs.adapters.trl.launch import run_training as launch

    return launch(command, argv)


# --- parser and entry point -----------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlplugs", description="Plugins for existing LLM RL trainers (TRL, prime-rl/verifiers)."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="registered environments, rewards, guidance, fixups (and broken plugins)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("preflight", help="compute every reward component of an env on real samples")
    p.add_argument("--env", required=True)
    p.add_argument("--env_args", help="environment options as a JSON object")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("eval", help="run an env's evaluation protocol and write a report")
    _add_eval_arguments(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("report", help="one table and picture across several evaluations, with row-bootstrap intervals")
    p.add_argument("runs", nargs="+", metavar="RUN", help="evaluation folders (`rlplugs eval --out`)")
    p.add_argument("--out", required=True, help="where comparison.{md,json,png} go")
    p.add_argument("--labels", help="comma-separated names of the runs (default: folder names)")
    p.add_argument("--metric", help="reward component to compare (default: each env's success component)")
    p.add_argument("--title", help="title of the picture")
    p.add_argument("--against", metavar="RUN=BASE,...",
                   help="measure each RUN from BASE (paired) instead of from the first run on its rows, "
                        "e.g. grpo93=sft93,grpo800=sft800 for two training chains in one table")  # fmt: skip
    p.set_defaults(func=cmd_report)

    for command in TRAINING_COMMANDS:
        # Parsed by the TRL launcher (see main); listed here so `rlplugs --help` shows them.
        sub.add_parser(command, help=f"TRL {command.upper()} on an env: rlplugs {command} --env NAME [TRL flags]", add_help=False)

    get_registry().add_cli_commands(sub)
    return parser


def run_script(fn: Callable[[], int | None], traceback_hint: str = "set RLPLUGS_TRACEBACK=1 and rerun",
               traceback: bool | None = None) -> int:
    """``fn()`` as a command's exit code, with no traceback for its user: a :class:`UsageError` is
    one line and exit code 2; any other fault one line (its type and message, and ``traceback_hint``
    for the traceback) and exit code 1; Ctrl-C one word and the shell's 130. The ``rlplugs`` command
    and the example scripts end here (``sys.exit(run_script(main))``). ``traceback`` (default:
    ``RLPLUGS_TRACEBACK=1`` in the environment) lets a fault through with its traceback."""
    try:
        return int(fn() or 0)
    except UsageError as exc:  # unknown names and options included (rlplugs.errors)
        _console(err=True).print(f"[red]error:[/red] {escape(str(exc))}")
        return USAGE_ERROR
    except KeyboardInterrupt:  # Ctrl-C: what was written so far stays where it is
        _console(err=True).print("[red]interrupted[/red]")
        return 130
    except Exception as exc:  # a fault no check foresaw
        show = os.environ.get("RLPLUGS_TRACEBACK") == "1" if traceback is None else traceback
        if show:
            raise
        _console(err=True).print(f"[red]error:[/red] {escape(type(exc).__name__)}: {escape(str(exc))} "
                                 f"({escape(traceback_hint)} for the traceback)")
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in argv[:1] or "--verbose" in argv[:1]
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    def command() -> int:
        rest = argv[1:] if verbose else argv  # `rlplugs -v grpo ...` (what a fault's hint says to run)
        if rest and rest[0] in TRAINING_COMMANDS:
            return run_training(rest[0], rest[1:])
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help()
            return USAGE_ERROR
        return int(args.func(args) or 0)

    return run_script(command, f"rerun as `rlplugs -v {shlex.join(argv)}`", traceback=verbose or None)


if __name__ == "__main__":
    sys.exit(main())

"""``rlplugs eval`` as a function: check the inputs, build env, policy and guidance, evaluate,
write the report, print one line per split.

Why apart from :mod:`rlplugs.tools.cli`: plugin commands that are an evaluation with their own options
(``rlplugs matrl sun-eval``) call :func:`run_eval` with keywords instead of rebuilding the core
command's ``argparse.Namespace`` flag by flag. Every check runs before a model loads; what the
user can fix is a :class:`~rlplugs.errors.UsageError`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from rlplugs.errors import UsageError
from rlplugs.registry import get_registry, make_env
from rlplugs.weights import model_folder_problem


def check_model_dir(value: str, flag: str, markers: tuple[str, ...] = ("config.json", "adapter_config.json")) -> None:
    """A local model directory must exist and hold one of ``markers``: a model's ``config.json``,
    or the ``adapter_config.json`` of a LoRA run's output (transformers loads its base and the
    adapter). A value that cannot be a local path (``name``, ``org/name``) is left to transformers
    as a hub id; its load error is caught where it loads."""
    path = Path(value).expanduser()
    wanted = " or ".join(markers)
    if path.is_dir():
        if problem := model_folder_problem(path, markers):
            raise UsageError(f"{flag} {value}: {problem}")
        return
    if path.exists() or path.is_absolute() or value.startswith((".", "~")) or value.count("/") > 1:
        inside = f" ({wanted} inside)" if markers else ""
        raise UsageError(f"{flag} {value}: no such directory; give a Hugging Face model directory{inside}")


def writable_dir(value: str, flag: str) -> Path:
    """``value`` as a directory this process can write into, checked before any work whose results
    would go there. A missing one is not created here (its writer creates it), so a run that fails
    before writing, e.g. on a model that does not load, leaves no empty folder behind."""
    out = Path(value)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {value} is an existing file; give a directory (it is created if missing)")
    existing = out
    while not existing.exists():  # the nearest folder that is there; the rest is created on writing
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{flag} {value}: {existing} is a file, so no folder can be made there; give a writable directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {value}: cannot write there ({exc.strerror or exc}); give a writable directory") from None
    return out


def writable_file(value: str, flag: str) -> Path:
    """``value`` as a file this process can write, its folder checked (and created) before the work
    whose result goes there: labels or samples lost at the last step cost the whole run."""
    out = Path(value)
    if out.is_dir():
        raise UsageError(f"{flag} {value} is a directory; give the file to write")
    writable_dir(str(out.parent), f"{flag} {value}: its folder")
    return out


def run_eval(
    env: str,
    out: str,
    *,
    env_args: dict[str, Any] | None = None,
    split: str | None = None,
    model: str | None = None,
    policy: str | None = None,
    tokenizer: str | None = None,
    rows: int | None = None,
    samples: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_new_tokens: int | None = None,
    enable_thinking: bool | None = None,
    batch_size: int = 8,
    compile_generation: bool = False,
    dtype: str = "auto",
    seed: int = 0,
    guidance: str | None = None,
    guidance_args: dict[str, Any] | None = None,
    render: int = 3,
    name: str | None = None,
) -> Path:
    """Evaluate ``model`` (a model directory) or ``policy="reference"`` on env ``env`` and write the
    report into ``out``, the policy named ``name`` (default: the model's path, or "reference");
    ``None`` means the env protocol's own value. Returns the report directory."""
    from rlplugs.tools.evaluation import evaluate_to_dir, protocol_overrides

    spec = make_env(env, env_args)
    try:
        protocol = protocol_overrides(
            spec.eval, rows=rows, samples_per_row=samples, temperature=temperature, top_p=top_p,
            max_new_tokens=max_new_tokens, enable_thinking=enable_thinking,
        )  # fmt: skip
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    splits = [split] if split else list(protocol.splits)
    for wanted in splits:
        spec.check_split(wanted)
    if model:
        check_model_dir(model, "--model")
    if tokenizer:
        check_model_dir(tokenizer, "--tokenizer", markers=())
    out_dir = writable_dir(out, "--out")
    strategy = None
    if guidance:
        if not spec.multi_turn:
            raise UsageError(f"--guidance plays multi-turn episodes; env '{spec.name}' is single-turn")
        try:
            strategy = get_registry().get("guidance", guidance).build(guidance_args)
        except UsageError:
            raise
        except ValueError as exc:  # a value the strategy's factory refuses
            raise UsageError(str(exc)) from exc
    elif guidance_args:
        raise UsageError("--guidance_args without --guidance: name the strategy they are for")
    if policy == "reference":
        decoding = {"--tokenizer": tokenizer is not None, "--temperature": temperature is not None, "--top_p": top_p is not None,
                    "--max_new_tokens": max_new_tokens is not None, "--thinking/--no_thinking": enable_thinking is not None,
                    "--batch_size": batch_size != 8, "--seed": seed != 0, "--compile_generation": compile_generation,
                    "--dtype": dtype != "auto"}  # fmt: skip
        if given := [flag for flag, set_ in decoding.items() if set_]:  # taken without a word, and recorded in the report
            raise UsageError(f"{', '.join(given)} set how a --model decodes; the reference policy is no model")
        if spec.reference_policy is None:
            raise UsageError(f"env '{spec.name}' has no reference policy; pass --model PATH")
        player, policy_name = spec.reference_policy, "reference"
    elif model:
        from rlplugs.tools.policies import load_policy

        player = load_policy(
            model, tokenizer=tokenizer, temperature=protocol.temperature, top_p=protocol.top_p,
            max_new_tokens=protocol.max_new_tokens, enable_thinking=protocol.enable_thinking, seed=seed,
            batch_size=batch_size, compile_generation=compile_generation, dtype=dtype,
        )  # fmt: skip
        policy_name = model
    else:
        raise UsageError("give --model PATH or --policy reference")
    report, out_path = evaluate_to_dir(
        spec, splits, player, out_dir, protocol=protocol, policy_name=name or policy_name, guidance=strategy,
        guidance_name=guidance, render=render, progress=True,
    )  # fmt: skip
    console = Console(highlight=False, soft_wrap=True)
    for split_name, result in report["splits"].items():
        success = result["success_rate"]
        console.print(
            f"[bold]{spec.name}[/bold] {split_name}: {result['counts']['samples']} samples, "
            f"success rate {'n/a' if success is None else f'{success:.3f}'}; "
            + ", ".join(f"{k} {v:.3f}" if v is not None else f"{k} n/a" for k, v in result["components"].items())
        )
    console.print(f"report: {out_path / 'report.md'}")
    return out_path

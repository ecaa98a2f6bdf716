"""Writing an evaluation report: ``report.json``, ``report.md``, ``samples.jsonl`` and pictures.

The JSON is the record other tools read (benchmarks, model cards); the markdown is what a person
reads first; the pictures show what a mean hides (success per family, the spread of each reward
component). An environment that can draw its samples (``EnvSpec.render``) adds its own pictures
for the first few samples; a render that fails is noted in the report, never fatal.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlplugs.envspec import EnvSpec

log = logging.getLogger(__name__)


class _NoProgress:
    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, task: int, n: float = 1) -> None:
        return None


@contextlib.contextmanager
def progress_bar(enabled: bool) -> Iterator[Any]:
    """A rich progress bar (samples done / total), or a silent stand-in for library callers."""
    if not enabled:
        yield _NoProgress()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        yield bar


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def markdown(meta: dict[str, Any], splits: dict[str, dict[str, Any]]) -> str:
    p = meta["protocol"]
    lines = [
        f"# Evaluation: {meta['env']}",
        "",
        meta.get("description", ""),
        "",
        f"- policy: `{meta['policy']}`" + (f" with guidance `{meta['guidance']}`" if meta.get("guidance") else ""),
        f"- protocol: {p['rows']} rows x {p['samples_per_row']} samples, temperature {p['temperature']}, "
        f"top_p {p['top_p']}, thinking {'on' if p['enable_thinking'] else 'off'}, max_new_tokens {p['max_new_tokens']}",
        f"- success = mean of `{p['success_component']}`" if p.get("success_component") else "- success: no success component declared",
        "",
    ]
    for split, r in splits.items():
        lines += [
            f"## {split}",
            "",
            f"{r['counts']['samples']} samples from {r['counts']['rows']} rows in {r['wall_time_s']:.1f} s; "
            f"success **{_fmt(r['success_rate'])}**, weighted reward {_fmt(r['weighted_reward'])}.",
            "",
            "| component | mean (scored only) | unscored |",
            "|---|---|---|",
        ]
        for name, mean in r["components"].items():
            un = r["unscored"].get(name)
            lines.append(f"| {name} | {_fmt(mean)} | {un['count'] if un else 0} |")
        for name, un in r["unscored"].items():
            reasons = "; ".join(f"{reason} ({n})" for reason, n in un["reasons"].items())
            lines.append(f"\nUnscored `{name}`: {reasons}")
        for column, groups in r["by"].items():
            lines += ["", f"### by {column}", "", "| " + column + " | samples | success | weighted reward |", "|---|---|---|---|"]
            for value, g in groups.items():
                lines.append(f"| {value} | {g['samples']} | {_fmt(g['success_rate'])} | {_fmt(g['weighted_reward'])} |")
        for picture in r.get("pictures", []):
            lines += ["", f"![{Path(picture).stem}]({picture})"]
        if r.get("renders"):
            lines += ["", f"### {meta['env']}'s own pictures", ""]
            lines += [f"![{Path(f).stem}]({f})" if f.endswith(".png") else f"- [{Path(f).name}]({f})" for f in r["renders"]]
        for error in r.get("render_errors", []):
            lines.append(f"\nRender failed: {error}")
        lines.append("")
    return "\n".join(lines)


def plot_success_by(split: str, column: str, groups: dict[str, dict[str, Any]], out: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(groups)
    values = [groups[g]["success_rate"] for g in labels]
    if all(v is None for v in values):
        return None
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(labels) + 2), 3.2))
    bars = ax.bar(labels, [v or 0.0 for v in values], color="#4c72b0")
    ax.bar_label(bars, labels=[f"{_fmt(v)}\nn={groups[g]['samples']}" for g, v in zip(labels, values)], fontsize=8)
    ax.set_ylim(0, 1.25)
    ax.set_ylabel("success rate")
    ax.set_title(f"{split}: success by {column}")
    ax.tick_params(axis="x", labelrotation=45)
    fig.tight_layout()
    path = out / f"success_by_{column}_{split}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_components(split: str, records: list[dict[str, Any]], out: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(n for r in records for n in r["scores"]))
    data = {n: [r["scores"][n] for r in records if r["scores"].get(n) is not None] for n in names}
    data = {n: v for n, v in data.items() if v}
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(data) + 2), 3.2))
    ax.boxplot(list(data.values()), showmeans=True)
    values = [v for vs in data.values() for v in vs]
    ax.set_ylim(min(0.0, min(values)) - 0.05, max(1.0, max(values)) + 0.05)  # rewards mostly live in [0, 1]
    ax.set_xticks(range(1, len(data) + 1), list(data))
    ax.set_ylabel("score")
    ax.set_title(f"{split}: reward components ({len(records)} samples)")
    fig.tight_layout()
    path = out / f"components_{split}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def link(path: str | Path, out: Path) -> str:
    """``path`` as report.md in ``out`` links it: relative to ``out`` when inside it (whatever the
    working directory, ``--out`` relative or not), absolute otherwise."""
    path, out = Path(path).resolve(), out.resolve()
    return str(path.relative_to(out)) if path.is_relative_to(out) else str(path)


def render_samples(spec: EnvSpec, split: str, samples: list[Any], count: int, out: Path) -> tuple[list[str], list[str]]:
    """The env's own pictures of the first ``count`` samples; failures are returned, not raised.

    Each sample draws into its own folder (``renders/<split>/sample-<i>``): environments name
    their files after the row, and the samples of one row would overwrite each other."""
    if spec.render is None or count <= 0:
        return [], []
    files: list[str] = []
    errors: list[str] = []
    for i, sample in enumerate(samples[:count]):
        folder = out / "renders" / split / f"sample-{i}"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            files += [link(f, out) for f in spec.render(sample, folder) or []]
        except Exception as exc:  # noqa: BLE001 - a picture is never worth losing the report
            errors.append(f"sample {i}: {type(exc).__name__}: {exc}")
            log.warning("render of sample %d failed: %s", i, exc)
    return files, errors


def write_report(
    spec: EnvSpec, meta: dict[str, Any], results: dict[str, dict[str, Any]], samples: dict[str, list[Any]], out: Path, render: int = 3
) -> dict[str, Any]:
    """Write every artefact of one evaluation into ``out`` (``results`` and ``samples`` by split,
    from :func:`rlplugs.tools.evaluation.evaluate_samples`); returns the JSON-ready report."""
    out.mkdir(parents=True, exist_ok=True)
    splits: dict[str, dict[str, Any]] = {}
    with open(out / "samples.jsonl", "w") as fh:
        for split, result in results.items():
            result = dict(result)
            records = result.pop("samples", [])
            for record in records:
                fh.write(json.dumps({"split": split, **record}, default=str) + "\n")
            pictures = [plot_components(split, records, out)]
            pictures += [plot_success_by(split, column, groups, out) for column, groups in result["by"].items()]
            result["pictures"] = [p.name for p in pictures if p is not None]
            result["renders"], result["render_errors"] = render_samples(spec, split, samples.get(split, []), render, out)
            splits[split] = result
    report = {**meta, "splits": splits}
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "report.md").write_text(markdown(meta, splits))
    return report

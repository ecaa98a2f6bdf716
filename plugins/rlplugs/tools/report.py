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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlplugs.envspec import EnvSpec
from rlplugs.errors import UsageError, did_you_mean, repeated
from rlplugs.rewards import reason_kind

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


def _lengths_line(lengths: dict[str, Any] | None) -> list[str]:
    if not lengths:
        return []
    return [f"Completions: {lengths['mean_tokens']:.0f} tokens on average, at most {lengths['max_tokens']}; "
            f"**{lengths['at_cap']} of {lengths['samples']} ({lengths['at_cap_share']:.0%}) cut off at max_new_tokens**.", ""]  # fmt: skip


def _decoding_line(decoding: dict[str, Any] | None) -> list[str]:
    if not decoding:
        return []
    how = "compiled decoding (static cache)" if decoding["compiled"] else "plain generate"
    return [f"- decoding: {decoding['dtype']} weights, {how}, attention `{decoding['attention']}`"]


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
        *_decoding_line(meta.get("decoding")),
        "",
    ]
    for split, r in splits.items():
        lines += [
            f"## {split}",
            "",
            f"{r['counts']['samples']} samples from {r['counts']['rows']} rows in {r['wall_time_s']:.1f} s; "
            f"success **{_fmt(r['success_rate'])}**, weighted reward {_fmt(r['weighted_reward'])}.",
            "",
            *_lengths_line(r.get("completions")),
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


def bars_or_na(ax, xs, values: list[float | None], width: float, notes: list[str], fontsize: int = 8,
               intervals: list[Sequence[float] | None] | None = None, **bar_kw) -> None:
    """Bars labelled with their values; a missing value (nothing scored) gets no bar, only "n/a"
    at the baseline, so it cannot be read as a measured zero. ``intervals`` (``[low, high]`` or
    None per bar) are drawn as error bars, and a bar's label sits above its interval's upper end,
    where the error bar cannot cover it."""
    intervals = intervals or [None] * len(values)
    spans = [[v - ci[0], ci[1] - v] if ci and v is not None else [0.0, 0.0] for v, ci in zip(values, intervals)]
    if any(ci for ci in intervals):
        bar_kw["yerr"] = list(zip(*spans))
    heights = [float("nan") if v is None else v for v in values]
    bars = ax.bar(list(xs), heights, width, **bar_kw)
    for bar, value, ci, note in zip(bars, values, intervals, notes):
        top = 0.0 if value is None else max(value, ci[1]) if ci else value
        ax.annotate(f"{_fmt(value)}{note}", (bar.get_x() + bar.get_width() / 2, top), xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom", fontsize=fontsize)  # fmt: skip


def plot_success_by(split: str, column: str, groups: dict[str, dict[str, Any]], out: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(groups)
    values = [groups[g]["success_rate"] for g in labels]
    if all(v is None for v in values):
        return None
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(labels) + 2), 3.2))
    ax.set_xticks(range(len(labels)), labels)
    bars_or_na(ax, range(len(labels)), values, 0.8, [f"\nn={groups[g]['samples']}" for g in labels], color="#4c72b0")
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


# --- several evaluations side by side (``rlplugs report RUN...``) ----------------------------


def load_run(folder: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``report.json`` and the sample records of one evaluation folder, whose samples may be kept
    gzipped (``samples.jsonl.gz``: completions compress about 20 times, so archived results stay
    small); a folder that is not one is a :class:`~rlplugs.errors.UsageError` naming what is missing."""
    import gzip

    folder = Path(folder)
    samples = next((folder / n for n in ("samples.jsonl", "samples.jsonl.gz") if (folder / n).is_file()), None)
    if not (folder / "report.json").is_file() or samples is None:
        raise UsageError(f"{folder}: not an evaluation folder (needs report.json and samples.jsonl or samples.jsonl.gz, "
                         "as `rlplugs eval --out` writes)")  # fmt: skip
    try:
        report = json.loads((folder / "report.json").read_text())
        text = gzip.decompress(samples.read_bytes()).decode() if samples.suffix == ".gz" else samples.read_text()
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        kind = "gzipped JSON" if samples.suffix == ".gz" else "JSON"
        raise UsageError(f"{folder}: report.json or {samples.name} is not valid {kind} ({exc}); re-run the evaluation") from None
    # valid JSON of another shape: an AttributeError, or a run left out of the table without a word
    if not isinstance(report, dict) or not isinstance(report.get("splits"), dict) or not report["splits"]:
        raise UsageError(f"{folder}: report.json is no evaluation report (no splits in it); re-run the evaluation")
    if not all(isinstance(record, dict) for record in records):
        raise UsageError(f"{folder}: {samples.name} holds lines that are no sample records; re-run the evaluation")
    return report, records


def _resamples(size: int, resamples: int, seed: int) -> Any:
    """``resamples`` x ``size`` indices drawn with replacement; the same ``seed`` and ``size`` give
    the same draws, so statistics of several runs over the same items are resampled in pairs."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, size, size=(resamples, size))


def _percentile_interval(values: Any) -> tuple[float, float]:
    import numpy as np

    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def row_bootstrap(rows: list[list[float]], resamples: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile interval of the pooled mean when whole rows are resampled (a row's samples
    share a prompt and are not independent). None without a scored value."""
    import numpy as np

    rows = [r for r in rows if r]
    if not rows:
        return None
    sums = np.array([sum(r) for r in rows])
    counts = np.array([len(r) for r in rows])
    pick = _resamples(len(rows), resamples, seed)
    return _percentile_interval(sums[pick].sum(axis=1) / counts[pick].sum(axis=1))


@dataclass(frozen=True)
class BootstrapInterval:
    """A 95% percentile interval, and how many resamples were left out because the statistic was
    undefined in them (``None``: e.g. a clemscore of resampled episodes none of which was played)."""

    low: float
    high: float
    unscored: int = 0


def bootstrap_interval(statistic: Callable[[Sequence[int]], float | None], size: int, resamples: int = 2000,
                       seed: int = 0) -> BootstrapInterval | None:  # fmt: skip
    """95% percentile interval of any statistic of ``size`` items (clemscore, a difference of two
    runs' scores, ...) when the items are resampled: ``statistic`` gets the indices of one resample.
    Calls with the same ``size`` and ``seed`` draw the same resamples (paired). A resample whose
    statistic is None (nothing scored in it) is left out, never counted as 0, and counted in
    ``unscored``. None without items or without a scored resample."""
    if size < 1:
        return None
    values = [statistic(list(pick)) for pick in _resamples(size, resamples, seed)]
    scored = [v for v in values if v is not None]
    if not scored:
        return None
    return BootstrapInterval(*_percentile_interval(scored), unscored=len(values) - len(scored))


def compare_runs(folders: list[str | Path], labels: list[str] | None = None, metric: str | None = None,
                 against: dict[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """One row per (evaluation, split): the metric's mean over scored samples and its row-bootstrap
    interval. ``metric`` defaults to each run's success component. A run scored on the same rows
    of the same env and split as an earlier one also gets its difference from the first of those
    (``diff``, from run ``diff_from``) with a *paired* interval (``diff_ci95``: each resample draws
    the same rows for both), which is what says whether a training stage moved the score.
    ``against`` names another base per run (``{"grpo800": "sft800"}``): several training chains in
    one table, each stage measured from its own start."""
    from rlplugs.tools.evaluation import at_cap_share

    if labels is not None and len(labels) != len(folders):
        raise UsageError(f"--labels gives {len(labels)} names for {len(folders)} runs; give one per run")
    if labels and (twice := repeated(labels)):  # --against cannot tell them apart
        raise UsageError(f"--labels names {', '.join(twice)} more than once; give each run its own name")
    table, rows_of = [], []
    for i, folder in enumerate(folders):
        report, records = load_run(folder)
        name = metric or report.get("protocol", {}).get("success_component")
        if metric and records:  # a typo would give a table of n/a
            components = sorted({k for r in records for k in (*r.get("scores", {}), *r.get("unscored_reasons", {}))})
            if metric not in components:
                raise UsageError(f"--metric {did_you_mean([metric], components)}: {folder} has no such component; "
                                 f"its components: {', '.join(components)}")
        if not name:
            raise UsageError(f"{folder}: the env declares no success component; choose one with --metric")
        for split in report.get("splits", {}):
            by_row = scores_by_row(records, split, name)
            values = [v for vs in by_row.values() for v in vs]
            interval = row_bootstrap(list(by_row.values()))
            table.append({
                "run": labels[i] if labels else Path(folder).name, "folder": str(folder), "env": report.get("env"),
                "policy": report.get("policy"), "split": split, "metric": name, "rows": len(by_row),
                "samples": sum(1 for r in records if r.get("split") == split), "scored": len(values),
                "mean": sum(values) / len(values) if values else None,
                "ci95": list(interval) if interval else None, "reasons": common_reasons(records, split, name),
                "at_cap": at_cap_share(report["splits"][split]),
            })  # fmt: skip
            rows_of.append(by_row)
    against = against or {}
    names = list(dict.fromkeys(e["run"] for e in table))
    for name in [*against, *against.values()]:
        if name not in names:
            raise UsageError(f"--against names {did_you_mean([name], names)}, which is none of the runs: {', '.join(names)}")
    for entry, by_row in zip(table, rows_of):
        same = (entry["env"], entry["split"], entry["metric"])
        base_run = against.get(entry["run"])
        base = next((j for j, e in enumerate(table) if (e["env"], e["split"], e["metric"]) == same
                     and (base_run is None or e["run"] == base_run)), None)  # fmt: skip
        paired = base is not None and table[base] is not entry and rows_of[base].keys() == by_row.keys()
        diff = paired_difference(rows_of[base], by_row) if paired else None
        entry["diff"], entry["diff_ci95"] = (diff[0], [diff[1].low, diff[1].high]) if diff else (None, None)
        entry["diff_from"] = table[base]["run"] if diff else None
    for run, base_run in against.items():
        if not any(e["run"] == run and e["diff_from"] == base_run for e in table):
            raise UsageError(f"--against {run}={base_run}: no split of the same env has both scored on the same rows, "
                             "so there is no paired difference; pair runs evaluated on the same rows")  # fmt: skip
    return table


def scores_by_row(records: list[dict[str, Any]], split: str, metric: str) -> dict[Any, list[float]]:
    """An evaluation's scored values of ``metric`` on ``split``, by row (unscored samples left out).
    Rows are keyed by their content's digest (prompt and row), so two evaluations share keys only for the same rows;
    folders written before digests were recorded fall back to the row's position."""
    by_row: dict[Any, list[float]] = {}
    for r in records:
        if r.get("split") == split:
            value = r.get("scores", {}).get(metric)
            key = r.get("row_digest", r.get("group", r.get("index")))
            by_row.setdefault(key, []).extend([] if value is None else [value])
    return by_row


def common_reasons(records: list[dict[str, Any]], split: str, metric: str, top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` most frequent reasons the scored samples of ``split`` give for ``metric``, numbers
    written ``#`` so that "7/8 scenes" and "6/8 scenes" of one failure count together, each with its
    sample count and the metric's mean over them: what a training stage changed, not only how much."""
    groups: dict[str, list[float]] = {}
    for r in records:
        value, reason = r.get("scores", {}).get(metric), r.get("reasons", {}).get(metric)
        if r.get("split") == split and value is not None and reason:
            groups.setdefault(reason_kind(reason), []).append(value)
    ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))[:top]
    return [{"reason": reason, "samples": len(vs), "mean": sum(vs) / len(vs)} for reason, vs in ranked]


def paired_difference(before: dict[Any, list[float]], after: dict[Any, list[float]]) -> tuple[float, BootstrapInterval] | None:
    """Pooled mean of ``after`` minus that of ``before`` over the same rows, with the 95% interval
    of row resamples drawn for both alike; None when either has no scored value."""

    def pooled(runs: dict[Any, list[float]], pick: Sequence[Any]) -> float | None:
        values = [v for key in pick for v in runs[key]]
        return sum(values) / len(values) if values else None

    keys = list(before)

    def statistic(indices: Sequence[int]) -> float | None:
        pick = [keys[i] for i in indices]
        a, b = pooled(before, pick), pooled(after, pick)
        return None if a is None or b is None else b - a

    whole = statistic(range(len(keys)))
    interval = bootstrap_interval(statistic, len(keys))
    return (whole, interval) if whole is not None and interval is not None else None


def difference_text(entry: dict[str, Any]) -> str:
    """``+0.152 [+0.086, +0.217] vs sft93``, or empty for a run with no base on its rows."""
    if entry.get("diff") is None:
        return ""
    low, high = entry["diff_ci95"]
    return f"{entry['diff']:+.3f} [{low:+.3f}, {high:+.3f}] vs {entry['diff_from']}"


def comparison_markdown(table: list[dict[str, Any]], pictures: list[str]) -> str:
    lines = [
        "# Evaluations compared",
        "",
        "Means over scored samples; 95% intervals from 2000 row-bootstrap resamples (whole rows resampled).",
        "",
        "| run | env | policy | split | metric | rows | samples (scored) | mean | 95% interval | cut off at max_new_tokens | "
        "difference [paired 95% interval] from the first run on these rows or the run --against names |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        ci = f"[{_fmt(r['ci95'][0])}, {_fmt(r['ci95'][1])}]" if r["ci95"] else "n/a"
        cut = "n/a" if r.get("at_cap") is None else f"{r['at_cap']:.0%}"
        lines.append(f"| {r['run']} | {r['env']} | {r['policy']} | {r['split']} | {r['metric']} | {r['rows']} | "
                     f"{r['samples']} ({r['scored']}) | {_fmt(r['mean'])} | {ci} | {cut} | {difference_text(r)} |")  # fmt: skip
    lines += ["", *[f"![{Path(p).stem}]({p})" for p in pictures], ""]
    if any(r.get("reasons") for r in table):
        lines += ["## Why the samples scored what they did", "",
                  "The most frequent reasons the scorer gave for the metric (numbers as #): samples, mean.", ""]
        for r in table:
            given = "; ".join(f"{g['samples']} x `{g['reason']}` ({_fmt(g['mean'])})" for g in r.get("reasons", []))
            lines.append(f"- **{r['run']}** ({r['split']}): {given or 'no reasons recorded'}")
        lines.append("")
    return "\n".join(lines)


def fit_title(ax, title: str) -> None:
    """Set ``title``, each of its lines wrapped to the figure's width: a long one (a run's whole
    description, say) would otherwise run off both edges of the picture."""
    import textwrap

    fig = ax.figure
    limit = 0.95 * fig.bbox.width
    lines = title.split("\n")  # line breaks the caller wrote stay

    def width() -> float:
        return ax.title.get_window_extent(fig.canvas.get_renderer()).width

    def wrap(chars: int) -> str:
        return "\n".join(textwrap.fill(line, chars) for line in lines)

    ax.set_title(title)
    if width() <= limit:
        return
    longest = max(len(line) for line in lines)
    chars = max(10, int(longest * limit / width()))  # lines of this many characters at the mean width
    ax.set_title(wrap(chars))
    while chars > 10 and width() > limit:  # a line of wider characters than the mean: a little shorter
        chars -= 1
        ax.set_title(wrap(chars))


def plot_comparison(table: list[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """Bars per run, one colour per split, with the row-bootstrap intervals as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(dict.fromkeys(r["run"] for r in table))
    splits = list(dict.fromkeys(r["split"] for r in table))
    if all(r["mean"] is None for r in table):
        return None
    width = 0.8 / len(splits)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(runs) * max(1, len(splits) / 2) + 2), 3.6))
    for k, split in enumerate(splits):
        rows = {r["run"]: r for r in table if r["split"] == split}
        xs = [i + (k - (len(splits) - 1) / 2) * width for i, run in enumerate(runs) if run in rows]
        got = [rows[run] for run in runs if run in rows]
        bars_or_na(ax, xs, [r["mean"] for r in got], width, [""] * len(got), intervals=[r["ci95"] for r in got],
                   capsize=3, label=split, fontsize=7)  # fmt: skip
    tops = [r["ci95"][1] if r["ci95"] else (r["mean"] or 0.0) for r in table]
    if min((r["mean"] or 0.0) for r in table) >= 0:
        ax.set_ylim(0, max(1.0, *tops) * 1.15)  # room for the labels above a full bar
    ax.set_xticks(range(len(runs)), runs)
    ax.tick_params(axis="x", labelrotation=20)
    ax.set_ylabel(" / ".join(dict.fromkeys(r["metric"] for r in table)) + " (95% row-bootstrap)")
    ax.legend(fontsize=8)
    fit_title(ax, title or "evaluations compared")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_comparison(folders: list[str | Path], out: Path, labels: list[str] | None = None, metric: str | None = None,
                     title: str = "", against: dict[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """``comparison.json``, ``comparison.md`` and ``comparison.png`` for several evaluations."""
    table = compare_runs(folders, labels, metric, against)
    out.mkdir(parents=True, exist_ok=True)
    picture = plot_comparison(table, out / "comparison.png", title)
    (out / "comparison.json").write_text(json.dumps({"runs": [str(f) for f in folders], "table": table}, indent=2) + "\n")
    (out / "comparison.md").write_text(comparison_markdown(table, [picture.name] if picture else []))
    return table
